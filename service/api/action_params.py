"""The parameters of a VM action (``POST /vms/{uuid}``) that VMAPI reads from the query and the
JSON body alike: restify's mapParams maps both, so the VMAPI client and VMAPI's own tests send
``{"action": "stop"}`` in the body as readily as ``?action=stop`` (upstream vms.full.test.js).

Each is checked where it is given, by the same rule (the query's by ``params.Query``, the
body's by its model in ``service/api/schemas.py``). Given in both with different values, the
request is refused with ``ConflictingParameters`` naming the parameter: VMAPI let the query
win silently, which hides a client's mistake (api.md, "Contract: errors")."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from pydantic import BaseModel

from service.api.errors import ApiError, invalid_parameters

#: The lists VMAPI takes as an array or one comma-separated string, in either place
#: (``validStrings``, ``validNetworks``): ``remove_nics``' ``macs``, ``add_nics``' and
#: CreateVm's ``networks``. A route copies the query's into the body it validates
#: (``with_query``), so each is read by the body's rule, and compared as a list of texts.
LISTS = ("macs", "networks")
#: What may be in either place. ``signal`` is kill's alone and needs no comparison: each
#: place's must be SIGKILL (``schemas.KillBody``), however spelt.
MAPPED = ("action", "owner_uuid", "idempotent", "sync", "timeout", "origin", "creator_uuid",
          "signal", *LISTS)
_COMPARED = tuple(name for name in MAPPED if name != "signal")
#: How a body model that takes its route's action describes the field (a VM action's,
#: a server's, a volume's)
BODY_ACTION = "the action, when the query has none (the same as the query's when both do)"
#: The booleans among them, false unless given (docs/api.md)
_FALSE_UNLESS_GIVEN = ("idempotent", "sync")


def conflicting(request: Request, name: str) -> ApiError:
    """The refusal of ``name`` given in the query and the body with different values."""
    message = f"{name} in the query and {name} in the body differ"
    return invalid_parameters(request, [{"field": name, "code": "Invalid", "message": message}],
                              code="ConflictingParameters", message=message)


def action_of(request: Request, data: Any) -> str | None:
    """The action asked: ``?action=``, or the body's ``action`` (an ``action`` that is not
    text is ``""``, refused as an unknown one). Both given and different: ``conflicting``."""
    in_query = request.query_params.get("action")
    in_body = data.get("action") if isinstance(data, dict) else None
    if in_body is not None and not isinstance(in_body, str):
        in_body = ""
    if in_query is not None and in_body is not None and in_query != in_body:
        raise conflicting(request, "action")
    return in_query if in_query is not None else in_body


def without_action(data: Any) -> Any:
    """The body without its ``action``, for a body model that has no such field (the
    quarantine's), once ``action_of`` has read it."""
    if isinstance(data, dict) and "action" in data:
        return {key: value for key, value in data.items() if key != "action"}
    return data


def _query_value(name: str, text: str) -> Any:
    """A query parameter's value in its body form, once the query's rule accepted it."""
    if name in _FALSE_UNLESS_GIVEN:
        return text.lower() in ("true", "1")
    if name == "timeout":
        return int(text)
    return text


def _comparable(name: str, value: Any) -> Any:
    """A parameter's value in the one form its two places are compared in: a uuid and a MAC
    in lowercase (each is looked up in any case), a list as its texts (a comma-separated
    string is the list of its parts, as VMAPI splits it)."""
    if name in LISTS:
        items = value.split(",") if isinstance(value, str) else list(value)
        return [item.lower() if name == "macs" and isinstance(item, str) else item
                for item in items]
    return str(value).lower() if name.endswith("_uuid") else value


def with_query(request: Request, data: Any, names: tuple[str, ...]) -> Any:
    """The body with each of ``names`` the query gives and the body does not (or there is no
    body), as restify's mapParams maps it, for the body's model to read by the body's rule:
    CreateVm's ``owner_uuid`` (validated and then silently ignored, once) and ``networks``,
    ``add_nics``' ``networks``, ``remove_nics``' ``macs`` (refused as unknown: a tester).
    Given in both, the body's is kept for ``check_agree`` to compare
    (``ConflictingParameters`` when they differ)."""
    if not (data is None or isinstance(data, dict)):
        return data
    given = {name: request.query_params[name] for name in names
             if name in request.query_params and (data is None or name not in data)}
    return {**(data or {}), **given} if given else data


def check_agree(request: Request, parsed: BaseModel) -> None:
    """Refuse a parameter given in the query and in the body (``parsed``, the validated body)
    with different values; the same value twice is one request."""
    given = parsed.model_fields_set
    for name in _COMPARED:
        text = request.query_params.get(name)
        if text is None or name not in given:
            continue
        value = getattr(parsed, name)
        if value is not None and _comparable(name, _query_value(name, text)) != _comparable(
                name, value):
            raise conflicting(request, name)


def asked_params(request: Request, data: Any, *, defaults_dropped: bool = True
                 ) -> tuple[list[tuple[str, str]], Any]:
    """What a VM command asks (an action, DeleteVm, CreateVm), for its ``Idempotency-Key``'s
    fingerprint: the query's parameters with the body's mapped ones added, each mapped one in
    one form wherever it was given (``_one_form``), and the rest of the body. ``?action=stop`` and
    ``{"action": "stop"}`` are one request, and so are ``?sync=1`` and ``{"sync": true}``
    (its ``true`` was hashed as ``"true"``, the query's ``1`` as written: reviewer); a body
    naming another action is another request, wherever the first named its own.

    ``defaults_dropped``: a mapped parameter given what leaving it out means (``false`` for
    ``idempotent`` and ``sync``, a body's ``null`` for any; ``context``'s ``null`` too), and an
    empty body, are left out,
    as the request means them (a tester: ``?sync=false`` was another request than none);
    False gives what the service hashed before, for a key stored then (``idempotency_of``)."""
    items = query_meant(request, defaults_dropped=defaults_dropped)
    if not isinstance(data, dict) or not any(key in MAPPED for key in data):
        return items, (data or None) if defaults_dropped else data  # as every other route's
    in_query = set(request.query_params)
    rest = {}
    for key, value in data.items():
        if key not in MAPPED:
            if not (defaults_dropped and key == "context" and value is None):
                rest[key] = value  # (an update's null clears a field: it is kept)
        elif key in in_query:  # the same value (check_agree), counted once
            continue
        elif not (defaults_dropped and (value is None or _left_out(key, _one_form(key, value)))):
            items.append((key, _one_form(key, value)))
    return items, rest or None


def query_meant(request: Request, *, defaults_dropped: bool = True) -> list[tuple[str, str]]:
    """The query's parameters, each mapped one in one form (``_one_form``); with
    ``defaults_dropped``, without ``idempotent`` and ``sync`` given ``false`` (in any form),
    which ask what leaving them out asks (docs/api.md, "Idempotency")."""
    items = [(key, _one_form(key, value) if key in MAPPED else value)
             for key, value in request.query_params.multi_items()]
    return [item for item in items if not (defaults_dropped and _left_out(*item))]


def _left_out(name: str, form: str) -> bool:
    """Whether a mapped parameter's value in one form (``_one_form``) is what its absence
    means."""
    return name in _FALSE_UNLESS_GIVEN and form == "false"


def _one_form(name: str, value: Any) -> str:
    """A mapped parameter's value, from the query's text or the body's JSON, as one text:
    ``true``/``false`` for a boolean (the query's ``1``/``0`` and any case too), an integer's
    digits, a list of texts as the comma-separated string the query gives. Any other text
    stays as written: a value neither rule accepts is refused once validated, never the
    same request as a valid one."""
    if isinstance(value, str):
        lowered = value.lower()
        if name in _FALSE_UNLESS_GIVEN and lowered in ("true", "1", "false", "0"):
            return "true" if lowered in ("true", "1") else "false"
        if name == "timeout" and value.isascii() and value.isdigit():
            return str(int(value))
        return value
    if name in LISTS and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    return json.dumps(value)  # true, 5: as a query spells them
