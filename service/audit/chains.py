"""Each stream's hash chain checked in log order, for ``vmledger audit verify`` and the
console's audit (service/audit/verify.py, service/audit/streams.py), naming the rows that
were edited rather than the intact events around them.

An event's ``chain`` hashes the previous event's chain, its stream, its version, its topic and
its content (domain/chain.py), so it says where the event belongs. The checker keeps each
stream's head (version and chain) and reads every event against it:

- the next version: its link is checked (``tampered`` when it does not hold);
- another version, whose link holds as the head's next version: its version was edited
  (``tampered``, saying which version it is). Two versions swapped were "out of order" for
  the intact events between them and "tampered" for the intact one after, and never named
  (auditor tester);
- a later version that does not link: a ``missing`` version, unless the stream goes on from
  before it. Then either the skipped event comes later in the log and is linked to by the one
  that jumped (it was moved: ``out of order``), or the one that jumped is out of place: kept
  aside and judged once the log is read, at the end of its stream (``out of order`` if it
  links there, ``tampered`` if it links nowhere: an event moved from another stream or
  forged). An event moved in from another stream was "out of order" for each of its new
  stream's intact events and never named itself (auditor tester);
- an earlier version that links nowhere: ``out of order`` (its position was changed).

A stream's findings are final once ``findings()`` is called after its last event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Notification

from domain import chain
from service.audit.findings import Difference, check_class, stored_fields


@dataclass
class _Event:
    """What the checker keeps of a stored event to link it later."""

    version: int
    position: int
    topic: str
    fields: dict[str, Any]

    @property
    def recorded(self) -> str | None:
        return self.fields.get("chain")


@dataclass
class _Jump:
    """A jump past a missing version: the head before it, the event that jumped and the
    ``missing`` finding, withdrawn if the stream goes on from before it."""

    version: int
    chain: str | None
    event: _Event
    finding: Difference


@dataclass
class _Head:
    version: int = 0
    chain: str | None = chain.GENESIS  # None: the head's event could not be read
    jump: _Jump | None = None
    suspects: list[_Event] = field(default_factory=list)


class ChainCheck:
    """Feed it a log's events in log order (``add``), then read ``findings()``."""

    def __init__(self, app: Any):
        self._app = app
        self._heads: dict[UUID, _Head] = {}
        self._findings: list[Difference] = []

    def add(self, stored: Notification) -> None:
        """Check one stored event against its stream's head, and move the head."""
        stream = stored.originator_id
        head = self._heads.setdefault(stream, _Head())
        where, version = f"stream {stream}", stored.originator_version
        try:
            fields = stored_fields(self._app.mapper, stored)
        except Exception as error:  # noqa: BLE001 - any undecodable event is a finding
            self._undecodable(head, where, stored, error)
            return
        self._findings += check_class(where, stored, fields)
        event = _Event(version, stored.id, stored.topic, fields)
        following = head.version + 1
        if version == following:
            expected = self._link(stream, head.chain, event)
            if expected is not None and event.recorded != expected:
                self._found(where, version, "tampered",
                            "the event's content or its link to the previous event was changed")
            head.version, head.chain = version, event.recorded or expected
        elif event.recorded is not None and self._link(
                stream, head.chain, event, as_version=following) == event.recorded:
            self._found(where, version, "tampered",
                        f"at position {stored.id}: its version was changed: its chain makes it "
                        f"the event of version {following}")
            head.version, head.chain = following, event.recorded
        elif version > following:
            missing = self._found(where, following, "missing",
                                  f"the stream goes from version {head.version} to {version}")
            head.jump = _Jump(head.version, head.chain, event, missing)
            head.version, head.chain = version, event.recorded
        elif not self._resumes(stream, head, event):
            self._found(where, version, "out of order",
                        f"at position {stored.id}, after version {head.version} in the log "
                        "(its position was changed)")

    def findings(self) -> list[Difference]:
        """Every finding, once every event was added: the events kept aside are judged at the
        end of their streams."""
        for stream, head in self._heads.items():
            where = f"stream {stream}"
            for event in head.suspects:
                if event.version <= head.version:
                    continue  # another event holds its version: it was found as such
                if (event.version == head.version + 1
                        and self._link(stream, head.chain, event) == event.recorded):
                    self._found(where, event.version, "out of order",
                                f"at position {event.position}, before version {head.version} "
                                "in the log (its position was changed)")
                else:
                    self._found(where, event.version, "tampered",
                                f"at position {event.position}: it does not link to this "
                                f"stream's version {event.version - 1} (an event moved from "
                                "another stream, or forged)")
                head.version, head.chain = event.version, event.recorded
            head.suspects = []
        return list(self._findings)

    def _resumes(self, stream: UUID, head: _Head, event: _Event) -> bool:
        """Whether ``event``, an earlier version than the head's, continues the stream from
        before its last jump; if so the jump's ``missing`` finding is withdrawn and either
        ``event`` was moved later in the log (the event that jumped links to it: ``out of
        order``) or the event that jumped is out of place (kept aside, and the stream goes on
        from ``event``)."""
        jump = head.jump
        if (jump is None or jump.chain is None or event.recorded is None
                or event.version != jump.version + 1
                or self._link(stream, jump.chain, event) != event.recorded):
            return False
        self._findings.remove(jump.finding)
        head.jump = None
        jumped = jump.event
        if (jumped.version == event.version + 1
                and self._link(stream, event.recorded, jumped) == jumped.recorded):
            self._found(f"stream {stream}", event.version, "out of order",
                        f"at position {event.position}, after version {head.version} in the "
                        "log (its position was changed)")
        else:
            head.suspects.append(jumped)
            head.version, head.chain = event.version, event.recorded
        return True

    def _undecodable(self, head: _Head, where: str, stored: Notification,
                     error: Exception) -> None:
        """An event whose state cannot be read: the finding, and the head moves to it with no
        chain (the next event's link cannot be checked: it is not called tampered)."""
        version = stored.originator_version
        if version <= head.version:
            self._found(where, version, "out of order",
                        f"at position {stored.id}, after version {head.version} in the log "
                        "(its position was changed)")
            return
        if version > head.version + 1:
            self._found(where, head.version + 1, "missing",
                        f"the stream goes from version {head.version} to {version}")
        self._found(where, version, "undecodable", f"{type(error).__name__}: {error}")
        head.version, head.chain, head.jump = version, None, None

    @staticmethod
    def _link(stream: UUID, previous: str | None, event: _Event,
              as_version: int | None = None) -> str | None:
        """``event``'s chain after ``previous`` (at ``as_version``, or its own); None when
        ``previous`` could not be read."""
        if previous is None:
            return None
        return chain.link(previous, stream, as_version or event.version, event.topic,
                          event.fields)

    def _found(self, where: str, version: int, kind: str, detail: str) -> Difference:
        difference = Difference(where, version, kind, detail)
        self._findings.append(difference)
        return difference
