"""The fingerprint an ``Idempotency-Key`` keeps of its request (docs/api.md, "Idempotency"):
what the request means, so that two requests meaning the same are one, however spelt.

A request is hashed with its method, its path (a uuid in it in lower case), its query, its
body and its API version. The query's mapped parameters (``action_params``) are taken in one
form, and a parameter given the value that leaving it out means is left out: ``?sync=false``,
``?idempotent=0``, an action's ``{"sync": false}`` or ``{"context": null}``, a create's
``"persistence": "persistent"`` or ``"volumes": []`` (a tester: ``?action=stop`` then
``?action=stop&sync=false`` with one key was ``422 IdempotencyKeyReused``).

Where the route has validated its body, the body hashed is that model's (``_meant_body``): each
field as validated (``"ram": "128"`` is ``128``, metadata given as JSON text is its object), a
field given its default or an empty ``{}``/``[]``/``null`` where leaving it out means the
same left out (a tester: CreateVm's ``"tags": {}`` and ``"customer_metadata": {}`` were
``422 IdempotencyKeyReused``, though the VM created is the same), and a field the model says
means something else than it spells (``fingerprint_form``: a ``persistence`` as the policy it
gives). An update's fields (``kept_null``) keep their ``null``: it clears the field.

Each earlier way the service hashed a request is kept as an ``older`` fingerprint (a key lives
24 h): a retry across an upgrade of the same bytes is answered as stored."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection
from typing import Any

from fastapi import Request
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from service.api.action_params import MAPPED, asked_params, query_meant

# A path segment that is a uuid, in any case: looked up in any case, so asked in one
_UUID_SEGMENT = re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")


def fingerprints(request: Request, data: Any, version: str, *, mapped: bool,
                 defaults: type[BaseModel] | None, parsed: BaseModel | None = None,
                 kept_null: Collection[str] = ()) -> tuple[str, tuple[str, ...]]:
    """The fingerprint of what ``request`` (its body ``data``, API ``version``) means, and
    the others the service gave it before, none the same (``IdempotencyKey.older``).

    ``mapped``: a VM command's (an action, DeleteVm, CreateVm), whose mapped parameters may
    be in the body (``action_params.asked_params``). ``parsed``: the body as the route
    validated it, hashed as ``_meant_body`` reads it (None: a route whose body has no model
    is hashed as sent, without ``defaults``); ``kept_null``: its fields whose ``null`` is not
    their absence (an update's). ``defaults``: the body's model as the service left its
    defaults out before it hashed the validated body (an older fingerprint; not an update's,
    where ``null`` clears a field)."""
    raw = list(request.query_params.multi_items())
    if mapped:
        params, rest = asked_params(request, data)
        asked = [(params, _without_defaults(rest, defaults)),
                 asked_params(request, data, defaults_dropped=False),  # before the defaults
                 (raw, data)]  # before body parameters counted as the query's
    else:
        params = query_meant(request)
        asked = [(params, _without_defaults(data, defaults)), (raw, data)]
    if parsed is not None:  # before the validated body was hashed: the body as sent
        asked.insert(0, (params, _meant_body(parsed, kept_null, MAPPED if mapped else ())))
    meant, *earlier = [_fingerprint(request, params, body, version) for params, body in asked]
    return meant, tuple(dict.fromkeys(f for f in earlier if f != meant))


def _meant_body(parsed: BaseModel, kept_null: Collection[str], counted: Collection[str]
                ) -> dict[str, Any] | None:
    """What a validated body means, as JSON: each field the client gave (``model_fields_set``:
    a default made anew each time, as a server's random ``boot_id``, is never hashed), as
    validated, but those ``counted`` with the query (``asked_params``) and those given what
    leaving them out means: their default, or a ``null``, ``{}`` or ``[]`` where the default
    is one of those (CreateVm's ``tags``, whose ``null`` and ``{}`` both make no tags). A
    field in ``kept_null`` is kept whatever its value (an update's ``null`` clears it). The
    model's ``fingerprint_form(fields)``, if it has one, then says what a field means
    (CreateVm's ``persistence``). None if nothing is left, as for no body."""
    dumped = parsed.model_dump(mode="json")
    meant = {}
    for name in sorted(parsed.model_fields_set):
        if name in counted:
            continue
        value = dumped[name]
        if name in kept_null or not _means_absence(parsed, name, value):
            meant[name] = value
    form = getattr(parsed, "fingerprint_form", None)
    if form is not None:
        meant = form(meant)
    return meant or None


def _means_absence(parsed: BaseModel, name: str, value: Any) -> bool:
    """Whether ``value`` (JSON) of field ``name`` means what leaving the field out means."""
    field = type(parsed).model_fields[name]
    if field.is_required():
        return False
    default = field.get_default(call_default_factory=True)
    try:
        default = to_jsonable_python(default)
    except Exception:  # noqa: BLE001 - a default with no JSON form is never given as such
        return False
    empty = (None, {}, [])
    return value == default or (value in empty and default in empty)


def _fingerprint(request: Request, params: list[tuple[str, str]], data: Any,
                 version: str) -> str:
    path = _UUID_SEGMENT.sub(lambda found: found[0].lower(), request.url.path)
    asked = [request.method, path, sorted(params), data, version]
    return hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()


def _without_defaults(data: Any, model: type[BaseModel] | None) -> Any:
    """``data`` (a body) without the fields ``model`` gives by default that it gives the same
    value, compared as JSON (``"persistent"``, ``[]``, ``null``; a default made anew each
    time, as a server's random ``boot_id``, is never the same); None if nothing is left, as
    for no body."""
    if model is None or not isinstance(data, dict):
        return data
    return {name: value for name, value in data.items()
            if not _is_default(model, name, value)} or None


def _is_default(model: type[BaseModel], name: str, value: Any) -> bool:
    field = model.model_fields.get(name)
    if field is None or field.is_required():
        return False
    default = field.get_default(call_default_factory=True)
    try:
        return json.dumps(value, sort_keys=True) == json.dumps(default, sort_keys=True)
    except (TypeError, ValueError):  # a default that is no JSON is never given as such
        return False
