"""Persistence policies: what happens to a VM when the world changes under it (design.md,
"Persistence policy", from Nova's persistent vs ephemeral instances).

A VM's ``persistence`` is a preset name, or a mapping with an optional ``preset`` and any
happening set one by one, e.g. ``{"preset": "persistent", "guest_crash": "destroy"}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from domain.json_input import cut


class Happening(StrEnum):
    """What a compute agent's reports reveal."""

    HOST_REBOOT = "host_reboot"  # a new boot id: the VMs that ran there are gone
    GUEST_SHUTDOWN = "guest_shutdown"
    GUEST_CRASH = "guest_crash"
    AGENT_FORGOT = "agent_forgot"  # same boot id, the agent no longer knows the VM


class Response(StrEnum):
    """What vmledger does about it."""

    RESTART = "restart"  # an ordinary start job, queued behind the ticket
    STAY_STOPPED = "stay_stopped"
    DESTROY = "destroy"  # an ordinary destroy job
    QUARANTINE = "quarantine"  # we cannot tell: never start a second copy


PRESETS: Mapping[str, Mapping[Happening, Response]] = {
    "persistent": {
        Happening.HOST_REBOOT: Response.RESTART,
        Happening.GUEST_SHUTDOWN: Response.STAY_STOPPED,
        Happening.GUEST_CRASH: Response.RESTART,
        Happening.AGENT_FORGOT: Response.QUARANTINE,
    },
    "ephemeral": {
        Happening.HOST_REBOOT: Response.DESTROY,
        Happening.GUEST_SHUTDOWN: Response.DESTROY,
        Happening.GUEST_CRASH: Response.DESTROY,
        Happening.AGENT_FORGOT: Response.QUARANTINE,
    },
}
DEFAULT_PRESET = "persistent"

#: The responses vmledger carries out for each happening (service/commands/agents.py): a row
#: set one by one takes one of these, so no policy asks for what would silently not happen.
#: A guest that shut itself down is left stopped or destroyed (its start is the owner's); an
#: agent that forgot a VM always gets it quarantined: the VM may still run where it was, so
#: nothing may start or destroy another copy.
CARRIED_OUT: Mapping[Happening, tuple[Response, ...]] = {
    Happening.HOST_REBOOT: (Response.RESTART, Response.STAY_STOPPED, Response.DESTROY),
    Happening.GUEST_SHUTDOWN: (Response.STAY_STOPPED, Response.DESTROY),
    Happening.GUEST_CRASH: (Response.RESTART, Response.STAY_STOPPED, Response.DESTROY),
    Happening.AGENT_FORGOT: (Response.QUARANTINE,),
}


def validate(persistence: Any) -> str | dict[str, str]:
    """The policy as given, if valid: a preset name, or a mapping of an optional ``preset``
    and happenings to responses, each among those ``CARRIED_OUT`` for it. Raises
    ``ValueError`` naming what is wrong."""
    if isinstance(persistence, str):
        if persistence not in PRESETS:
            raise ValueError(f"unknown preset {cut(repr(persistence))}; "
                             f"one of {', '.join(PRESETS)}")
        return persistence
    if not isinstance(persistence, Mapping):
        # a ValueError, which pydantic reports as the field's error (a TypeError it would not)
        raise ValueError("must be a preset name or a mapping of happenings to "  # noqa: TRY004
                         "responses")
    checked: dict[str, str] = {}
    for key, value in persistence.items():
        if key == "preset":
            validate(value)
        elif key in {h.value for h in Happening}:
            if value not in {r.value for r in Response}:
                raise ValueError(f"{key}: unknown response {cut(repr(value))}")
            carried_out = CARRIED_OUT[Happening(key)]
            if value not in carried_out:
                raise ValueError(f"{key}: {value} is not carried out for it; one of "
                                 f"{', '.join(carried_out)}")
        else:
            raise ValueError(f"unknown happening {cut(repr(key))}")
        checked[str(key)] = str(value)
    return checked


def response(persistence: Any, happening: Happening) -> Response:
    """What the VM's policy says to do about ``happening``."""
    if isinstance(persistence, Mapping):
        chosen = persistence.get(happening.value)
        if chosen is not None:
            return Response(chosen)
        return PRESETS[persistence.get("preset", DEFAULT_PRESET)][happening]
    return PRESETS.get(persistence, PRESETS[DEFAULT_PRESET])[happening]


def table(persistence: Any) -> dict[str, str]:
    """What a valid policy (a preset or its rows) does about each happening, as text: two
    spellings of one policy (``"persistent"`` and ``{"preset": "persistent"}``) give one
    table."""
    return {happening.value: response(persistence, happening).value for happening in Happening}
