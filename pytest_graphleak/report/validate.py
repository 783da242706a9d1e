"""Check a report document against ``schema.json``, naming the first field that is wrong.

The schema is the contract for what the plugin and ``graphleak check --json`` write (and
what ``graphleak report`` reads), so the reader validates against the same file instead
of a second, hand-written description. This is the subset of JSON Schema that
``schema.json`` uses (type, enum, const, required, properties, additionalProperties,
items, minItems, minLength, minimum, oneOf, $ref into ``$defs``), so reading a
report needs no third-party package; a keyword outside the subset is an error, not
silently ignored (the tests run every document the plugin writes through it).

With ``json_doc`` (which builds the document) this is the schema's boundary, so it walks
the document's dicts itself; every renderer reads the typed read model instead
(``report.model``, ``result.CheckResult.from_dict``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_graphleak.exceptions import SchemaError

__all__ = ["SchemaError", "validate"]

#: Keywords that only describe (never constrain) a value.
_ANNOTATIONS = frozenset({"$schema", "$id", "$defs", "title", "description"})
_CHECKED = frozenset(
    {
        "type",
        "enum",
        "const",
        "required",
        "properties",
        "additionalProperties",
        "items",
        "minItems",
        "minLength",
        "minimum",
        "oneOf",
        "$ref",
    }
)

_TYPES: dict[str, Any] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


def validate(document: object, schema: Mapping[str, Any]) -> None:
    """Raise SchemaError for the first place where ``document`` breaks ``schema``."""
    _check(document, schema, schema, "")


def _check(value: object, rule: Mapping[str, Any], root: Mapping[str, Any], at: str) -> None:
    unknown = set(rule) - _CHECKED - _ANNOTATIONS
    if unknown:
        raise SchemaError(at, f"the schema uses {sorted(unknown)}, which this reader lacks")
    if "$ref" in rule:
        _check(value, _resolve(rule["$ref"], root), root, at)
    if "type" in rule:
        names = rule["type"] if isinstance(rule["type"], list) else [rule["type"]]
        if not any(_TYPES[name](value) for name in names):
            raise SchemaError(at, f"expected {' or '.join(names)}, got {_shown(value)}")
    if "const" in rule and not _same(value, rule["const"]):
        raise SchemaError(at, f"expected {rule['const']!r}, got {_shown(value)}")
    if "enum" in rule and not any(_same(value, option) for option in rule["enum"]):
        choices = ", ".join("null" if o is None else repr(o) for o in rule["enum"])
        raise SchemaError(at, f"expected one of {choices}, got {_shown(value)}")
    if "oneOf" in rule:
        _one_of(value, rule["oneOf"], root, at)
    if isinstance(value, dict):
        _check_object(value, rule, root, at)
    if isinstance(value, list):
        if len(value) < rule.get("minItems", 0):
            raise SchemaError(at, f"expected at least {rule['minItems']} item(s), got none")
        if "items" in rule:
            for index, item in enumerate(value):
                _check(item, rule["items"], root, f"{at}[{index}]")
    if isinstance(value, str) and len(value) < rule.get("minLength", 0):
        raise SchemaError(at, "expected a non-empty string")
    if _TYPES["number"](value) and "minimum" in rule and value < rule["minimum"]:
        raise SchemaError(at, f"expected a number >= {rule['minimum']}, got {value!r}")


def _check_object(
    value: dict[str, Any], rule: Mapping[str, Any], root: Mapping[str, Any], at: str
) -> None:
    for key in rule.get("required", ()):
        if key not in value:
            raise SchemaError(at, f"the field {key!r} is missing")
    properties: Mapping[str, Any] = rule.get("properties", {})
    extra = rule.get("additionalProperties", True)
    for key, item in value.items():
        where = f"{at}.{key}" if at else key
        if key in properties:
            _check(item, properties[key], root, where)
        elif extra is False:
            raise SchemaError(where, "is not a field of this object")
        elif isinstance(extra, Mapping):
            _check(item, extra, root, where)


def _one_of(value: object, options: list[Any], root: Mapping[str, Any], at: str) -> None:
    errors: list[SchemaError] = []
    for option in options:
        try:
            _check(value, option, root, at)
        except SchemaError as exc:
            errors.append(exc)
    matched = len(options) - len(errors)
    if matched == 0:
        # The deepest complaint is the useful one (a bad field inside the object).
        raise max(errors, key=lambda e: len(e.field))
    if matched > 1:
        raise SchemaError(at, f"matches {matched} of the alternatives, expected one")


def _resolve(ref: str, root: Mapping[str, Any]) -> Mapping[str, Any]:
    if not ref.startswith("#/"):
        raise SchemaError("", f"the schema refers outside itself: {ref}")
    node: Mapping[str, Any] = root
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def _same(value: object, expected: object) -> bool:
    # JSON has no bool/int confusion: true is not 1.
    return (type(value) is type(expected) and value == expected) or (
        _TYPES["number"](value) and _TYPES["number"](expected) and value == expected
    )


def _shown(value: object) -> str:
    kind = {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "null" if value is None else "number"
    )
    text = repr(value)
    return f"{kind} {text[:40] + '...' if len(text) > 40 else text}"
