"""pydantic's validation errors as VMAPI's ``errors`` list (api.md, "Contract: errors"), one
per value: FastAPI's location prefix and pydantic's union member names are not fields."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from service.api.vmapi_rules import UNKNOWN_PARAMETER


def field_errors(items: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """pydantic's (or FastAPI's) validation errors as VMAPI's ``errors`` list: one
    ``{field, code: Missing|Invalid, message}`` per problem. FastAPI prefixes a location with
    where the value came from (``body``, ``query``, ``path``): that first part is not the field."""
    errors = []
    for item in items:
        location = [str(part) for part in item.get("loc", ())]
        if location[:1] in (["body"], ["query"], ["path"]):
            location = location[1:]
        if item.get("type") == "json_invalid":  # its loc holds a character offset, no field
            errors.append({"field": ["body"], "code": "Invalid", "message": (
                f"not valid JSON ({item.get('ctx', {}).get('error', 'malformed')}, at "
                f"character {location[0] if location else '?'})")})
            continue
        if item.get("type") == "metadata_key":  # a key's own problem: the key is the field
            location = [*location, str(item.get("ctx", {}).get("key"))]
        errors.append({
            "field": location,
            "code": "Missing" if item.get("type") == "missing" else "Invalid",
            # VMAPI's words for a field it does not know (api.md, "Contract: errors"); our
            # validators' refusals without pydantic's "Value error, " before them
            "message": UNKNOWN_PARAMETER if item.get("type") == "extra_forbidden"
            else str(item.get("msg", "invalid")).removeprefix("Value error, "),
        })
    return [{**error, "field": ".".join(error["field"]) or "body"}
            for error in _without_union_branches(errors)]


# pydantic names each member of a union it tried in the location: ``tags.a.str``,
# ``networks.list[union[str,dict[str,any]]].0.str``: the member's type, not a field.
_SCALAR_MEMBERS = frozenset({"str", "int", "float", "bool"})


def _member_at(location: list[str]) -> int | None:
    """Where the first union member's name is in ``location`` (a bracketed type anywhere, a
    scalar type only last: before that it is a key, ``customer_metadata.str.int``)."""
    for index, part in enumerate(location):
        if "[" in part and part.endswith("]"):
            return index
    return len(location) - 1 if location and location[-1] in _SCALAR_MEMBERS else None


def _without_union_branches(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One error per value no member of its union took: of the members' errors, those that
    got deepest (the member whose shape the value had: ``[None]`` is a list, so its item's
    errors, not "should be a string"), their member names dropped and messages joined
    ("Input should be a valid string or a valid integer")."""
    unions: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for error in errors:
        at = _member_at(error["field"])
        if at is not None:
            unions.setdefault(tuple(error["field"][:at]), []).append(error)
    unions = {where: branches for where, branches in unions.items() if len(branches) > 1}
    out: list[dict[str, Any]] = []
    for error in errors:
        at = _member_at(error["field"])
        branches = unions.get(tuple(error["field"][:at])) if at is not None else None
        if branches is None:
            out.append(error)
        elif branches[0] is error:
            out.extend(_merged(branches))
    return out


def _merged(branches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    deepest = max(len(branch["field"]) for branch in branches)
    by_field: dict[tuple[str, ...], list[str]] = {}
    codes: set[str] = set()
    for branch in branches:
        if len(branch["field"]) == deepest:
            field = tuple(part for index, part in enumerate(branch["field"])
                          if not ("[" in part and part.endswith("]"))
                          and not (index == deepest - 1 and part in _SCALAR_MEMBERS))
            messages = by_field.setdefault(field, [])
            if branch["message"] not in messages:
                messages.append(branch["message"])
            codes.add(branch["code"])
    prefix = "Input should be "
    merged = []
    for field, messages in by_field.items():
        if all(message.startswith(prefix) for message in messages):
            message = prefix + " or ".join(m.removeprefix(prefix) for m in messages)
        else:
            message = "; ".join(messages)
        merged.append({"field": list(field), "code": "Missing" if codes == {"Missing"}
                       else "Invalid", "message": message})
    return merged
