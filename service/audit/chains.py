"""Each stream's hash chain checked in log order, for ``vmledger audit verify`` and the
console's audit (service/audit/verify.py, service/audit/streams.py), naming the rows that
were edited rather than the intact events around them.

An event's ``chain`` hashes the previous event's chain, its stream, its version, its topic and
its content (domain/chain.py), so it says where the event belongs. The checker keeps each
stream's head (version and chain) and reads every event against it:

- the next version: its link is checked. When it does not hold, the next event of the stream
  says what was edited (``tampered``, kept pending until then): it links to the stored chain
  (the content was changed), or to the chain the content makes (the chain value was changed),
  or to neither (the whole row is another stream's event, or forged: the next one cannot be
  checked against it and is not called tampered, as after an undecodable event). Each was
  "tampered" for the intact event after it too (auditor tester);
- another version, whose link holds as the head's next version: its version was edited
  (``tampered``, saying which version it is). Two versions swapped were "out of order" for
  the intact events between them and "tampered" for the intact one after, and never named
  (auditor tester);
- a later version that does not link: a ``missing`` version, unless the stream goes on from
  before it, or an event set aside earlier holds the version skipped. The event that comes
  later in the log with the skipped version was moved (``out of order``), and is judged as
  the next version would be, the event that jumped saying what was edited when it does not
  link (``tampered`` too): an event edited and moved was only "out of order" with a false
  ``missing`` (auditor tester). When the one that jumped is out of place, it is kept aside
  and judged when its stream reaches its version, or at the stream's end (``out of order`` if
  it links there, ``tampered`` if it links nowhere: an event moved from another stream or
  forged). Kept aside, such an event was skipped as if another held its version (auditor
  tester);
- an earlier version that links nowhere: ``out of order`` (its position was changed),
  kept so that a stream resuming before it goes on through it (two events moved later in
  reverse order made the intact event after them "tampered"). When it does, the stretch
  from the version skipped to the head is weighed whole, and only its events moved
  (service/audit/moves.py) are ``out of order``: the finding of one in place is withdrawn,
  and an event moved earlier (the one that jumped, or one after it) is named ``before
  version V``. Two events swapped were named as the intact events between them, and the one
  moved earlier not at all (auditor tester). A stream keeps each jump it made until it goes
  on from before it, so an event moved later past another moved later is not ``missing``.
  An undecodable one is ``undecodable`` and ``out of order``, and the version it holds is
  not ``missing``.

A stream's findings are final once ``findings()`` is called after its last event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Notification

from domain import chain
from service.audit.findings import (
    CHAIN,
    CONTENT,
    UNJUDGED,
    Difference,
    WrongTypeError,
    check_class,
    foreign,
    stored_fields,
)
from service.audit.moves import moved


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
    ``missing`` finding, withdrawn if the stream goes on from before it; and ``run``, the
    ``(version, position)`` of the event that jumped and of those read after it as the
    head's next version (while no later jump was made), which a stream resuming before it
    is weighed against (``service.audit.moves``)."""

    version: int
    chain: str | None
    event: _Event
    finding: Difference
    run: list[tuple[int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.run.append((self.event.version, self.event.position))


@dataclass
class _Pending:
    """An event whose link did not hold: the chain its content makes after the version
    before it, and its ``tampered`` finding, worded once the next event is read."""

    event: _Event
    made: str | None
    finding: Difference


@dataclass
class _Head:
    version: int = 0
    chain: str | None = chain.GENESIS  # None: the head's event could not be read
    jumps: list[_Jump] = field(default_factory=list)  # the last one made is last
    suspects: list[_Event] = field(default_factory=list)
    # found out of order, after the head: each with its finding, withdrawn when the stream
    # turns out to go through it in place (the events around it were moved)
    late: list[tuple[_Event, Difference]] = field(default_factory=list)
    pending: _Pending | None = None


class ChainCheck:
    """Feed it a log's events in log order (``add``), then read ``findings()``."""

    def __init__(self, app: Any):
        self._app = app
        self._heads: dict[UUID, _Head] = {}
        self._findings: list[Difference] = []
        self._outside: list[tuple[UUID, int, int]] = []  # (stream, version, position)

    def add(self, stored: Notification) -> None:
        """Check one stored event against its stream's head, and move the head."""
        stream = stored.originator_id
        head = self._heads.setdefault(stream, _Head())
        where, version = f"stream {stream}", stored.originator_version
        if stored.id < 1:
            self._outside.append((stream, version, stored.id))
        try:
            fields = stored_fields(self._app.mapper, stored)
        except Exception as error:  # noqa: BLE001 - any undecodable event is a finding
            self._undecodable(head, where, stored, error)
            return
        self._findings += check_class(where, stored, fields)
        event = _Event(version, stored.id, stored.topic, fields)
        self._fill(stream, head, version)
        following = head.version + 1
        if version == following:
            self._next(stream, head, event)
            if head.jumps:
                head.jumps[-1].run.append((version, stored.id))
        elif event.recorded is not None and self._link(
                stream, head.chain, event, as_version=following) == event.recorded:
            self._settle(stream, head, None)
            self._found(where, version, "tampered",
                        f"at position {stored.id}: its version was changed: its chain makes it "
                        f"the event of version {following}")
            head.version, head.chain = following, event.recorded
        elif version > following:
            self._settle(stream, head, None)
            missing = self._found(where, following, "missing",
                                  f"the stream goes from version {head.version} to {version}")
            head.jumps.append(_Jump(head.version, head.chain, event, missing))
            head.version, head.chain = version, event.recorded
        elif not self._resumes(stream, head, event):
            head.late.append((event, self._found(
                where, version, "out of order",
                f"at position {stored.id}, after version {head.version} in the log (its "
                "position was changed)")))

    def findings(self) -> list[Difference]:
        """Every finding, once every event was added: the events kept aside are judged at the
        end of their streams."""
        for stream, head in self._heads.items():
            where = f"stream {stream}"
            self._settle(stream, head, None)
            for event in head.suspects:
                if event.version <= head.version:  # the stream went past it by a gap
                    self._found(where, event.version, "out of order",
                                f"at position {event.position}, before the versions it follows "
                                "in the log (its position was changed); a version before it is "
                                "missing, so its link is not checked")
                    continue
                if (event.version == head.version + 1
                        and self._link(stream, head.chain, event) == event.recorded):
                    self._found(where, event.version, "out of order",
                                f"at position {event.position}, before version {head.version} "
                                "in the log (its position was changed)")
                else:
                    self._found(where, event.version, "tampered",
                                f"at position {event.position}: {foreign(event.version)}")
                head.version, head.chain = event.version, event.recorded
            head.suspects = []
        self._out_of_the_log()
        return list(self._findings)

    def _out_of_the_log(self) -> None:
        """Each event at a position outside the log (0 or below) is ``out of order`` in
        those words, in place of what its position made it among its stream's events."""
        for stream, version, position in self._outside:
            where = f"stream {stream}"
            self._findings = [f for f in self._findings if (f.where, f.version, f.kind)
                              != (where, version, "out of order")]
            self._found(where, version, "out of order",
                        f"at position {position}, outside the log (its positions start at 1, "
                        "and what reads the log by position never reads it): its position was "
                        "changed")

    def _next(self, stream: UUID, head: _Head, event: _Event) -> None:
        """``event``, the head's next version: its link checked (a finding kept pending, to be
        worded by the event after it), and the head moved to it."""
        self._settle(stream, head, event)
        made = self._link(stream, head.chain, event)
        if made is not None and event.recorded != made:
            finding = self._found(f"stream {stream}", event.version, "tampered", UNJUDGED)
            head.pending = _Pending(event, made, finding)
        head.version, head.chain = event.version, event.recorded or made

    def _settle(self, stream: UUID, head: _Head, successor: _Event | None) -> None:
        """Word the finding of the head's event kept pending (if any) by ``successor``, the
        next event read of its stream (None: there is none, or not the next version), and
        set the chain ``successor`` is checked against: the one it links to, or None when it
        links to neither the stored chain nor the one the content makes (not checked)."""
        pending, head.pending = head.pending, None
        if pending is None:
            return
        detail, previous = self._edit(stream, pending.event, pending.made, successor)
        if head.version == pending.event.version:  # the head did not go back before it
            head.chain = previous
        at = next(i for i, f in enumerate(self._findings) if f is pending.finding)
        self._findings[at] = Difference(pending.finding.where, pending.finding.version,
                                        pending.finding.kind, detail)

    def _edit(self, stream: UUID, event: _Event, made: str | None,
              successor: _Event | None) -> tuple[str, str | None]:
        """What was edited of ``event``, whose stored chain is not ``made`` (the chain its
        content makes after the version before it), as ``successor`` (its next version, or
        None) tells it, and the chain the successor is checked against (None: not checked)."""
        if (successor is None or successor.recorded is None
                or successor.version != event.version + 1):
            return UNJUDGED, event.recorded or made
        if (event.recorded is not None
                and self._link(stream, event.recorded, successor) == successor.recorded):
            return CONTENT, event.recorded
        if made is not None and self._link(stream, made, successor) == successor.recorded:
            return CHAIN, made
        return foreign(event.version, successor.version), None

    def _fill(self, stream: UUID, head: _Head, version: int) -> None:
        """Before the head jumps to ``version``: the events kept aside that hold the versions
        it would skip, each read as the head's next version and ``out of order`` (it came
        before the versions it follows)."""
        while version > head.version + 1:
            held = next((e for e in head.suspects if e.version == head.version + 1), None)
            if held is None:
                return
            head.suspects.remove(held)
            self._next(stream, head, held)
            self._found(f"stream {stream}", held.version, "out of order",
                        f"at position {held.position}, before version {held.version - 1} in "
                        "the log (its position was changed)")

    def _resumes(self, stream: UUID, head: _Head, event: _Event) -> bool:
        """Whether ``event``, an earlier version than the head's, holds the version skipped
        by one of the head's jumps; if so that jump's ``missing`` finding is withdrawn. If it
        links there, the stream goes on from it through the events found out of order since
        (``_relinked``): when that reaches the event that jumped, the events moved are the
        fewest whose positions put that stretch in order (``_weigh``); else the event that
        jumped is out of place (kept aside, and the stream goes on from ``event``: only for
        the last jump). If it does not link, it was moved and edited, or is another
        stream's (``tampered`` as the event that jumped tells it, and ``out of order``)."""
        jump = next((j for j in head.jumps if j.version + 1 == event.version), None)
        if jump is None or jump.chain is None:
            return False
        jumped = jump.event
        made = self._link(stream, jump.chain, event)
        if event.recorded is None or made != event.recorded:
            self._withdraw(head, jump)
            self._tampered_late(stream, head, jump, event, made)
            return True
        relinked = self._relinked(stream, head, event)
        last = relinked[-1] if relinked else event
        reaches = (jumped.version == last.version + 1
                   and self._link(stream, last.recorded, jumped) == jumped.recorded)
        if not reaches and jump is not head.jumps[-1]:
            return False
        self._withdraw(head, jump)
        named = self._weigh(stream, [event, *relinked], jump.run if reaches else [])
        if event.version in named:
            self._found(f"stream {stream}", event.version, "out of order",
                        f"at position {event.position}, after version {head.version} in the "
                        "log (its position was changed)")
        for late in [late for late in head.late if late[0] in relinked]:
            head.late.remove(late)
            if late[0].version not in named:  # in place: the events around it were moved
                self._findings.remove(late[1])
        if not reaches:
            head.suspects.append(jumped)
            head.version, head.chain = last.version, last.recorded
        return True

    def _withdraw(self, head: _Head, jump: _Jump) -> None:
        """The stream goes on from before ``jump``: its ``missing`` finding is withdrawn."""
        self._findings.remove(jump.finding)
        head.jumps.remove(jump)

    def _weigh(self, stream: UUID, late: list[_Event], run: list[tuple[int, int]]
               ) -> set[int]:
        """The versions moved (``service.audit.moves``) of the stretch of the stream that
        ``late`` (read after later versions) and ``run`` (``(version, position)``, read in
        order after the jump they follow) make, linked in version order. Those of ``run``
        are found ``out of order`` here, ``before version V`` (the last earlier version
        after it in the log); those of ``late`` are the caller's to report."""
        stretch = [(e.version, e.position) for e in late] + run
        named = moved(stretch)
        for version, position in run:
            if version in named:
                before = max(v for v, p in stretch if p > position and v < version)
                self._found(f"stream {stream}", version, "out of order",
                            f"at position {position}, before version {before} in the log "
                            "(its position was changed)")
        return named

    def _relinked(self, stream: UUID, head: _Head, event: _Event) -> list[_Event]:
        """The events found out of order earlier (``head.late``) that follow ``event`` link
        by link, in version order: the stream goes on from the last. Two events moved later
        in reverse order made the intact event after them "tampered" (auditor tester)."""
        chain_: list[_Event] = []
        last = event
        while (following := next(
                (e for e, _ in head.late if e.version == last.version + 1 and last.recorded
                 and self._link(stream, last.recorded, e) == e.recorded), None)) is not None:
            chain_.append(following)
            last = following
        return chain_

    def _tampered_late(self, stream: UUID, head: _Head, jump: _Jump, event: _Event,
                       made: str | None) -> None:
        """``event`` holds the version the head's last jump skipped but does not link there:
        ``tampered`` (worded by the event that jumped, when it is the next version) and
        ``out of order``; versions still skipped after it are ``missing``."""
        where, jumped = f"stream {stream}", jump.event
        detail, _ = self._edit(stream, event, made, jumped)
        self._found(where, event.version, "tampered", detail)
        self._found(where, event.version, "out of order",
                    f"at position {event.position}, after version {head.version} in the log "
                    "(its position was changed)")
        if jumped.version > event.version + 1:
            missing = self._found(where, event.version + 1, "missing",
                                  f"the stream goes from version {event.version} to "
                                  f"{jumped.version}")
            head.jumps.append(_Jump(event.version, event.recorded or made, jumped, missing))

    def _undecodable(self, head: _Head, where: str, stored: Notification,
                     error: Exception) -> None:
        """An event whose state cannot be read: the finding, and the head moves to it with no
        chain (the next event's link cannot be checked: it is not called tampered)."""
        version = stored.originator_version
        if version > head.version:
            self._settle(stored.originator_id, head, None)
        if version <= head.version:  # moved: the version a jump skipped is not missing
            jump = next((j for j in head.jumps if j.version + 1 == version), None)
            if jump is not None:
                self._withdraw(head, jump)
                if jump.event.version > version + 1:
                    self._found(where, version + 1, "missing", f"the stream goes from version "
                                f"{version} to {jump.event.version}")
            self._found(where, version, "undecodable", _reason(error))
            self._found(where, version, "out of order",
                        f"at position {stored.id}, after version {head.version} in the log "
                        "(its position was changed)")
            return
        if version > head.version + 1:
            self._found(where, head.version + 1, "missing",
                        f"the stream goes from version {head.version} to {version}")
        self._found(where, version, "undecodable", _reason(error))
        head.version, head.chain = version, None
        head.jumps.clear()

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


def _reason(error: Exception) -> str:
    """Why an event is undecodable: a column of the wrong type says so itself."""
    return str(error) if isinstance(error, WrongTypeError) else f"{type(error).__name__}: {error}"
