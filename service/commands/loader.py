"""The one loader: the aggregate a change decides on, folded from its stream or, on a change's
first attempt, copied from this process's own last save without reading (docs/architecture.md,
"Optimistic concurrency and the change loop" and "Deciding on the cache").

A mixin of ``service.commands.change.Changes``; nothing else reads a stream to write it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError

from domain.alias_hold import AliasHold, AliasHoldNotFoundError
from domain.derived_ids import is_derived_id
from domain.errors import (
    DomainError,
    ServerNotFoundError,
    UuidTakenError,
    VmNotFoundError,
    VolumeNotFoundError,
)
from domain.network import Network
from domain.network_external import ExternalNetwork
from domain.server import Server
from domain.vm import Vm
from domain.volume import Volume
from service.commands.aggregate_cache import cached_save, copy_of_fold, fold_stream
from service.commands.networks import NetworkNotFoundError

A = TypeVar("A", Vm, Server, Volume, Network, ExternalNetwork, AliasHold)

# The kinds whose streams' ids the service derives from a name (domain/derived_ids.py): no
# other kind's resource may be made under such an id
DERIVED = (AliasHold, ExternalNetwork)

# The refusal for a stream that does not exist (or is another kind's), by aggregate kind.
NOT_FOUND: dict[type, type[DomainError]] = {
    Vm: VmNotFoundError, Server: ServerNotFoundError, Volume: VolumeNotFoundError,
    Network: NetworkNotFoundError,
    ExternalNetwork: NetworkNotFoundError,  # (no stream: no volume noted on the uuid yet)
    AliasHold: AliasHoldNotFoundError,
}


class Loader:
    """The one loader; a mixin of ``Changes``, whose ``Commands`` provides the event store and
    the committer (which keeps this process's own saves, ``SavedHere``)."""

    app: Any  # the eventsourcing Application (service.commands.application.VmLedger)
    committer: Any  # service.commands.committer.Committer

    def load_aggregate(self, kind: type[A], uuid: str | UUID, version: int | None = None) -> A:
        """The ``kind`` aggregate folded from its stream (at ``version`` if given). Raises
        ``kind``'s not-found error (``NOT_FOUND[kind]``: ``VmNotFoundError``,
        ``ServerNotFoundError``, ...) when there is no such stream, or it is another kind's."""
        aggregate = self._fold_any(uuid, version)
        if not isinstance(aggregate, kind):
            raise NOT_FOUND[kind](uuid)
        return aggregate

    def _fold_any(self, uuid: str | UUID, version: int | None = None) -> Any | None:
        """The aggregate of whatever kind stream ``uuid`` holds; None when there is none."""
        try:
            aggregate_id = uuid if isinstance(uuid, UUID) else UUID(str(uuid))
            return fold_stream(self.app, aggregate_id, version)
        except (AggregateNotFoundError, ValueError):
            return None

    def _load_or_new(self, kind: type[A], uuid: str | UUID, new: Callable[[], A] | None,
                     *, first: bool, trust_cache: bool) -> tuple[A, bool]:
        """The aggregate an attempt decides on, and whether it is unconfirmed: with
        ``trust_cache``, while the process's guesses are right (``SavedHere.trusted``), a copy
        of the cached fold this process's own last append made, read from no log
        (``aggregate_cache.cached_save``); else the stream's current fold (noting, when this
        process had saved it last, whether that save was still current)."""
        if new is not None and kind not in DERIVED and is_derived_id(uuid):
            raise UuidTakenError(uuid)  # a stream id the service derives from a name
        if new is not None and first:
            return new(), False  # a create reads nothing first: its stream is almost always new
        saved_here = self.committer.saved_here
        own = self._cached_save(uuid) if trust_cache else None
        if isinstance(own, kind) and saved_here.trusted:
            return copy_of_fold(own), True
        if new is None:
            aggregate = self.load_aggregate(kind, uuid)
        else:
            aggregate = self._fold_any(uuid)
            if aggregate is None:
                return new(), False
            if not isinstance(aggregate, kind):
                raise UuidTakenError(uuid)
        if isinstance(own, kind):
            saved_here.note(aggregate.version == own.version)
        return aggregate, False

    def _cached_save(self, uuid: str | UUID) -> Any | None:
        try:
            aggregate_id = uuid if isinstance(uuid, UUID) else UUID(str(uuid))
        except ValueError:
            return None
        return cached_save(self.app, self.committer.saved_here, aggregate_id)
