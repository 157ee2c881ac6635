"""The one way to change a stream: load, decide, save; on a conflict with another writer,
reload and decide again (api.md, "Concurrency and idempotency"; docs/architecture.md,
"Optimistic concurrency and the change loop").

Every writer goes through ``Changes.change``: the API's commands (``Commands``), the job
worker (claim, lease, steps, outcomes), agent reports (``Agents``), server and volume commands
(``service.commands.fleet``), the quarantine and the trace replay. What one attempt does:

1. the idempotency key, if any: a key already used for this request returns its first outcome;
2. load the aggregate (``load_aggregate``, the one loader, service/commands/loader.py), or
   make it with ``new``; the first attempt on a stream this process saved last decides on
   its cached save without reading (``service.commands.aggregate_cache``): unconfirmed, so
   anything but its own committed append (a refusal, nothing to append, a conflict) is
   decided again on a fresh load;
3. the caller's scope (``owner_uuid``): an aggregate not that owner's is not found, before
   ``If-Match``, whose refusal would tell its version (api.md, "Contract: roles");
   ``If-Match``: a version other than the current one raises ``VersionMismatchError``;
4. ``decide(aggregate)``: records events, or raises a domain refusal (nothing is saved);
   a refusal of a request with an idempotency key, from here or steps 2, 3 and 5, is
   given only once the key is read again after the load and still names nothing: the
   load may have seen the commit of the same request made in another process since step
   1 (a stream's turn holds this process's writers only), and its key, committed with its
   events, is then found, and its first outcome is the answer (docs/architecture.md,
   "Idempotency keys across processes"); so too before ``ConflictRetriesExhaustedError``;
5. the other streams' side of the pending events (service/commands/cross_stream.py): the
   servers' side of the VMs' capacity claims and releases (``_server_effects``), the
   networks' side of their NICs removed or destroyed and of the volumes' networks attached or
   detached (``_network_effects``), and the holds of the aliases the VMs take and give up
   (``_alias_effects``, service/commands/aliases.py: a taken alias is refused here; only
   with ``unique_aliases``, else nothing about aliases is read or written);
6. nothing pending: nothing is appended (the idempotency key is stored alone);
7. otherwise ONE call, ``save``, appends every pending event (and the key) in one
   transaction; a conflict (``IntegrityError``) counts, backs off and starts again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Literal, NamedTuple, TypeVar
from uuid import UUID

from eventsourcing.persistence import IntegrityError

from domain.alias_hold import held_aliases
from domain.errors import DomainError, VersionMismatchError
from domain.network import Network
from domain.server import Server
from domain.vm import Vm
from domain.volume import Volume
from service.commands.cross_stream import CrossStreamEffects
from service.commands.idempotency import IdempotencyKey, IdempotencyStore, KeyRecord, Recorded
from service.commands.loader import NOT_FOUND, A, Loader
from service.commands.retry import ConflictRetriesExhaustedError, back_off_s
from service.commands.snapshots import snapshot_long_streams

R = TypeVar("R")


@dataclass(frozen=True)
class Accepted:
    """A command's outcome: the VM, its job, the VM version and the log position after it.

    ``position`` is None when nothing was appended (a repeat that returned an existing job).
    """

    vm_uuid: str
    job_uuid: str | None
    version: int
    position: int | None


#: ``If-Match: *``: any current version, of an aggregate that exists (RFC 9110, 13.1.1).
ANY_VERSION: Literal["*"] = "*"
#: A command's ``If-Match``: the version the aggregate must be at, ``ANY_VERSION``, or None
#: (no header). ``*`` is not None: a command that makes an aggregate the log never had
#: when it is sent no header (a vm-agent report of a VM found) refuses it with ``*`` as
#: with a version, 404 (a tester: ``*`` read as no header recorded such a VM).
IfMatch = int | Literal["*"] | None


def check_version(aggregate: Vm | Server | Volume | Network, if_match: IfMatch,
                  kind: type) -> None:
    """Raise ``VersionMismatchError`` (412) when ``if_match`` (a request's ``If-Match``; None:
    none; ``ANY_VERSION`` matches every version) is not ``aggregate``'s version; ``kind``
    names it in the message. What
    ``change`` checks before ``decide``; a command whose aggregate is not the one the
    version is of (an agent's report of a VM, saved with its server) checks it in its
    ``decide``, after the checks whose refusal must come first."""
    if if_match is not None and if_match != ANY_VERSION and aggregate.version != if_match:
        raise VersionMismatchError(if_match, aggregate.version,
                                   "VM" if kind is Vm else kind.__name__.lower())


class Changed(NamedTuple, Generic[R]):
    """What ``change`` did: ``decide``'s answer, the aggregate as saved, and the log position
    of the save (None: nothing was appended). ``replayed`` is the first outcome of a request
    whose idempotency key was already used (then nothing was decided)."""

    decision: R
    aggregate: Any
    position: int | None
    replayed: Accepted | Recorded | None = None


class Changes(Loader, CrossStreamEffects):
    """The change loop; a mixin of ``service.commands.application.Commands``, which provides
    the event store and its hooks. The one loader is ``Loader`` (service/commands/loader.py),
    what a change saves beside its aggregate ``CrossStreamEffects``
    (service/commands/cross_stream.py)."""

    keys: IdempotencyStore
    retries: int
    on_conflict: Callable[[], None]
    after_save: list[Callable[[int], None]]
    unique_aliases: bool  # AliasCommands: off, nothing about aliases is read or written

    def change(
        self,
        kind: type[A],
        uuid: str | UUID,
        decide: Callable[[A], R],
        *,
        if_match: IfMatch = None,
        owner_uuid: str | None = None,
        idempotency_key: IdempotencyKey | None = None,
        outcome: Callable[[R, A], Accepted] | None = None,
        new: Callable[[], A] | None = None,
        also: Callable[[R], Iterable[Vm | Server | Volume]] | None = None,
    ) -> Changed[R]:
        """Load the ``kind`` aggregate ``uuid``, ``decide``, save; on a conflict with another
        writer reload and decide again, ``retries`` times at most (the steps are in the module
        docstring).

        - ``idempotency_key`` with ``outcome`` (what to remember of the decision): the key is
          stored in the transaction of the events; one already used for this request returns
          ``Changed(replayed=its first outcome)``, also when it is found only on a refusal's
          second look (step 4).
        - ``new`` makes the aggregate when its stream does not exist (the first attempt makes
          it without reading; with ``unique_aliases``, a refusal of that attempt is given only
          once a read finds no stream: a retried create answers as the first did, though an
          alias its failed VM gave up was taken since); ``decide`` is then given it with its
          creation pending, and can tell it from an existing one by ``pending_events``. A
          stream of another kind is ``UuidTakenError``: it is no concurrent writer, and no
          retry would get past it.
        - ``also`` names other aggregates ``decide`` changed, saved in the same transaction.
        - ``owner_uuid``: the owner the request is scoped to (an owner token's): an aggregate
          whose ``owner_uuid`` is another (another owner's VM, or its own once quarantined) is
          the not-found refusal of ``kind``, checked before ``if_match`` and ``decide``, so
          neither a 412 nor a refusal of ``decide`` tells that it exists (security tester:
          ``If-Match: "1"`` answered 412 with the version of a VM that was 404 to a GET).

        A decision made on this process's cached save (no read: ``_load_or_new``) stands only
        if its aggregate's append commits; otherwise the attempt is made again at once on the
        log's state, uncounted (docs/architecture.md, "Deciding on the cache").

        Raises ``VersionMismatchError`` when ``if_match`` is not the current version, the
        not-found refusal of ``kind`` (``UuidTakenError`` with ``new``), whatever ``decide``
        raises,
        ``IdempotencyKeyReusedError`` and ``ConflictRetriesExhaustedError``.
        """
        attempt, trust_cache, unread = 0, True, True
        while attempt < self.retries:
            # One change of this stream at a time in this process, from its load to its
            # commit: a group commit's queue lengthens that window, and two of a process's
            # writers of one stream in one batch would only make one of them a conflict.
            with self.committer.turn(uuid):
                replay = self._replay(idempotency_key)
                if replay is not None:
                    return replay
                unconfirmed = False
                made_unread = new is not None and attempt == 0 and unread
                try:
                    aggregate, unconfirmed = self._load_or_new(
                        kind, uuid, new, first=made_unread, trust_cache=trust_cache)
                    if owner_uuid is not None and getattr(
                            aggregate, "owner_uuid", None) != owner_uuid:
                        raise NOT_FOUND[kind](uuid)
                    check_version(aggregate, if_match, kind)
                    # the aliases a VM holds as loaded (none while it is being made)
                    before = {id(aggregate): frozenset() if aggregate.pending_events
                              else held_aliases(aggregate)} if (
                        self.unique_aliases and isinstance(aggregate, Vm)) else {}
                    decision = decide(aggregate)
                    record = None
                    if idempotency_key is not None and outcome is not None:
                        first = outcome(decision, aggregate)
                        record = self.keys.record(
                            idempotency_key, getattr(first, "status", 202), first)
                    pending = self._pending(aggregate, list(also(decision)) if also else [],
                                            before)
                except DomainError:
                    if unconfirmed or (made_unread and self.unique_aliases):
                        # a refusal is only given on the log's state: a create's stream, made
                        # without a read, may exist (a retried create answers as the first;
                        # only with alias holds, VMLEDGER_UNIQUE_ALIASES, can a create's
                        # decision depend on what other streams hold)
                        trust_cache = unread = False
                        continue
                    # The key again, read after the load: the load may have seen the commit
                    # of this request's twin in another process (turns hold this process's
                    # writers only), made since the read above; the key committed with its
                    # events, so it is found now, and its first answer is the answer.
                    replay = self._replay(idempotency_key)
                    if replay is None:
                        raise
                    return replay
                if unconfirmed and not aggregate.pending_events:
                    trust_cache = False  # only its own append proves the cached fold current
                    continue
                if not pending:
                    prior = self._store_key_alone(record) if record is not None else None
                    return Changed(decision, aggregate, None, prior)
                try:
                    position = self.save(*pending, idempotency=record)
                except IntegrityError:
                    if unconfirmed:  # another process appended since this one's last save
                        self.committer.saved_here.note(False)
                        trust_cache = False
                        continue
                    self.on_conflict()
                else:
                    if unconfirmed:
                        self.committer.saved_here.note(True)
                    return Changed(decision, aggregate, position)
            self.committer.pause(back_off_s(attempt))  # a command task parks instead
            attempt += 1
        replay = self._replay(idempotency_key)  # the last conflict may have been the twin's
        if replay is not None:
            return replay
        raise ConflictRetriesExhaustedError(
            f"{kind.__name__.lower()} {uuid}: {self.retries} conflicting writes")

    def save(self, *aggregates: Vm | Server | Volume, idempotency: KeyRecord | None = None) -> int:
        """THE append: the aggregates' pending events in one transaction (with the idempotency
        key, if any); returns the log position of the last. Raises ``IntegrityError`` when
        another writer changed one of the streams first. Group-committed with other
        callers' appends (service/commands/committer.py): a conflict fails this append
        alone."""
        kwargs: dict[str, Any] = {}
        if idempotency is not None:
            kwargs = {
                "idempotency": idempotency,
                "idempotency_expired_before": idempotency.created_at - self.keys.ttl_s,
            }
        recordings = self.committer.save(*aggregates, **kwargs)
        position = recordings[-1].notification.id
        snapshot_long_streams(self.app, recordings)
        for callback in self.after_save:
            callback(position)
        return position

    # -- one attempt's parts ------------------------------------------------------------------

    def _replay(self, key: IdempotencyKey | None) -> Changed[Any] | None:
        """What ``change`` returns for a request whose ``key`` was already used for it (its
        first outcome as ``replayed``), or None. Raises ``IdempotencyKeyReusedError``."""
        prior = self._first_outcome(key)
        return None if prior is None else Changed(None, None, None, prior)

    def _first_outcome(self, key: IdempotencyKey | None) -> Accepted | Recorded | None:
        if key is None:
            return None
        prior = self.keys.find(key)
        if prior is None:
            return None
        if "uuid" in prior:  # a volume's, network's or server's (``Recorded``)
            return Recorded(**prior)
        prior.pop("status")
        return Accepted(**prior)

    def _store_key_alone(self, record: KeyRecord) -> Accepted | None:
        try:
            self.keys.insert_alone(record)
        except IntegrityError:
            return self._first_outcome(record.key)  # a twin request stored it first
        return None
