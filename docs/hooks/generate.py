"""MkDocs hooks: pages generated at build time from their one source each.

- ``options.md`` from ``pytest_graphleak.options.OPTIONS`` (the option declaration);
- ``json-report.md`` from ``pytest_graphleak/report/schema.json``;
- ``catalogue.md`` from ``examples/`` and the failure text of each leaky example, made by
  running the catalogue under ``pytest --graphleak`` (cached by the sources' hash in
  ``.cache/graphleak-docs/``: a rebuild with unchanged sources takes no run at all);
- the ``graphleak`` command's help texts in ``cli.md`` and minigrad's public names in
  ``minigrad.md`` (markers ``<!-- graphleak: ... -->`` in those pages);
- real outputs in any page: ``<!-- graphleak: example test -->`` and ``<!-- graphleak:
  example output -->`` (the README's 30-second example, ``scripts/update_readme_example.py``,
  run under ``pytest --graphleak``, cached by the sources' hash as the catalogue is) and
  ``<!-- graphleak: catalogue output NAME.py -->`` (that example's failure text from the
  catalogue's run). The build also compares the README's copy of the example's output
  with the real run and warns (so ``--strict`` fails) when it is stale.

Pages that other parts of the project add (``diagnosis.md``, ``limits.md``, ``cost.md``,
``integrations/*.md``) are in the nav; one that does not exist yet is left out of the
nav with a log line instead of failing ``--strict``, and links to it read as plain text.
"""

from __future__ import annotations

import ast
import hashlib
import html
import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
BLOB = "https://github.com/pytest-graphleak/pytest-graphleak/blob/main/"
CACHE = ROOT / ".cache" / "graphleak-docs"


def _store(cached: Path, text: str) -> None:
    """Write a cache entry whole or not at all: the docs build and the test suite may run
    the same page at once (.ci/run builds the site beside the tests), and a reader must
    never see half a file."""
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, cached)


log = logging.getLogger("mkdocs.hooks.graphleak")
#: Pages in the nav that are not written yet (filled by on_config).
MISSING: set[str] = set()

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # document the checkout, not an installed copy


# -- nav: leave out pages that are not written yet -----------------------------------------
def on_config(config: Any) -> Any:
    docs_dir = Path(config["docs_dir"])
    generated = {"options.md", "json-report.md", "catalogue.md"}

    def keep(entry: Any) -> Any:
        if isinstance(entry, dict):
            kept = {}
            for title, value in entry.items():
                value = keep(value)
                if value not in (None, []):
                    kept[title] = value
            return kept or None
        if isinstance(entry, list):
            return [item for item in (keep(item) for item in entry) if item]
        if isinstance(entry, str) and entry not in generated and not (docs_dir / entry).exists():
            log.info("graphleak docs: %s is not written yet; left out of the nav", entry)
            MISSING.add(entry)
            return None
        return entry

    MISSING.clear()
    config["nav"] = keep(config["nav"])
    return config


def on_files(files: Files, config: Any) -> Files:
    pages = {
        "options.md": options_page(),
        "json-report.md": json_page(),
        "catalogue.md": catalogue_page(),
    }
    for name, content in pages.items():
        files.append(File.generated(config, name, content=content))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    markdown = _PYTEST_FAILURE.sub(lambda match: page_test_failure(markdown, match), markdown)
    markdown = _REAL_OUTPUT.sub(lambda match: real_output(match.group(1)), markdown)
    if "<!-- graphleak: cli help -->" in markdown:
        markdown = markdown.replace("<!-- graphleak: cli help -->", cli_help())
    if "<!-- graphleak: minigrad api -->" in markdown:
        markdown = markdown.replace("<!-- graphleak: minigrad api -->", minigrad_names())
    for name in MISSING:  # a link to a page not written yet reads as its text
        markdown = re.sub(rf"\[([^\]]+)\]\({re.escape(name)}(#[^)]*)?\)", r"\1", markdown)
    return markdown


# -- options -------------------------------------------------------------------------------
def options_page() -> str:
    from pytest_graphleak import options, settings

    def where(option: Any) -> str:
        places = []
        if _applies(option, "marker"):
            places.append("the marker")
        if _applies(option, "check"):
            places.append("`check()`")
        if _applies(option, "track"):
            places.append("`track()`")
        command = getattr(option, "command_flag", None)
        if command and _applies(option, "command"):
            places.append(_flag_code(f"graphleak check {command}"))
        return ", ".join(places) or "–"

    lines = [
        "# Options reference",
        "",
        "Generated from the option declaration, `OPTIONS` in `pytest_graphleak/options.py`:",
        "the same table registers the flags and ini keys, checks the marker's and the",
        "calls' keywords and makes `graphleak check`'s flags, so this page cannot drift",
        "from the code.",
        "",
        _flags_whole(_paragraph(settings.__doc__ or "", "Precedence")),
        "",
        '<div class="names-table options-table stack-table" markdown>',
        "",
        "| setting: flag, ini key | what it sets |",
        "|---|---|",
    ]
    for option in options.OPTIONS:
        metavar = getattr(option, "metavar", None)
        flag = option.flag + (f"={metavar}" if metavar else "")
        kind = getattr(option, "type", "")
        also = where(option)
        lines.append(
            f"| [`{option.key}`](#{option.key})<br>{_flag_code(flag)}<br>`{option.ini}` "
            f"| {_escape_md(_summary(option.help))}.<br>Default {_default(option)}"
            f"{f' ({kind})' if kind else ''}"
            + (f"; also a keyword of {also}" if also != "–" else "")
            + " |"
        )
    lines += ["", "</div>", ""]
    for option in options.OPTIONS:
        lines += [f"## `{option.key}`", "", f"{_flag_code(option.flag)}, ini `{option.ini}`", ""]
        lines += [_escape_md(option.help[:1].upper() + option.help[1:]) + ".", ""]
    return "\n".join(lines)


def _summary(help_text: str) -> str:
    """The first clause of an option's help (before its first ``: ``, ``; `` or its
    default), capitalised: the table's description; the section below has it all."""
    first = re.split(r": |; | \(default", help_text, maxsplit=1)[0].strip().rstrip(".,")
    return first[:1].upper() + first[1:]


def _applies(option: Any, place: str) -> bool:
    applies_to = getattr(option, "applies_to", None)
    if applies_to is not None:
        return bool(applies_to(place))
    return place in ("marker", "check") and getattr(option, "marker_keyword", False)


def _default(option: Any) -> str:
    value = option.default
    if option.key == "rss_tolerance" and isinstance(value, (int, float)):
        return f"{value / 1024**2:g} MiB per step"
    if value is None:
        return "all probes whose library is imported" if option.key == "probes" else "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"`{value}`"


def _paragraph(doc: str, first_word: str) -> str:
    """The docstring paragraph that starts with ``first_word``, as markdown."""
    for part in doc.strip().split("\n\n"):
        if part.startswith(first_word):
            return part.replace("``", "`")
    return ""


def _flags_whole(text: str) -> str:
    """Each ``--graphleak-...`` flag named in running text as ``code.flag``: a phone broke
    ``--graphleak-`` / ``steps`` at its hyphen."""
    return re.sub(r"(?<![`\w-])(--graphleak(?:-[a-z]+)*)", r'<code class="flag">\1</code>', text)


def _escape_md(text: str) -> str:
    return text.replace("|", "\\|")


def _flag_code(text: str) -> str:
    """A flag as code that never breaks at its hyphens (``--graphleak-rss-tolerance``
    broke after ``--rss-``): ``code.flag`` is ``white-space: nowrap`` in extra.css. The
    hyphens stay real hyphens, so a copied flag still works."""
    return _code_cell(text).replace("<code>", '<code class="flag">', 1)


def _code_cell(text: str) -> str:
    """Code in a table cell: an HTML ``<code>`` whose ``|`` is an entity (a backslash
    before it would show literally inside a Markdown code span)."""
    return f"<code>{html.escape(text).replace('|', '&#124;')}</code>"


# -- JSON report ---------------------------------------------------------------------------
def json_page() -> str:
    schema_path = ROOT / "pytest_graphleak" / "report" / "schema.json"
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    rows: list[tuple[str, str, str]] = []
    _walk(schema, schema, "", rows, depth=0)
    lines = [
        "# The JSON report",
        "",
        "`pytest --graphleak-report=PATH` and `graphleak check --json PATH` write this",
        f"document. The schema, [`schema.json`]({BLOB}pytest_graphleak/report/schema.json)",
        "(JSON Schema 2020-12), is the source of this page. Keys are sorted, so equal runs",
        "give equal files; non-finite numbers are written as `null`. `graphleak report PATH`",
        "reads a saved document back (see [the graphleak command](cli.md)).",
        "",
        f"**{schema.get('title', '')}.** {schema.get('description', '')}",
        "",
        "| field | type | meaning |",
        "|---|---|---|",
    ]
    lines += [f"| `{path}` | {kind} | {_escape_md(text)} |" for path, kind, text in rows]
    return "\n".join(lines) + "\n"


def _resolve(node: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        ref = node["$ref"].removeprefix("#/")
        target: Any = schema
        for part in ref.split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _type_of(node: dict[str, Any], schema: dict[str, Any]) -> str:
    node = _resolve(node, schema)
    if "const" in node:
        return f"`{json.dumps(node['const'])}`"
    if "enum" in node:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in node["enum"])
    for key in ("oneOf", "anyOf"):
        if key in node:
            return " or ".join(_type_of(option, schema) for option in node[key])
    kind = node.get("type", "any")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array":
        return f"array of {_type_of(node.get('items', {}), schema)}"
    if (
        kind == "object"
        and "properties" not in node
        and isinstance(node.get("additionalProperties"), dict)
    ):
        return f"object: name -> {_type_of(node['additionalProperties'], schema)}"
    return str(kind)


def _walk(
    node: dict[str, Any], schema: dict[str, Any], path: str, rows: list, *, depth: int
) -> None:
    node = _resolve(node, schema)
    for key in ("oneOf", "anyOf"):
        for option in node.get(key, []):
            if _resolve(option, schema).get("type") == "object":
                _walk(option, schema, path, rows, depth=depth)
    required = set(node.get("required", []))
    for name, child in node.get("properties", {}).items():
        child_path = f"{path}.{name}" if path else name
        child = _resolve(child, schema)
        note = child.get("description", "")
        if name not in required:
            note = f"(optional) {note}".strip()
        rows.append((child_path, _type_of(child, schema), note))
        _walk_into(child, schema, child_path, rows, depth=depth)


def _walk_into(
    child: dict[str, Any], schema: dict[str, Any], path: str, rows: list, *, depth: int
) -> None:
    if depth > 8:
        return
    if child.get("type") == "array":
        _walk(child.get("items", {}), schema, f"{path}[]", rows, depth=depth + 1)
    elif isinstance(child.get("additionalProperties"), dict):
        _walk(child["additionalProperties"], schema, f"{path}.<name>", rows, depth=depth + 1)
    elif "properties" in child or "oneOf" in child or "anyOf" in child:
        _walk(child, schema, path, rows, depth=depth + 1)


# -- the catalogue -------------------------------------------------------------------------
def catalogue_page() -> str:
    examples = sorted(
        path for path in (ROOT / "examples").glob("*.py") if _constants(path).get("SOURCE")
    )
    texts = _catalogue_texts(examples)
    lines = [
        "# The leak catalogue",
        "",
        f"{len(examples)} leaky training steps taken from real bug reports, each with its",
        "fixed twin, in [`examples/`]("
        f"{BLOB}examples/README.md). Every module is a pytest test module",
        "(`test_leaky` / `test_fixed`, both marked `@pytest.mark.no_graph_growth`) and",
        "exposes `leaky_step()` / `fixed_step()` for `graphleak check`.",
        "",
        "```bash",
        "pytest --graphleak examples/torch_*.py examples/minigrad_*.py",
        "```",
        "",
        "The failure texts below are **real output**: the site build runs that command",
        "and prints each `test_leaky`'s failure text. Paths are shown relative to the",
        "repository.",
        "",
        '<div class="names-table" markdown>',
        "",
        "| example | report | expected pattern | what keeps the graph |",
        "|---|---|---|---|",
    ]
    for path in examples:
        consts = _constants(path)
        lines.append(
            f"| [`{path.name}`](#{path.stem}) | {_source_link(consts.get('SOURCE', ''))} "
            f"| `{consts.get('EXPECTED_PATTERN', '')}` | `{consts.get('CULPRIT', '')}` |"
        )
    lines += ["", "</div>"]
    for path in examples:
        consts = _constants(path)
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        lines += ["", f"## {path.stem}", "", doc, ""]
        lines += [f"Source: [`examples/{path.name}`]({BLOB}examples/{path.name}).", ""]
        text = texts.get(path.name)
        if text is None:
            lines += [
                "!!! warning",
                "    No failure text: this example did not run in the "
                "site build (its backend is not installed?).",
                "",
            ]
            continue
        lines += [output_block(text)]
    return "\n".join(lines) + "\n"


def _constants(path: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    found[target.id] = node.value.value
    return found


def _source_link(source: str) -> str:
    """``owner/repo#123`` as a link to that issue or pull request; other text as it is."""
    match = re.fullmatch(r"([\w.-]+/[\w.-]+)#(\d+)", source.strip())
    if match is None:
        return source
    return f"[{source}](https://github.com/{match.group(1)}/issues/{match.group(2)})"


def _sources_hash(examples: list[Path], extra: str = "") -> str:
    digest = hashlib.sha256(sys.version.encode() + extra.encode())
    files = [
        *examples,
        *sorted((ROOT / "pytest_graphleak").rglob("*.py")),
        *sorted((ROOT / "minigrad").rglob("*.py")),
    ]
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def failure_text(check: dict[str, Any]) -> str:
    """A check's failure text as ``pytest --graphleak`` prints it without ``-v`` (no series
    block) in an 80-column terminal, paths relative to the repository."""
    from pytest_graphleak.report.text import render_text, wrapped
    from pytest_graphleak.result import CheckResult

    story = render_text(CheckResult.from_dict(check), series=False)
    return "\n".join(part for part, _ in wrapped(story.replace(str(ROOT) + os.sep, ""), 80))


#: What a catalogue text is (part of its cache key): a change to it runs the examples again.
_FAILURE_TEXT = "the failure text pytest prints without -v, in 80 columns"


def _catalogue_texts(examples: list[Path]) -> dict[str, str]:
    cached = CACHE / f"catalogue-{_sources_hash(examples, _FAILURE_TEXT)}.json"
    if cached.exists():
        data = json.loads(cached.read_text(encoding="utf-8"))
        return dict(data["texts"])
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "catalogue.json"
        command = [
            sys.executable,
            "-m",
            "pytest",
            "--graphleak",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "--continue-on-collection-errors",
            f"--graphleak-report={report}",
            *(f"examples/{path.name}::test_leaky" for path in examples),
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        document = json.loads(report.read_text(encoding="utf-8")) if report.exists() else {}
    texts: dict[str, str] = {}
    for test in document.get("tests", []):
        file = test["nodeid"].split("::")[0].removeprefix("examples/")
        for check in test["checks"]:
            texts[file] = failure_text(check)
    seconds = time.perf_counter() - started
    CACHE.mkdir(parents=True, exist_ok=True)
    data = {"seconds": seconds, "texts": texts}
    _store(cached, json.dumps(data, indent=1, sort_keys=True))
    return texts


# -- real outputs in pages: the 30-second example, catalogue failure texts -----------------
_REAL_OUTPUT = re.compile(
    r"<!-- graphleak: (example test|example output|example summary|demo log|demo verdict"
    r"|github test|github commands|github summary|catalogue output \S+) -->"
)


def _readme_script() -> Any:
    spec = importlib.util.spec_from_file_location(
        "_update_readme_example", ROOT / "scripts" / "update_readme_example.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def example_output() -> str:
    """pytest's output for the README's example (FAILURES to the end), from a real run
    cached by the sources' hash."""
    script = _readme_script()
    examples = sorted((ROOT / "examples").glob("*.py"))
    cached = CACHE / f"example-{_sources_hash(examples, script.EXAMPLE)}.txt"
    if cached.exists():
        return cached.read_text(encoding="utf-8")
    text = str(script.run_example())
    _store(cached, text)
    return text


def demo_output() -> str:
    """``graphleak demo``'s whole output (minigrad; piped, so no status line), from a
    real run cached by the sources' hash."""
    examples = sorted((ROOT / "examples").glob("*.py"))
    cached = CACHE / f"demo-{_sources_hash(examples, 'demo')}.txt"
    if cached.exists():
        return cached.read_text(encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest_graphleak", "demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        log.warning(
            "graphleak docs: graphleak demo exited %s:\n%s",
            done.returncode,
            done.stdout[-2000:] + done.stderr[-2000:],
        )
    _store(cached, done.stdout)
    return done.stdout


# The reports page's GitHub Actions example: run under GITHUB_ACTIONS=true, its workflow
# commands (stdout lines starting "::") and its step summary are shown as they came.
GITHUB_EXAMPLE = """\
import minigrad as mg
import pytest

losses = []

@pytest.mark.no_graph_growth(steps=8)
def test_accumulates():
    x = mg.Tensor([1.0, 2.0], requires_grad=True)
    loss = (x * 2).sum()
    losses.append(loss)

@pytest.mark.no_graph_growth(steps=8)
def test_clean():
    x = mg.Tensor([1.0, 2.0], requires_grad=True)
    (x * 2).sum().backward()
"""


def github_outputs() -> dict[str, str]:
    """``commands`` and ``summary`` of a real ``GITHUB_ACTIONS=true pytest --graphleak -q``
    run of GITHUB_EXAMPLE, cached by the sources' hash."""
    cached = CACHE / f"github-{_sources_hash([], GITHUB_EXAMPLE)}.json"
    if cached.exists():
        return dict(json.loads(cached.read_text(encoding="utf-8")))
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "test_leak.py").write_text(GITHUB_EXAMPLE, encoding="utf-8")
        summary = Path(tmp, "step_summary.md")
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "OMP_NUM_THREADS": "1",
            "GITHUB_ACTIONS": "true",
            "GITHUB_WORKSPACE": tmp,
            "GITHUB_STEP_SUMMARY": str(summary),
        }
        env.pop("PYTEST_ADDOPTS", None)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "--graphleak",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:randomly",
                "test_leak.py",
            ],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        commands = [line for line in done.stdout.splitlines() if line.startswith("::")]
        text = summary.read_text(encoding="utf-8") if summary.exists() else ""
    if done.returncode != 1 or not commands or not text:
        log.warning(
            "graphleak docs: the GitHub example did not leak as expected (exit %s):\n%s",
            done.returncode,
            done.stdout[-2000:] + done.stderr[-2000:],
        )
    stored = GITHUB_EXAMPLE.splitlines().index("    losses.append(loss)") + 1
    if commands and f",line={stored}," not in commands[0]:  # the page's prose names the line
        log.warning(
            "graphleak docs: the GitHub annotation is not on line %s: %s", stored, commands[0]
        )
    data = {"commands": "\n".join(commands), "summary": text}
    _store(cached, json.dumps(data, indent=1))
    return data


# `<!-- graphleak: pytest failure test_x.py [full] -->`: the failure of the page's own
# ```python block that starts with `# test_x.py`, from a real `pytest` run of it (torch and
# the framework are dev dependencies). Default: the error line, held by, created at,
# stored at (and a rank's heading); `full`: every `E` line from the error on.
# `<!-- graphleak: pytest failure test_x.py sites of PAGE.md -->` (indented in a list item):
# the held by / created at / stored at lines of that page's test, as a plain indented block.
# `<!-- graphleak: pytest warning tests/test_x.py outlive -->`: the GraphOutliveWarning of
# a `pytest --graphleak` run of the page's test (which passes).
# `<!-- graphleak: pytest failure test_x.py marker -->`: the failure text that a
# `pytest --graphleak` run of the page's marked test prints in its FAILURES section (a
# leak, or a check that measured nothing: no GraphLeakError there).
# `<!-- graphleak: pytest failure test_x.py fix [off] -->`: the `fix` line (and the lines
# it goes on in) of that failure text; `off`: run with `--graphleak-verify-fix=off`.
_PYTEST_FAILURE = re.compile(
    r"^( *)<!-- graphleak: pytest (?:failure|warning) (\S+)"
    r"( full| sites of \S+\.md| outlive| marker| fix(?: off)?)? -->",
    re.M,
)
_SHORT = ("held by:", "created at:", "stored at:", "--- rank", "graphleak:")
_SITES = ("held by:", "created at:", "stored at:")
#: A frame's location in pytest's short style (``path:line: in function``), and a banner
#: that ends a test's failure (a section's, the next test's, captured output's; a
#: distributed check's ``--- rank N ---`` heading is the story's own).
_LOCATION = re.compile(r"\S+:\d+: in \S+$")
_BANNER = re.compile(r"(?!--- rank )[=_-]{3}")


def page_test_failure(markdown: str, match: re.Match[str]) -> str:
    indent, name, mode = match.group(1), match.group(2), (match.group(3) or "").strip()
    full, sites = mode == "full", mode.startswith("sites of ")
    if sites:
        markdown = (ROOT / "docs" / mode.removeprefix("sites of ")).read_text(encoding="utf-8")
    block = re.search(rf"```python\n(# {re.escape(name)}\n.*?)```", markdown, re.S)
    if block is None:
        log.warning("graphleak docs: no ```python block starting '# %s' on the page", name)
        return f"(no output: no test {name} on this page)"
    if mode == "outlive":  # the test passes: its GraphOutliveWarning is the output
        out = _run_page_test(name, block.group(1), ["--graphleak"], 0, "GraphOutliveWarning")
        picked = outlive_lines(out, block.group(1)) if out is not None else []
        if not picked:
            return f"(no output: {name} gave no GraphOutliveWarning in this build)"
        return indent + output_block("\n".join(picked))
    if mode == "marker" or mode.startswith("fix"):  # the marker's own failure text
        args = ["--graphleak", "-W", "ignore"]
        args += ["--graphleak-verify-fix=off"] if mode == "fix off" else []
        out = _run_page_test(name, block.group(1), args, 1, "graphleak: ")
        picked = marker_failure_lines(out) if out is not None else []
        picked = fix_lines(picked) if mode.startswith("fix") else picked
        if not picked:
            return f"(no output: {name} printed no graphleak failure in this build)"
        return indent + output_block("\n".join(picked))
    out = _run_page_test(name, block.group(1), ["-W", "ignore"], 1, " leaks: ")
    if out is None:
        return f"(no output: {name} did not fail with a leak in this build)"
    picked = failure_lines(out, "sites" if sites else "full" if full else "short")
    if not picked:
        log.warning("graphleak docs: no leak's failure text in the run of %s", name)
        return f"(no output: {name} printed no leak's failure text)"
    if sites:
        return "\n".join(indent + line for line in ["```text", *picked, "```"])
    return indent + output_block("\n".join(picked))


def _run_page_test(name: str, source: str, args: list[str], code: int, want: str) -> str | None:
    """pytest's stdout for a page's test file run alone (cached by the sources' hash), or
    None, with a warning (so --strict fails), when it does not exit `code` printing `want`."""
    # an 80-column terminal, as a CI log's (part of the key: a wider one was used before)
    cached = CACHE / f"pytest-{_sources_hash([], name + source + ' '.join(args) + ' 80')}.txt"
    if cached.exists():
        return cached.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, name).parent.mkdir(parents=True, exist_ok=True)
        Path(tmp, name).write_text(source, encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80", "OMP_NUM_THREADS": "1"}
        env.pop("PYTEST_ADDOPTS", None)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:randomly",
                *args,
                name,
            ],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    out = done.stdout.replace(os.path.realpath(tmp) + os.sep, "").replace(tmp + os.sep, "")
    if done.returncode != code or want not in out:
        log.warning(
            "graphleak docs: %s did not exit %s with %s (exit %s):\n%s",
            name,
            code,
            want,
            done.returncode,
            out[-3000:] + done.stderr[-2000:],
        )
        return None
    _store(cached, out)
    return out


def outlive_lines(out: str, source: str) -> list[str]:
    """The GraphOutliveWarning of pytest's warnings summary, from its category on, without
    the location before it and the source line pytest echoes after it."""
    lines = out.splitlines()
    start = next((i for i, line in enumerate(lines) if "GraphOutliveWarning: " in line), None)
    if start is None:
        return []
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()), len(lines))
    picked = [lines[start][lines[start].index("GraphOutliveWarning: ") :]]
    picked += [line[2:] for line in lines[start + 1 : end]]
    if len(picked) > 1 and any(picked[-1].strip() == line.strip() for line in source.splitlines()):
        picked.pop()
    return picked


def marker_failure_lines(out: str) -> list[str]:
    """The first test's failure text in pytest's FAILURES section: from its ``graphleak:``
    line to the next banner. [] without one."""
    lines = out.splitlines()
    failures = next((i for i, line in enumerate(lines) if " FAILURES " in line), None)
    if failures is None:
        return []
    start = next(
        (i for i in range(failures, len(lines)) if lines[i].startswith("graphleak: ")), None
    )
    if start is None:
        return []
    end = next(
        (i for i in range(start + 1, len(lines)) if re.match(r"[=_]{3}", lines[i])), len(lines)
    )
    return lines[start:end]


def fix_lines(story: list[str]) -> list[str]:
    """A failure text's ``fix`` line and the lines it goes on in (indented deeper)."""
    start = next((i for i, line in enumerate(story) if line.startswith("  fix")), None)
    if start is None:
        return []
    end = next(
        (i for i in range(start + 1, len(story)) if not story[i].startswith("   ")), len(story)
    )
    return story[start:end]


def failure_lines(out: str, mode: str) -> list[str]:
    """The first failure of pytest's FAILURES section, a check run by the test's own code
    (the fixture, a framework callback): the user's line it failed at, then the report
    from its headline to the next banner. ``full`` all of it, ``short`` the location, the
    headline and the _SHORT lines (each with the lines it goes on in) with "..." for each
    gap, ``sites`` the held by / created at / stored at lines alone. [] without one."""
    lines = out.splitlines()
    failures = next((i for i, line in enumerate(lines) if " FAILURES " in line), None)
    if failures is None or failures + 1 >= len(lines):
        return []
    end = next((i for i in range(failures + 2, len(lines)) if _BANNER.match(lines[i])), len(lines))
    block = lines[failures + 2 : end]  # after the test's ``___ name ___`` line
    start = next(
        (
            i
            for i, line in enumerate(block)  # past the location and its source
            if not _LOCATION.match(line) and not line.startswith(" ")
        ),
        len(block),
    )
    where, story = block[:start], block[start:]
    if not story or " leaks: " not in "\n".join(story):
        return []
    if mode == "full":
        return [*where, *story]
    sites = mode == "sites"
    picked: list[str] = []
    keep = not sites  # the headline, and the lines it goes on in
    for number, line in enumerate(story):
        body = line.lstrip()
        indent = len(line) - len(body)
        if number and indent <= 2:  # a line of its own; deeper ones go on in the one above
            keep = body.startswith(_SITES if sites else _SHORT)
        if keep:
            picked.append(line[2:] if sites else line)
        elif not sites and picked[-1].strip() != "...":
            picked.append(" " * indent + "...")
    return picked if sites else [*where, *picked]


def demo_excerpt(what: str) -> str:
    """``demo log``: the first run's log lines (its first and last step); ``demo
    verdict``: the first run's verdict with its chain, sites and fix, then the summary
    table."""
    lines = demo_output().splitlines()
    if what == "demo log":
        steps = [line for line in lines if line.startswith("Step ")]
        return "\n".join(steps[:2])
    start = next((i for i, line in enumerate(lines) if line.startswith("-- verdict")), 0)
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()), len(lines))
    wanted = ("-- verdict", "  held by:", "  created at:", "  stored at:", "  fix:", "  fix (")
    picked = [line for line in lines[start:end] if line.startswith(wanted)]
    summary = next((i for i, line in enumerate(lines) if line.startswith("Summary")), len(lines))
    table = [line for line in lines[summary:] if line.strip() and not line.startswith("done in")]
    return "\n".join([*picked, "...", *table])


def github_summary_block(summary: str) -> str:
    """The step summary's markdown in a framed block of the page: its heading a bold line,
    not a heading of the page (which would enter the table of contents), and its folded
    list rendered as markdown (``md_in_html``)."""
    text = re.sub(r"^#+ (.*)$", r"**\1**", summary.strip(), flags=re.M)
    text = text.replace("<details>", '<details markdown="1">')
    return f'<div class="gh-step-summary" markdown="1">\n\n{text}\n\n</div>'


def real_output(what: str) -> str:
    """The fenced block a ``<!-- graphleak: ... -->`` marker stands for."""
    if what == "example test":
        return f"```python\n{_readme_script().EXAMPLE.rstrip()}\n```"
    if what == "example output":
        return output_block(narrow_banners(example_output()))
    if what == "example summary":  # the graphleak report section of the same run
        lines = narrow_banners(example_output()).splitlines()
        start = next((i for i, line in enumerate(lines) if " graphleak report " in line), 0)
        end = next((i for i, line in enumerate(lines) if "short test summary" in line), len(lines))
        return output_block("\n".join(lines[start:end]))
    if what == "github test":
        return f"```python\n{GITHUB_EXAMPLE.rstrip()}\n```"
    if what == "github commands":
        return output_block(github_outputs()["commands"])
    if what == "github summary":  # markdown, shown as GitHub renders it, in a frame
        return github_summary_block(github_outputs()["summary"])
    if what in ("demo log", "demo verdict"):
        return output_block(demo_excerpt(what))
    name = what.removeprefix("catalogue output ").strip()
    examples = sorted(p for p in (ROOT / "examples").glob("*.py") if _constants(p).get("SOURCE"))
    text = _catalogue_texts(examples).get(name)
    if text is None:
        log.warning("graphleak docs: no catalogue output for %s (not run in this build?)", name)
        return f"(no output: {name} did not run in this build)"
    return output_block(text)


def output_block(text: str) -> str:
    """A text block in a ``div.output``: the extra CSS wraps its lines (the highlighter
    gives ```text and ```python blocks the same classes, so the div tells them apart)."""
    return f'<div class="output" markdown>\n\n```text\n{text.rstrip()}\n```\n\n</div>'


def narrow_banners(output: str, width: int = 40) -> str:
    """pytest's section banners (``==== FAILURES ====``, ``____ test ____``) padded to
    ``width`` instead of the terminal's 120 columns, so they fit the page (a phone too)."""

    def banner(match: re.Match[str]) -> str:
        fill, title = match.group(1)[0], match.group(2)
        return f" {title} ".center(width, fill) if title else fill * width

    return re.sub(r"^([=_])\1{9,} ?(.*?) ?[=_]*$", banner, output, flags=re.M)


def comparable(output: str) -> str:
    """An output with what differs between two runs of the same code left out: durations
    and the banners' padding (which follows the summary's length)."""
    text = re.sub(r"\d+(\.\d+)?\s?s\b", "N s", output)
    text = re.sub(r"(\d+(\.\d+)?)s\b", "N s", text)
    return "\n".join(line.strip("=_ ") for line in text.splitlines()).strip()


def readme_is_current() -> bool:
    """The README's example test and output are those of a real run (durations aside)."""
    script = _readme_script()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- example:output -->\n```text\n(.*?)\n```", readme, re.S)
    return (
        block is not None
        and script.replace_block(readme, "test", "python", script.EXAMPLE) == readme
        and comparable(block.group(1)) == comparable(example_output())
    )


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """Each cell of a table in a ``div.labelled`` names its column (``data-label``), so the
    table stacked on a phone (extra.css) still says which column a cell is from."""
    return _LABELLED.sub(lambda m: label_cells(m.group(0)), html)


_LABELLED = re.compile(r'<div class="[^"]*\blabelled\b[^"]*">.*?</table>', re.S)


def label_cells(block: str) -> str:
    """``<td>`` -> ``<td data-label="column">`` in the first table of ``block``, from its
    header row."""
    head = re.search(r"<thead>(.*?)</thead>", block, re.S)
    if head is None:
        return block
    names = [
        re.sub(r"<[^>]+>", "", th).strip()
        for th in re.findall(r"<th[^>]*>(.*?)</th>", head.group(1), re.S)
    ]

    def row(match: re.Match[str]) -> str:
        cells = iter(names)
        return re.sub(
            r"<td([^>]*)>",
            lambda td: f'<td{td.group(1)} data-label="{next(cells, "")}">',
            match.group(0),
        )

    return re.sub(r"<tr>.*?</tr>", row, block, flags=re.S)


def on_post_build(config: Any) -> None:
    if not readme_is_current():
        log.warning(
            "graphleak docs: README.md's 30-second example or its output differs from "
            "a real run: run scripts/update_readme_example.py"
        )


# -- CLI help and minigrad names -----------------------------------------------------------
def cli_help() -> str:
    import argparse

    os.environ["COLUMNS"] = "88"  # argparse wraps to the terminal width: fix it
    from pytest_graphleak.cli import build_parser

    parser = build_parser()
    parts = [
        "Generated from the command's own parser.",
        "",
        "```text",
        parser.format_help().rstrip(),
        "```",
    ]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                parts += [
                    "",
                    f"### `graphleak {name} --help`",
                    "",
                    "```text",
                    sub.format_help().rstrip(),
                    "```",
                ]
    return "\n".join(parts)


def minigrad_names() -> str:
    import minigrad

    lines = [
        "Generated from `minigrad.__all__` and the docstrings.",
        "",
        "| name | what it is |",
        "|---|---|",
    ]
    for module_name, module in (
        ("mg", minigrad),
        ("mg.nn", minigrad.nn),
        ("mg.optim", minigrad.optim),
    ):
        for name in getattr(module, "__all__", []):
            value = getattr(module, name)
            if type(value).__name__ == "module":
                continue
            summary = (getattr(value, "__doc__", None) or "").strip().split("\n")[0]
            lines.append(f"| `{module_name}.{name}` | {_escape_md(summary)} |")
    return "\n".join(lines)
