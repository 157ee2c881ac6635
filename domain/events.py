"""What every event of every aggregate carries (design.md, "Domain" and "Auditing"): its cause
and its link in the stream's hash chain.

``DomainEvent`` is the one base of the ``Vm``, ``Server`` and ``Volume`` events; each aggregate
derives its own base from it (``vm.event``, ``server.event``, ``volume.event``). Where a class
is defined never reaches the stored events: they name their class by its explicit ``TOPIC``.
"""

from __future__ import annotations

from typing import Any

from eventsourcing.domain import Aggregate

from domain import chain

# Who and what made an event happen: actor, request id, idempotency key, API version and the
# job uuid where a job caused it (``make_cause`` builds one).
Cause = dict[str, Any]


def make_cause(
    actor: str = "system",
    *,
    request_id: str | None = None,
    idempotency_key: str | None = None,
    api_version: str | None = None,
    job_uuid: str | None = None,
) -> Cause:
    """Build the cause every event carries: who and what made it happen (design.md)."""
    return {
        "actor": actor,
        "request_id": request_id,
        "idempotency_key": idempotency_key,
        "api_version": api_version,
        "job_uuid": job_uuid,
    }


class DomainEvent(chain.ChainedEvent, Aggregate.Event):
    """Base of every aggregate's events: the cause, and the stream's SHA-256 hash chain
    (``domain.chain``: applying the event moves the aggregate's ``chain_head`` to it)."""

    cause: Cause
    chain: str
