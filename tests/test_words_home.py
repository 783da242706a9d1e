"""Every sentence the user reads is written in ``words/`` (issue 46, item 3): the outlive
audit and the diagnosis find and count, ``words/`` says it. An AST scan of their modules
fails on a string of three or more words outside a docstring, but the few listed below
(code the fixes write, a pattern a fix reads, and the leftovers named with their reason)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_graphleak"
#: The packages that must not write a sentence of their own.
SCANNED = ("outlive", "diagnose")
#: Strings of three or more words that are not sentences a user reads, or are leftovers:
#: module -> (text with each f-string field as {}, ...).
ALLOWED: dict[str, tuple[str, ...]] = {
    # code the fixes write into the user's file, and the patterns that read it back
    "diagnose/fix_candidates.py": (
        "[t.{}() for t in {}]",
        "{k: v.{}() for k, v in {}.items()}",
        "tuple(t.{}() for t in {})",
    ),
    "diagnose/fix_hooks.py": (
        r"\bbound method (?:[A-Za-z_][\w.]*\.)?([A-Za-z_]\w*)\.__self__",
        r"packed by saved-tensor pack hook ([A-Za-z_]\w*) \((.+):(\d+)\)",
        r"\bfunction (?:[\w.<>]+\.)?([A-Za-z_]\w*) closure\b",
        "(lambda *args, **kwargs: {}()(*args, **kwargs) if {}() is not None else None)",
    ),
    # what the recorder was doing when it raised: read into words.notes' sentence
    "diagnose/loop_recorder.py": (
        "start a recorded step",
        "list what a recorded step made",
        "read the cycles a collection freed",
        "read the sites it recorded",
    ),
    # leftovers, not moved yet: the memory rows, the drawing's labels, stored's error note
    "diagnose/memory.py": ("{} -> {} in the same place", "grows by {} per step: {}"),
    "diagnose/render.py": (" (the same object: the cycle closes)", "... ({} more graph nodes)"),
    "diagnose/stored.py": ("the step raised during diagnosis: {}",),
}


def _text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(str(v.value) if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def sentences(source: str) -> list[str]:
    """The strings of ``source`` with three or more words (docstrings and the literal
    parts of an f-string, read as the f-string, left out)."""
    tree = ast.parse(source)
    skipped: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            skipped.add(id(body[0].value))  # a docstring
        if isinstance(node, ast.JoinedStr):
            skipped.update(id(value) for value in node.values)
    found = []
    for node in ast.walk(tree):
        text = None if id(node) in skipped else _text(node)
        if text is not None and sum(any(c.isalpha() for c in w) for w in text.split()) >= 3:
            found.append(text)
    return found


def test_the_audit_and_the_diagnosis_leave_their_sentences_to_words() -> None:
    found = {}
    for package in SCANNED:
        for path in sorted((PACKAGE / package).glob("*.py")):
            module = f"{package}/{path.name}"
            extra = [s for s in sentences(path.read_text()) if s not in ALLOWED.get(module, ())]
            if extra:
                found[module] = extra
    assert found == {}


def test_the_scan_sees_a_sentence_planted_in_a_string_or_an_f_string() -> None:
    planted = '''
"""A docstring of many words is fine."""
LABEL = "held by"
def note(n):
    """So is this one."""
    return [f"the audit found {n} graphs", "kept alive after teardown"]
'''
    assert sentences(planted) == ["the audit found {} graphs", "kept alive after teardown"]
