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
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if len(choices) == 1:
            return _inline({**choices[0], **rest}, definitions)
        node = {"anyOf": choices, **rest}
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


def _drop(schema: dict[str, Any], entry: str) -> None:
    """Take one hidden entry out: `name` a parameter, `name.sub` a property of the objects a
    list parameter holds, `name=value` one value of a parameter's enum."""
    path, _, value = entry.partition("=")
    names = path.split(".")
    node = schema
    for name in names[:-1]:
        node = node.get("properties", {}).get(name, {})
        node = node.get("items", node)
    last = names[-1]
    if not value:
        node.get("properties", {}).pop(last, None)
        if last in node.get("required", []):
            node["required"] = [n for n in node["required"] if n != last]
        return
    target = node.get("properties", {}).get(last, {})
    if "enum" in target:
        target["enum"] = [v for v in target["enum"] if v != value]


def advertised_schema(
    full: dict[str, Any], *, hidden: Iterable[str] = (), required: Iterable[str] = ()
) -> dict[str, Any]:
    """`full` (pydantic's JSON schema of the arguments) as the model is shown it: compacted,
    without the `hidden` entries (see _drop), and with `required` added to what it must send
    (a parameter whose model default only serves a hidden form, such as a batch list)."""
    schema = _inline(full, full.get("$defs", {}))
    hidden = set(hidden)
    for entry in sorted(hidden):
        _drop(schema, entry)
    properties = schema.get("properties", {})
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
