"""Triton's changefeed protocol, as the ``changefeed`` npm package's ``Listener`` (1.5.x)
speaks it to VMAPI, in our own words.

- ``GET /changefeeds``: the resources served, by name, each ``{resource, subResources,
  bootstrapRoute}``; a listener checks it answers before it upgrades.
- ``GET /changefeeds`` upgraded to a WebSocket: the listener's first text message registers
  it: v1 ``{instance, service, changeKind: {resource, subResources}}``, v2 ``{instance,
  service, resources: [{resource, subResources}, ...]}``. The answer is the bootstrap: v1 the
  resource's entry, v2 ``{bootstrapRoutes: [entries]}``; the listener then lists
  ``bootstrapRoute`` itself. After it, one text message per change: ``{changeKind: {resource,
  subResources}, changedResourceId, published}``, sent when one of the change's
  ``subResources`` is among the registered ones (as Triton's publisher filters). The
  listener's later messages (``"heartbeat"``) need no answer.
- Our extensions, which Triton's listeners ignore: each change also carries ``position`` (its
  log position), and a registration (or the upgrade's ``?after=``) may carry ``after`` to
  resume after a position instead of starting from now.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from domain import json_input
from domain.json_input import cut, unstorable
from projections.formats import MAX_INTEGER
from service.changes.records import VM_SUB_RESOURCES, Change

VM_RESOURCE = {"resource": "vm", "subResources": sorted(VM_SUB_RESOURCES),
               "bootstrapRoute": "/vms"}
RESOURCES = {"vm": VM_RESOURCE}


class RegistrationError(ValueError):
    """A registration the protocol refuses; the message is the close reason."""


def _sub_resources(kind: dict[str, Any]) -> list[str]:
    """The sub-resources a registration's ``kind`` (of a resource we serve) names. Raises
    ``RegistrationError`` for an empty list and for any name the resource does not have:
    Triton's publisher takes them as they are, and such a listener, counted as registered,
    never receives a change; a typo is the listener's to hear of."""
    served = RESOURCES[kind["resource"]]["subResources"]
    named = kind["subResources"]
    if not named:
        raise RegistrationError(f'"subResources" should name at least one of '
                                f'{kind["resource"]}\'s: {", ".join(served)}')
    for name in named:
        if name not in served:
            raise RegistrationError(f"unknown sub-resource of {kind['resource']}: {_as_sent(name)}")
    return named


def _as_sent(value: Any) -> str:
    """A value a registration sent, as a refusal names it: a string as it is, any other in
    JSON (``null``, ``true``), as the listener wrote it (Python's ``None`` was shown), cut as
    every echoed value is (``json_input.cut``)."""
    return cut(value if isinstance(value, str) else json.dumps(value))


@dataclass(frozen=True)
class Registration:
    """A listener's registration: its instance id, the sub-resources it wants of ``vm``, the
    bootstrap to answer with, and where to resume (``None``: from now)."""

    instance: str
    sub_resources: frozenset[str]
    bootstrap: dict[str, Any]
    after: int | None


#: The longest ``instance`` a registration may give: ``/changefeeds/stats`` shows each one
#: (Triton's listeners send a uuid); a megabyte of it was kept and shown.
MAX_INSTANCE = 256

AFTER_REFUSED = f'"after" should be a log position (an integer, 0 to {MAX_INTEGER})'


def parse_registration(text: str | None, after: int | None = None) -> Registration:
    """The registration in ``text``, the first message's text (``None``: it was a binary
    frame); ``after`` is the position the upgrade's URL gave (``?after=``, checked before the
    upgrade), if any: the registration's own ``"after"``, when present, wins. Raises
    ``RegistrationError`` (v1 or v2 rules: a text message holding an object with a string
    ``instance`` of 1 to ``MAX_INSTANCE`` characters, a ``changeKind`` or a non-empty
    ``resources`` list, each with a string ``resource`` we serve and a ``subResources``
    list; its own ``"after"`` an integer from 0 to ``MAX_INTEGER``, not a boolean nor
    ``null``; and, as every request body, JSON nested no deeper than the parser takes, with
    no NUL character, lone surrogate or non-finite number anywhere in it: ``/changefeeds/stats`` shows its instance and sub-resources, and
    a lone surrogate there made every stats read a 500)."""
    if text is None:  # the Listener sends its registration as text (JSON.stringify)
        raise RegistrationError("registration should be a text message")
    try:
        registration = json_input.loads(text)
    except json_input.JsonInputError:
        raise RegistrationError("failed to parse registration payload") from None
    if not isinstance(registration, dict):
        raise RegistrationError("registration should be an object")
    problem = unstorable(registration)
    if problem is not None:
        raise RegistrationError(f"bad registration: {problem}")
    if not isinstance(registration.get("instance"), str) or not registration["instance"]:
        raise RegistrationError('registration should contain an "instance" identifier')
    if len(registration["instance"]) > MAX_INSTANCE:
        raise RegistrationError(f'"instance" should be at most {MAX_INSTANCE} characters')
    if "resources" in registration:
        kinds, bootstrap_of = registration["resources"], _v2_bootstrap
        if not isinstance(kinds, list) or not kinds:
            raise RegistrationError('registration should contain a "resources" array')
    elif isinstance(registration.get("changeKind"), dict):
        kinds, bootstrap_of = [registration["changeKind"]], _v1_bootstrap
    else:
        raise RegistrationError('registration should contain a "changeKind"')
    wanted: set[str] = set()
    for kind in kinds:
        if not isinstance(kind, dict) or "subResources" not in kind:
            raise RegistrationError('each resource should contain "subResources"')
        if not isinstance(kind["subResources"], list):  # a tester's "state"
            raise RegistrationError('"subResources" should be a list of names, as ["state"]')
        if "resource" not in kind:
            raise RegistrationError('each resource should contain "resource" (one of: '
                                    f'{", ".join(RESOURCES)})')
        # a list or an object is no key of RESOURCES (``in`` raised TypeError on one)
        if not isinstance(kind["resource"], str) or kind["resource"] not in RESOURCES:
            raise RegistrationError(f"unknown resource: {_as_sent(kind['resource'])}")
        wanted.update(_sub_resources(kind))
    # Present, the registration's "after" wins, and must be a position: a null is refused
    # as any other non-position, not taken as "from now" over the URL's ?after=.
    given = "after" in registration
    resume = registration["after"] if given else after
    if given and (type(resume) is not int or not 0 <= resume <= MAX_INTEGER):
        raise RegistrationError(AFTER_REFUSED)
    return Registration(registration["instance"], frozenset(wanted),
                        bootstrap_of(len(kinds)), resume)


def _v1_bootstrap(_count: int) -> dict[str, Any]:
    return dict(VM_RESOURCE)


def _v2_bootstrap(count: int) -> dict[str, Any]:
    return {"bootstrapRoutes": [dict(VM_RESOURCE) for _ in range(count)]}


def change_message(change: Change, wanted: frozenset[str]) -> str | None:
    """The changefeed message of ``change``, or ``None`` when the listener registered for none
    of its sub-resources (or it is not a VM's). ``published`` is when the change was recorded
    (its event's timestamp), as milliseconds since the Unix epoch in a string, as Triton's
    publisher stamps each change when it is made, not when it is sent: a listener catching up
    with ``after`` reads each old change's own time, not the time of the read."""
    if change.kind != "vm" or not wanted.intersection(change.changed):
        return None
    return json.dumps({
        "changeKind": {"resource": "vm", "subResources": list(change.changed)},
        "changedResourceId": change.uuid,
        "published": str(change.at_ms),
        "position": change.position,
    })


def stats(listeners: dict[object, tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Triton's ``/changefeeds/stats`` of ``listeners`` (one entry per open connection, its
    instance and registration): every connection counts, so two listeners that registered
    the same instance are two; ``registrations`` shows each instance once."""
    return {"listeners": len(listeners),
            "registrations": {"vm": dict(listeners.values())}}
