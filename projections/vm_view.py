"""``vm_view``: the VM object that GetVm and ListVms serve, one row per VM.

Each row keeps the VM's folded state (a snapshot of the ``Vm`` aggregate), so applying an event
is the domain's own fold (``event.mutate``): the read model cannot drift from the aggregate, and
a missed event is caught (the version check in ``mutate`` fails). The VMs a batch folded are
kept in memory for the next batch from the position it reached (``projections.kept_folds``):
the next batch folds onto them without reading their rows (docs/performance.md, P5).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Transcoder

from domain.folding import apply_stored
from domain.states import Execution
from domain.vm import Vm
from projections.db import Database, Tx
from projections.formats import rfc3339, uuid_text
from projections.kept_folds import KeptFolds
from projections.rebuild import SUFFIX as REBUILD_SUFFIX
from projections.runner import ReadModel
from projections.tracking_behind import TrackingBehindError
# the row-fold handling lives in vm_view_folds; its names are re-exported for their users
from projections.vm_view_folds import (  # noqa: F401
    FOLD_OF, FoldRows, Refold, UnusableFoldError,
)


# VMs kept folded between batches: every VM a live batch touches is kept; a few thousand
# (a few kB each) cover the VMs a busy fleet's last seconds touched.
KEPT_VMS = 4096
_COLUMNS = (
    "uuid", "owner_uuid", "server_uuid", "brand", "state", "alias", "image_uuid", "ram",
    "create_timestamp", "version", "tags_text", "body", "snapshot",
)


def tag_text(value: Any) -> str:
    """A tag value as filters compare it: strings as they are, others in JSON form."""
    return value if isinstance(value, str) else json.dumps(value)


def tag_format(tags: dict[str, Any]) -> str:
    """The tags as one sortable string, in VMAPI's format (sdc-vmapi ``objectToTagFormat``:
    ``-key=value-`` pairs, ``-`` and ``=`` escaped, numbers ``%n{5}``, booleans ``%b{true}``),
    so ``sort=tags`` orders as VMAPI does and a VMAPI marker's ``tags`` compares."""
    def escape(text: str) -> str:
        return text.replace("-", "%2D").replace("=", "%3D")

    def shown(value: Any) -> str:
        if isinstance(value, bool):
            return "%b{" + str(value).lower() + "}"
        if isinstance(value, int | float):
            return "%n{" + json.dumps(value) + "}"
        return escape(str(value))

    return "".join(f"-{escape(key)}={shown(value)}-" for key, value in tags.items())


def render_vm(vm: Vm) -> dict[str, Any]:
    """The VM object of api.md ("VM object (GetVm)") for the aggregate ``vm``."""
    jobs = vm.active_jobs
    running = [j["uuid"] for j in jobs if j["execution"] == Execution.RUNNING]
    quarantine = None
    if vm.quarantine:
        quarantine = {
            "reason": vm.quarantine["reason"],
            "since": rfc3339(vm.quarantine["since"]),
            "previous_owner_uuid": vm.quarantine["previous_owner_uuid"],
        }
    return {
        "uuid": uuid_text(vm.id),
        "alias": vm.alias,
        "owner_uuid": vm.owner_uuid,
        "server_uuid": vm.shown_server_uuid,
        "brand": vm.brand,
        "image_uuid": vm.image_uuid,
        "ram": vm.ram,
        "cpu_cap": vm.cpu_cap,
        "nics": vm.nic_list,
        "state": str(vm.state),
        "desired_state": str(vm.desired_state),
        "persistence": vm.persistence,
        "customer_metadata": vm.customer_metadata,
        "internal_metadata": vm.internal_metadata,
        "tags": vm.tags,
        "volumes": [
            {"volume_uuid": v["volume_uuid"], "mountpoint": v["mountpoint"], "address": None,
             "stale": False}
            for v in getattr(vm, "volumes", [])
        ],
        "error": vm.error,
        "quarantine": quarantine,
        "active_job_uuid": running[0] if running else None,
        "queued_job_uuids": [j["uuid"] for j in jobs if j["execution"] == Execution.QUEUED],
        "create_timestamp": rfc3339(vm.created_on),
        "last_modified": rfc3339(vm.modified_on),
        "destroyed": rfc3339(vm.destroyed_at),
        "version": vm.version,
    }


class VmView(FoldRows, ReadModel):
    """One row per VM: filter columns, the rendered VM object and the folded state."""

    name = "vm_view"
    blind_writes = True
    tables = ("vm_view", "vm_view_tags", "vm_view_internal_metadata")
    # the fold, the rendering and the snapshot: about as much as the other five together
    # (docs/performance.md, P3)
    rebuild_weight = 5.0

    def __init__(self, transcoder: Transcoder, *, kept_vms: int = KEPT_VMS,
                 refold: Refold | None = None):
        self.transcoder = transcoder
        # How a row's folded state that cannot be used is replaced (``_load``): the VM folded
        # from the log; None (a fold into a scratch database, the audit's) raises instead
        self.refold = refold
        # The VMs the last committed batch folded, kept for the next batch: it needs neither
        # their rows nor the thaw of their snapshots (projections.kept_folds)
        self.kept: KeptFolds = KeptFolds(kept_vms)

    @classmethod
    def fresh(cls, transcoder: Transcoder, refold: Refold | None = None) -> VmView:
        return cls(transcoder, refold=refold)

    def create_statements(self, db: Database) -> list[str]:
        view, tags, index = self.table("vm_view"), self.table("vm_view_tags"), self.index
        metadata = self.table("vm_view_internal_metadata")
        return [
            f"CREATE TABLE IF NOT EXISTS {view} ("
            "uuid TEXT PRIMARY KEY, owner_uuid TEXT NOT NULL, server_uuid TEXT, "
            "brand TEXT NOT NULL, state TEXT NOT NULL, alias TEXT, image_uuid TEXT, "
            "ram INTEGER NOT NULL, create_timestamp TEXT NOT NULL, version INTEGER NOT NULL, "
            "tags_text TEXT NOT NULL, "
            f"body TEXT NOT NULL, snapshot {db.blob_type()} NOT NULL)",
            f"CREATE INDEX IF NOT EXISTS {index('vm_view_owner')} "
            f"ON {view} (owner_uuid, create_timestamp)",
            # per-owner alias uniqueness's look at VMs older than alias holds
            # (VmQueries.with_alias)
            f"CREATE INDEX IF NOT EXISTS {index('vm_view_owner_alias')} "
            f"ON {view} (owner_uuid, alias)",
            f"CREATE INDEX IF NOT EXISTS {index('vm_view_state')} "
            f"ON {view} (state, create_timestamp)",
            f"CREATE INDEX IF NOT EXISTS {index('vm_view_server')} ON {view} (server_uuid)",
            f"CREATE INDEX IF NOT EXISTS {index('vm_view_created')} "
            f"ON {view} (create_timestamp, uuid)",
            # tag.K=V filters; values compared in their JSON text form ("true", "5", "web")
            f"CREATE TABLE IF NOT EXISTS {tags} (vm_uuid TEXT NOT NULL, key TEXT NOT NULL, "
            "value TEXT NOT NULL, PRIMARY KEY (vm_uuid, key))",
            f"CREATE INDEX IF NOT EXISTS {index('vm_view_tags_kv')} ON {tags} (key, value)",
            # internal_metadata.K=V filters (VMAPI ListVms), compared like tags
            f"CREATE TABLE IF NOT EXISTS {metadata} (vm_uuid TEXT NOT NULL, key TEXT NOT NULL, "
            "value TEXT NOT NULL, PRIMARY KEY (vm_uuid, key))",
            f"CREATE INDEX IF NOT EXISTS {index('vm_view_internal_metadata_kv')} "
            f"ON {metadata} (key, value)",
        ]

    def read(self, tx: Tx, events: Sequence[tuple[int, Any]]
             ) -> Callable[[], dict[str, dict[str, Any]]]:
        # A VM created in this batch, or kept from the last one, has no row to read
        created = {e.originator_id for _, e in events if isinstance(e, Vm.Created)}
        return tx.submit_rows_by_key(self.table("vm_view"), "uuid", {
            uuid_text(e.originator_id) for _, e in events
            if isinstance(e, Vm.Event) and e.originator_id not in created
            and self.kept.get(e.originator_id) is None},
            columns="uuid, version, snapshot")

    def write(self, tx: Tx, events: Sequence[tuple[int, Any]],
              stored: dict[str, dict[str, Any]]) -> None:
        folded: dict[UUID, Vm] = {}
        for position, event in events:
            if not isinstance(event, Vm.Event):
                continue
            vm_id = event.originator_id
            vm = (None if isinstance(event, Vm.Created)
                  else folded.get(vm_id) or self.kept.get(vm_id)
                  or self._load(stored, vm_id, event.originator_version))
            if vm is not None and event.originator_version <= vm.version:
                raise TrackingBehindError(self.name, (
                    f"the event of version {event.originator_version} of VM "
                    f"{uuid_text(vm_id)} (log position {position}) comes again, and its row "
                    f"is at version {vm.version}"))
            # a gap (or no row) raises StreamGapError (domain.chain), an event the fold
            # cannot apply UnfoldableEventError naming this read model: both the stream's
            folded[vm_id] = apply_stored(event, vm, self.name.removesuffix(REBUILD_SUFFIX))
        self._store(tx, list(folded.values()))
        self.kept.folded(folded)


    def _store(self, tx: Tx, vms: Sequence[Vm]) -> None:
        """Write the rows of ``vms`` (their tags replaced), a statement per kind of row."""
        updates = ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS[1:])
        tx.executemany(
            f"INSERT INTO {self.table('vm_view')} ({', '.join(_COLUMNS)}) "
            f"VALUES ({', '.join('?' * len(_COLUMNS))}) "
            f"ON CONFLICT (uuid) DO UPDATE SET {updates}",
            [(uuid_text(vm.id), vm.owner_uuid, vm.shown_server_uuid, vm.brand, str(vm.state), vm.alias,
              vm.image_uuid, vm.ram, rfc3339(vm.created_on), vm.version, tag_format(vm.tags),
              json.dumps(render_vm(vm)), self.folded_state(vm))
             for vm in vms],
        )
        for table, pairs_of in (("vm_view_tags", lambda vm: vm.tags),
                                ("vm_view_internal_metadata", lambda vm: vm.internal_metadata)):
            name = self.table(table)
            tx.executemany(f"DELETE FROM {name} WHERE vm_uuid = ?",
                           [(uuid_text(vm.id),) for vm in vms])
            tx.executemany(f"INSERT INTO {name} (vm_uuid, key, value) VALUES (?, ?, ?)",
                           [(uuid_text(vm.id), key, tag_text(value))
                            for vm in vms for key, value in pairs_of(vm).items()])
