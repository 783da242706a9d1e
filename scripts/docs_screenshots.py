#!/usr/bin/env python3
"""Screenshots of the docs pages whose layout issue 35 fixed, in headless Chromium, at the
widths people read them at: look at them after a layout change.

    .venv/bin/mkdocs build --strict -q -d /tmp/site
    python scripts/docs_screenshots.py /tmp/site /tmp/shots   # then open /tmp/shots/*.png

One PNG per page and width (``index-420.png``): the home page's first screen (promise,
example, picture), the options table (it fits at 420 px), the framework table (no module
path split), the diagnosis page (the copy button clear of the output), the reports page
and the command's page.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

PAGES = {
    "index": "index.html",
    "options": "options/index.html",
    "integrations": "integrations/index.html",
    "diagnosis": "diagnosis/index.html",
    "reports": "reports/index.html",
    "cli": "cli/index.html",
}
#: width -> height of the first screen (a laptop, a tablet, two phones)
SIZES = {1280: 800, 800: 900, 420: 900, 360: 780}


def main(site: Path, out: Path) -> int:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("docs_screenshots: no chromium on PATH", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    for name, page in PAGES.items():
        for width, height in SIZES.items():
            shot = out / f"{name}-{width}.png"
            subprocess.run(
                [
                    chromium,
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--hide-scrollbars",
                    "--virtual-time-budget=3000",
                    f"--window-size={width},{height}",
                    f"--screenshot={shot}",
                    (site / page).resolve().as_uri(),
                ],
                capture_output=True,
                timeout=120,
                check=False,
            )
            print(shot if shot.exists() else f"{shot}: not written")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(main(Path(sys.argv[1]), Path(sys.argv[2])))
