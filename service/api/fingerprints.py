"""The fingerprint an ``Idempotency-Key`` keeps of its request (docs/api.md, "Idempotency"):
what the request means, so that two requests meaning the same are one, however spelt.

A request is hashed with its method, its path (a uuid in it in lower case), its query, its
body and its API version. The query's mapped parameters (``action_params``) are taken in one
form, and a parameter given the value that leaving it out means is left out: ``?sync=false``,
``?idempotent=0``, an action's ``{"sync": false}`` or ``{"context": null}``, a create's
``"persistence": "persistent"`` or ``"volumes": []`` (a tester: ``?action=stop`` then
``?action=stop&sync=false`` with one key was ``422 IdempotencyKeyReused``).

Each earlier way the service hashed a request is kept as an ``older`` fingerprint (a key lives
24 h): a retry across an upgrade of the same bytes is answered as stored."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from fastapi import Request
from pydantic import BaseModel

from service.api.action_params import asked_params, query_meant

# A path segment that is a uuid, in any case: looked up in any case, so asked in one
_UUID_SEGMENT = re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")


def fingerprints(request: Request, data: Any, version: str, *, mapped: bool,
                 defaults: type[BaseModel] | None) -> tuple[str, tuple[str, ...]]:
    """The fingerprint of what ``request`` (its body ``data``, API ``version``) means, and
    the others the service gave it before, none the same (``IdempotencyKey.older``).

    ``mapped``: a VM command's (an action, DeleteVm, CreateVm), whose mapped parameters may
    be in the body (``action_params.asked_params``). ``defaults``: the body's model, for a route whose
    body fields given their model's default mean what leaving them out means (not an
    update's, where ``null`` clears a field)."""
    raw = list(request.query_params.multi_items())
    if mapped:
        params, rest = asked_params(request, data)
        asked = [(params, _without_defaults(rest, defaults)),
                 asked_params(request, data, defaults_dropped=False),  # before the defaults
                 (raw, data)]  # before body parameters counted as the query's
    else:
        asked = [(query_meant(request), _without_defaults(data, defaults)), (raw, data)]
    meant, *earlier = [_fingerprint(request, params, body, version) for params, body in asked]
    return meant, tuple(dict.fromkeys(f for f in earlier if f != meant))


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
