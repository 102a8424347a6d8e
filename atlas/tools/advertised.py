"""The parameter schema a tool advertises to the model: pydantic's schema, made short.

Every model request carries the schemas of the tools it offers, so each token here is paid on
every call. What the model is told is a view of what a tool accepts, never a new rule:
validation still runs on the full arguments model (registry.Tool.parse_arguments), so a
parameter left out of the view (a batch form, an alias) is still accepted when it is sent.

What goes: pydantic's titles; `anyOf [X, null]` for an optional parameter (being left out is
what optional means); defaults that say nothing (null, "", [], {}, false); `$defs`/`$ref`
indirection (each definition is inlined where it is used); `additionalProperties` (extra
arguments are refused by validation, with a message that names them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# A default the model learns nothing from: leaving the parameter out means the same.
_SILENT_DEFAULTS: tuple[Any, ...] = (None, "", [], {})


def _says_nothing(value: Any) -> bool:
    return value is False or any(
        value == silent and type(value) is type(silent) for silent in _SILENT_DEFAULTS
    )


def _inline(node: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_inline(item, definitions) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        merged = {**definitions[name], **{k: v for k, v in node.items() if k != "$ref"}}
        return _inline(merged, definitions)
    if "anyOf" in node:
        choices = [c for c in node["anyOf"] if c != {"type": "null"}]
        if len(choices) == 1:
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            return _inline({**choices[0], **rest}, definitions)
    short: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "$defs", "additionalProperties") and not (
            key == "title" and not isinstance(value, str)
        ):
            continue
        if key == "default" and _says_nothing(value):
            continue
        if key == "properties":
            short[key] = {name: _inline(sub, definitions) for name, sub in value.items()}
        else:
            short[key] = _inline(value, definitions)
    return short


def advertised_schema(
    full: dict[str, Any], *, hidden: Iterable[str] = (), required: Iterable[str] = ()
) -> dict[str, Any]:
    """`full` (pydantic's JSON schema of the arguments) as the model is shown it: compacted,
    without the `hidden` parameters, and with `required` added to what it must send (a
    parameter whose model default only serves a hidden form, such as a batch list)."""
    schema = _inline(full, full.get("$defs", {}))
    hidden = set(hidden)
    properties = schema.get("properties", {})
    for name in hidden:
        properties.pop(name, None)
    must = [n for n in schema.get("required", []) if n not in hidden]
    for name in required:
        if name not in properties:
            raise ValueError(f"required parameter {name!r} is not among {sorted(properties)}")
        if name not in must:
            must.append(name)
        properties[name].pop("default", None)
    if must:
        schema["required"] = must
    else:
        schema.pop("required", None)
    return schema
