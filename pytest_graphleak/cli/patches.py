"""Verified fixes as patches of the user's files: where one may be written, and writing it.

A verified fix (``result.Fix``) carries its change as a unified diff of one file, the
file's absolute path and the SHA-256 of its content when the change was verified. It is
written only where all of these hold (``refusal`` says which does not):

- the report names its rootdir and the file is under it (after resolving links), so a
  report cannot point a write anywhere else;
- the file is not an installed package's (no ``site-packages``/``dist-packages`` in its
  path) and not inside a virtual environment (no ``pyvenv.cfg`` in a directory above it);
- the file still has the content the change was verified against (same SHA-256): a file
  edited since is refused, never patched by fuzzy matching.

The hunks are applied to the file's lines as they are (each line keeps its own ending,
the file its encoding), and the file is replaced atomically.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import tempfile
import tokenize
from pathlib import Path

from pytest_graphleak.diagnose.fix_source import sha256_of
from pytest_graphleak.exceptions import Refused
from pytest_graphleak.paths import relative_to
from pytest_graphleak.report.hunks import Hunk, hunks
from pytest_graphleak.result import Fix

#: A path part that marks an installed package's file.
INSTALLED = frozenset({"site-packages", "dist-packages"})


def shown_path(filename: str, rootdir: str | None) -> str:
    """The file as the diff names it: relative to the rootdir when under it."""
    return (relative_to(filename, rootdir) if rootdir else None) or filename


def diff_for(fix: Fix, rootdir: str | None) -> str:
    """The fix's diff with its file named relative to the rootdir (``git apply`` and
    ``patch -p1`` read it from there)."""
    name = shown_path(fix.filename, rootdir)
    lines = (fix.diff or "").splitlines(keepends=True)
    if len(lines) >= 2 and lines[0].startswith("--- ") and lines[1].startswith("+++ "):
        lines[:2] = [f"--- a/{name}\n", f"+++ b/{name}\n"]
    return "".join(lines)


def refusal(fix: Fix, rootdir: str | None) -> str | None:
    """Why ``fix`` may not be written (one clause naming the file), or None."""
    name = shown_path(fix.filename, rootdir)
    if not fix.verified or not fix.diff or not fix.filename or not fix.sha256:
        return f"{name}: the fix was not verified"
    if not rootdir:
        return (
            f"{name}: the report names no rootdir (written by an older version), so "
            "where it may write is not known; run pytest --graphleak again"
        )
    path = Path(os.path.realpath(fix.filename))
    root = Path(os.path.realpath(rootdir))
    if not path.is_relative_to(root):
        return f"{fix.filename}: not under the report's rootdir {rootdir}"
    if INSTALLED & set(path.parts):
        return f"{name}: an installed package's file (site-packages), not yours"
    venv = next((d for d in path.parents if (d / "pyvenv.cfg").is_file()), None)
    if venv is not None:
        return f"{name}: inside the virtual environment {venv}, not your code"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return f"{name}: no such file any more"
    except OSError as exc:
        return f"{name}: cannot be read ({exc.strerror or exc})"
    if sha256_of(raw) != fix.sha256:
        return (
            f"{name}: changed since the fix was verified (its content hash differs); "
            "run pytest --graphleak again for a fix of the file as it is"
        )
    return None


def apply(filename: str, diffs: list[str]) -> None:
    """Write the hunks of ``diffs`` (all made against the file as it is now) into the
    file, atomically; Refused when one does not match it or two change the same lines."""
    raw = Path(filename).read_bytes()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    lines = raw.decode(encoding).splitlines(keepends=True)
    changes: list[tuple[int, int, list[str]]] = []  # (first index, old count, new lines)
    for hunk in (h for diff in diffs for h in hunks(diff)):
        at = hunk.start - 1 if hunk.old else hunk.start
        if [line.rstrip("\r\n") for line in lines[at : at + len(hunk.old)]] != hunk.old:
            raise Refused(f"{filename}: the fix's lines do not match the file at line {hunk.start}")
        changes.append(_core(hunk, at))
    changes.sort()
    for before, after in itertools.pairwise(changes):
        if before[0] + before[1] > after[0] or before[0] == after[0]:
            raise Refused(
                f"{filename}: two fixes change the same lines; apply one, "
                "then run pytest --graphleak again"
            )
    for at, count, new in reversed(changes):  # from the end: earlier indexes stay right
        replaced = lines[at : at + count]
        # New lines end as the lines around them do (the last line may have no ending).
        near = [_ending(line) for line in [*replaced, *reversed(lines[:at])]]
        ending = next((end for end in near if end), "\n")
        written = [text + ending for text in new]
        if written and replaced:  # the file's last line keeps having no ending, if it had none
            written[-1] = new[-1] + _ending(replaced[-1])
        lines[at : at + count] = written
    _write_atomic(Path(filename), "".join(lines).encode(encoding))


def _core(hunk: Hunk, at: int) -> tuple[int, int, list[str]]:
    """The hunk without its leading and trailing context: (index of the first old line
    it changes, how many old lines, the new lines)."""
    marks = list(hunk.lines)
    head = 0
    while head < len(marks) and marks[head].startswith(" "):
        head += 1
    tail = len(marks)
    while tail > head and marks[tail - 1].startswith(" "):
        tail -= 1
    core = Hunk(hunk.start, tuple(marks[head:tail]))
    return at + head, len(core.old), core.new


def _ending(line: str) -> str:
    """The line's ending as it is: ``\r\n``, ``\n``, ``\r`` or "" (the last line)."""
    return line[len(line.rstrip("\r\n")) :]


def _write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a reader sees the old file or the new one,
    keeping its permissions."""
    mode = path.stat().st_mode
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
