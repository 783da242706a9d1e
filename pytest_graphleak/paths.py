"""How a file's path reads to the user: relative to a directory when the file is under
it. Plain functions (bottom layer: no import of the package)."""

from __future__ import annotations

import os


def relative_to(filename: str, root: str) -> str | None:
    """``filename`` relative to the directory ``root`` when the file is under it; None
    for any other file (outside it, on another drive, a pseudo-file like ``<string>``).
    The one "relative path, else ..." rule: the terminal, the HTML page and the GitHub
    annotations each choose only what "else" is."""
    if not filename or filename.startswith("<"):
        return None
    try:
        relative = os.path.relpath(os.path.abspath(filename), os.path.abspath(root))
    except ValueError:  # another drive (Windows)
        return None
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return None
    return relative


def display_path(filename: str) -> str:
    """A file under the working directory (pytest's rootdir, as a rule) relative to it;
    any other file as it is."""
    if not os.path.isabs(filename):
        return filename
    return relative_to(filename, os.curdir) or filename
