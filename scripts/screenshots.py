#!/usr/bin/env python3
"""Screenshots of the HTML report and the docs pages (``DOCS_PAGES``), to look at before a
release.

    python scripts/screenshots.py [--out DIR] [--widths 1280,800,420,360] [--screens 2]

Takes each page at each width, light and dark (Chromium's ``--force-dark-mode``, which
the report and the docs theme follow through ``prefers-color-scheme``), as PNG files
``DIR/<page>-<width>-<theme>-<screen>.png``: screen 1 is the top of the page, screen 2
the next one down (a wrapper page scrolls the page in a frame: headless Chromium has no
scroll flag). A width under 500 px is shot in a frame of that width and cropped
(``MIN_WINDOW``): headless Chromium lays a narrower window out at 500 px. The reports
are the mixed run of ``scripts/report_picture.py`` (a leak, its fixed twin, an outlived
graph, an unmeasured check, an error) and a 200-test run with three leaks
(``report-200``), each also measured at every width first (``scripts/report_layout.py``:
overflow, the index's edge, tick size, the fold controls); the docs are built with
``mkdocs build`` into a temporary directory. ``DIR/index.html`` lays every shot out on
one page. Needs ``chromium`` (Debian: ``apt-get install -y chromium``) and mkdocs (the
``dev`` extra). The measures are printed, not asserted: look at the pictures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zlib
from html import escape
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from check_html_chromium import run_chromium  # noqa: E402
from report_layout import measure, problems  # noqa: E402
from report_picture import run_suite  # noqa: E402

#: The docs pages taken, by their built path.
DOCS_PAGES = {
    "home": "index.html",
    "getting-started": "getting-started/index.html",
    "reports": "reports/index.html",
    "diagnosis": "diagnosis/index.html",
    "options": "options/index.html",
    "integrations": "integrations/index.html",
    "lightning": "integrations/lightning/index.html",
    "comparison": "comparison/index.html",
}

#: A 200-test run (three leaks among 197 clean tests): the report at scale.
BIG_SUITE = """\
import minigrad as mg
import pytest

kept = []


@pytest.mark.no_graph_growth
@pytest.mark.parametrize("case", range(200))
def test_step(case):
    w = mg.Tensor([[0.5, -0.25], [0.125, 1.0]], requires_grad=True)
    loss = (mg.Tensor([[1.0, 2.0]]) @ w).tanh().sum()
    loss.backward()
    if case in (7, 42, 150):
        kept.append(loss)  # three leaks among 200 tests
"""


def run_big(directory: Path) -> Path:
    """Run ``BIG_SUITE`` in ``directory``; its HTML report."""
    (directory / "test_big.py").write_text(BIG_SUITE, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--graphleak",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:xdist",
            "-p",
            "no:cacheprovider",
            "--graphleak-probes=minigrad,gc",
            "--graphleak-html=r.html",
            "test_big.py",
        ],
        cwd=directory,
        env=env,
        capture_output=True,
        timeout=600,
        check=False,
    )
    return directory / "r.html"


#: The window's height at each width: a laptop screen, a phone's.
HEIGHTS = {1280: 900, 800: 1000, 420: 860, 360: 780}
#: Headless Chromium lays a window out at this width at least (a "360 px" window is a
#: 500 px page, cropped): a narrower page is shot in a frame of its own width, in a
#: window of this width, and the picture cropped to the frame.
MIN_WINDOW = 500

_FRAME = """<!DOCTYPE html><html><head><meta charset="utf-8"><style>
body {{ margin: 0; overflow: hidden; }}
iframe {{ position: absolute; left: 0; top: -{offset}px; width: {width};
          height: {height}px; border: 0; }}</style></head>
<body><iframe src="{url}"></iframe></body></html>"""


def shoot(
    chromium: str, work: Path, url: str, out: Path, width: int, *, dark: bool, screen: int
) -> bool:
    """One screenshot of ``url``: screen ``screen`` (1: the top) of a ``width`` window."""
    height = HEIGHTS.get(width, 900)
    target = url
    narrow = width < MIN_WINDOW
    if screen > 1 or narrow:  # the page in a frame: scrolled by the screens above, or narrow
        frame = work / f"frame-{width}-{screen}.html"
        offset = (screen - 1) * height
        frame.write_text(
            _FRAME.format(
                offset=offset,
                height=offset + height,
                url=url,
                width=f"{width}px" if narrow else "100%",
            ),
            encoding="utf-8",
        )
        target = frame.as_uri()
    flags = ["--force-dark-mode"] if dark else []
    # A profile per theme: the docs theme keeps the palette it first chose in storage.
    profile = work / ("profile-dark" if dark else "profile-light")
    run_chromium(
        chromium,
        profile,
        *flags,
        "--virtual-time-budget=3000",
        f"--window-size={max(width, MIN_WINDOW)},{height}",
        f"--screenshot={out}",
        target,
    )
    if narrow and out.is_file():
        crop_png(out, width)
    return out.is_file()


def crop_png(path: Path, width: int) -> None:
    """Keep the left ``width`` pixels of Chromium's PNG (8-bit RGB or RGBA, not
    interlaced), written back unfiltered: no imaging library needed."""
    data = path.read_bytes()
    chunks, at = [], 8
    while at < len(data):
        size = int.from_bytes(data[at : at + 4], "big")
        chunks.append((data[at + 4 : at + 8], data[at + 8 : at + 8 + size]))
        at += 12 + size
    head = next(body for kind, body in chunks if kind == b"IHDR")
    full, rows = int.from_bytes(head[0:4], "big"), int.from_bytes(head[4:8], "big")
    if head[8] != 8 or head[9] not in (2, 6) or head[12] != 0 or width >= full:
        return
    step = 4 if head[9] == 6 else 3
    raw = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    stride, prior, kept = full * step, bytearray(full * step), bytearray()
    for row in range(rows):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - step] if i >= step else 0
            up, corner = prior[i], prior[i - step] if i >= step else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                guess = left + up - corner
                near = min(
                    (abs(guess - left), 0, left),
                    (abs(guess - up), 1, up),
                    (abs(guess - corner), 2, corner),
                )
                line[i] = (line[i] + near[2]) & 255
        prior = line
        kept += b"\0" + line[: width * step]
    header = width.to_bytes(4, "big") + head[4:]

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")
        )

    path.write_bytes(
        data[:8]
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(bytes(kept)))
        + chunk(b"IEND", b"")
    )


def contact_sheet(out: Path, shots: list[Path]) -> None:
    """``out/index.html``: every shot, a row per page and theme."""
    tiles = "".join(
        f'<figure><img src="{shot.name}" loading="lazy"><figcaption>{escape(shot.stem)}'
        "</figcaption></figure>"
        for shot in shots
    )
    (out / "index.html").write_text(
        "<!DOCTYPE html><meta charset='utf-8'><title>graphleak screenshots</title><style>"
        "body{font:12px sans-serif} figure{display:inline-block;margin:4px;vertical-align:top}"
        "img{width:240px;border:1px solid #999}</style>" + tiles,
        encoding="utf-8",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "graphleak-shots")
    parser.add_argument("--widths", default="1280,800,420,360", help="comma-separated px")
    parser.add_argument("--screens", type=int, default=2, help="screens per page, from the top")
    parser.add_argument("--pages", default="", help="comma-separated page names (default: all)")
    args = parser.parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("chromium not found (Debian: apt-get install -y chromium)", file=sys.stderr)
        return 2
    widths = [int(w) for w in args.widths.split(",") if w.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="graphleak-shots-") as tmp:
        work = Path(tmp)
        (work / "run").mkdir()
        run_suite(work / "run")
        site = work / "site"
        # the docs hooks import this checkout's package, not an installed one
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        built = subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "-q", "-d", str(site)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        (work / "big").mkdir()
        reports = {"report": work / "run" / "r.html", "report-200": run_big(work / "big")}
        for name, report in reports.items():  # what the pictures should show, measured
            for width in widths:
                found = measure(chromium, report, width, work)
                print(f"{name} {width:>5} px  {found}  {'; '.join(problems(found)) or 'ok'}")
        pages = {name: report.as_uri() for name, report in reports.items()}
        if built.returncode == 0:
            pages.update({name: (site / path).as_uri() for name, path in DOCS_PAGES.items()})
        else:
            print(f"mkdocs build failed; the report only:\n{built.stderr[-1500:]}", file=sys.stderr)
        chosen = {p.strip() for p in args.pages.split(",") if p.strip()}
        shots = []
        for name, url in pages.items():
            if chosen and name not in chosen:
                continue
            for dark in (False, True):
                for width in widths:
                    for screen in range(1, args.screens + 1):
                        theme = "dark" if dark else "light"
                        out = args.out / f"{name}-{width}-{theme}-{screen}.png"
                        if shoot(chromium, work, url, out, width, dark=dark, screen=screen):
                            shots.append(out)
    contact_sheet(args.out, shots)
    print(f"{len(shots)} screenshots in {args.out} (index.html lays them out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
