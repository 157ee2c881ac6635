"""``volume_mounts``: volumes, and per VM the address each mount had at boot against the
volume's current address (design.md, lesson 6, Triton ZAPI-793).

Two tables, written together at one tracking position:

- ``volume_mounts_volumes``: one row per volume (``GET /volumes``): its networks
  (``{network_uuid: address}`` as JSON, attach order) and ``address``, what a VM mounting it
  is given (``domain.volume.mount_address``).
- ``volume_mounts``: one row per VM mount (``vm_uuid``, ``mountpoint``, ``volume_uuid``), with
  ``address``, the volume's current address, and ``address_at_boot``, the volume's address
  when the VM last booted: set from the current address by ``Provisioned``, ``Started`` and
  ``Rebooted``, and from the recorded addresses by ``VolumeAddressesRefreshed`` (which the
  jobs record after the boot in the same save, so what the job read wins).

A mount is **stale** when its VM runs (the only state in which a mount is live; a VM that is
not running is given the current addresses when it next boots) and ``address_at_boot``
differs from ``address``. The VM object's ``volumes`` entries are filled from here when
GetVm and ListVms read ``vm_view`` (``with_mounts``), so a volume change never rewrites VM
rows; ``GET /vms?stale_mounts=true`` filters with ``STALE_VMS``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from domain.states import VmState
from domain.vm import Vm
from domain.volume import Volume, mount_address
from projections.db import Database, Tx
from projections.formats import rfc3339, uuid_text
from projections.read_model import EventKinds
from projections.runner import ReadModel

_STALE_MOUNT = "COALESCE(address_at_boot, '') <> COALESCE(address, '')"
# A ``vm_view`` condition: the VM runs and one of its mounts is stale (its live table names).
STALE_VMS = (f"state = '{VmState.RUNNING.value}' AND uuid IN "
             f"(SELECT vm_uuid FROM volume_mounts WHERE {_STALE_MOUNT})")


def is_stale(vm_state: str, mount: dict[str, Any]) -> bool:
    """Whether a mount row of a VM in ``vm_state`` is stale (the rule ``STALE_VMS`` applies)."""
    return vm_state == VmState.RUNNING.value and (
        (mount["address_at_boot"] or "") != (mount["address"] or ""))


_BOOTS = Vm.Provisioned | Vm.Started | Vm.Rebooted  # each sets address_at_boot to address
_CREATED = EventKinds(Vm.Created)
_BOOTS_AND_REFRESHES = EventKinds(*_BOOTS.__args__, Vm.VolumeAddressesRefreshed)
# what ``write`` applies: the others change no row of this read model
_MINE = EventKinds(Volume.Event, Vm.Created, *_BOOTS_AND_REFRESHES.kinds)


class VolumeMounts(ReadModel):
    """Volumes, and each VM mount's address at boot and now."""

    name = "volume_mounts"
    tables = ("volume_mounts_volumes", "volume_mounts")
    apply_indexes = ("volume_mounts_volume",)  # a volume's new address, to its mounts

    def create_statements(self, db: Database) -> list[str]:
        volumes, mounts = self.table("volume_mounts_volumes"), self.table("volume_mounts")
        return [
            (f"CREATE TABLE IF NOT EXISTS {volumes} (uuid TEXT PRIMARY KEY, name TEXT NOT NULL, "
             "networks TEXT NOT NULL, address TEXT, create_timestamp TEXT NOT NULL, "
             "last_modified TEXT NOT NULL, version INTEGER NOT NULL)"),
            (f"CREATE TABLE IF NOT EXISTS {mounts} (vm_uuid TEXT NOT NULL, "
             "mountpoint TEXT NOT NULL, volume_uuid TEXT NOT NULL, address_at_boot TEXT, "
             "address TEXT, PRIMARY KEY (vm_uuid, mountpoint))"),
            (f"CREATE INDEX IF NOT EXISTS {self.index('volume_mounts_volume')} "
             f"ON {mounts} (volume_uuid)"),
        ]

    def read(self, tx: Tx, events: Sequence[tuple[int, Any]]) -> Callable[[], set[str]]:
        """The VMs of ``events``' boots and refreshes that have mounts (most VMs mount
        nothing: no statement for them): rows already (one query for the batch), or a
        ``Created`` with volumes in the batch (mount rows are made only there, so a VM created
        in the batch has no rows to read). A volume's and a new mount's own rows are read as
        ``write`` comes to them: a batch's events may have changed them."""
        booted = {uuid_text(e.originator_id) for _, e in _BOOTS_AND_REFRESHES.of(events)}
        created = {uuid_text(e.originator_id): bool(e.volumes) for _, e in _CREATED.of(events)}
        found = tx.submit_rows_by_key(self.table("volume_mounts"), "vm_uuid",
                                      booted - created.keys(), columns="vm_uuid")
        return lambda: set(found()) | {vm for vm in booted if created.get(vm)}

    def write(self, tx: Tx, events: Sequence[tuple[int, Any]], stored: set[str]) -> None:
        mounting, mounts = stored, self.table("volume_mounts")
        for _position, event in _MINE.of(events):
            if isinstance(event, Volume.Event):
                self._volume_changed(tx, event)
            elif isinstance(event, Vm.Created):
                self._mounted(tx, event)
            elif uuid_text(event.originator_id) not in mounting:
                continue
            elif isinstance(event, _BOOTS):
                tx.execute(f"UPDATE {mounts} SET address_at_boot = address WHERE vm_uuid = ?",
                           (uuid_text(event.originator_id),))
            elif isinstance(event, Vm.VolumeAddressesRefreshed):
                for volume_uuid, address in event.addresses.items():
                    tx.execute(f"UPDATE {mounts} SET address_at_boot = ? "
                               "WHERE vm_uuid = ? AND volume_uuid = ?",
                               (address, uuid_text(event.originator_id), volume_uuid))

    def _mounted(self, tx: Tx, event: Vm.Created) -> None:
        for mount in event.volumes:
            tx.execute(f"SELECT address FROM {self.table('volume_mounts_volumes')} "
                       "WHERE uuid = ?", (mount["volume_uuid"],))
            volume = tx.fetchone()
            tx.execute(
                f"INSERT INTO {self.table('volume_mounts')} (vm_uuid, mountpoint, volume_uuid, "
                "address_at_boot, address) VALUES (?, ?, ?, NULL, ?)",
                (uuid_text(event.originator_id), mount["mountpoint"], mount["volume_uuid"],
                 volume["address"] if volume else None),
            )

    def _volume_changed(self, tx: Tx, event: Volume.Event) -> None:
        volumes, volume_uuid = self.table("volume_mounts_volumes"), uuid_text(event.originator_id)
        stamp = rfc3339(event.timestamp)
        if isinstance(event, Volume.Created):
            tx.execute(f"INSERT INTO {volumes} (uuid, name, networks, address, "
                       "create_timestamp, last_modified, version) VALUES (?, ?, ?, NULL, ?, ?, ?)",
                       (volume_uuid, event.name, "{}", stamp, stamp, event.originator_version))
            return
        tx.execute(f"SELECT networks FROM {volumes} WHERE uuid = ?", (volume_uuid,))
        row = tx.fetchone()
        if row is None:
            raise LookupError(f"{self.name} has no volume {volume_uuid}: an event was missed")
        networks: dict[str, str] = json.loads(row["networks"])
        if isinstance(event, Volume.NetworkAttached):
            networks[event.network_uuid] = event.address
        elif isinstance(event, Volume.NetworkDetached):
            networks.pop(event.network_uuid, None)
        address = mount_address(networks)
        tx.execute(f"UPDATE {volumes} SET networks = ?, address = ?, last_modified = ?, "
                   "version = ? WHERE uuid = ?",
                   (json.dumps(networks), address, stamp, event.originator_version, volume_uuid))
        tx.execute(f"UPDATE {self.table('volume_mounts')} SET address = ? WHERE volume_uuid = ?",
                   (address, volume_uuid))


def render_volume(row: dict[str, Any]) -> dict[str, Any]:
    """The volume object: ``uuid, name, networks ({network_uuid: address}), address,
    create_timestamp, last_modified, version``."""
    return {
        "uuid": row["uuid"],
        "name": row["name"],
        "networks": json.loads(row["networks"]),
        "address": row["address"],
        "create_timestamp": row["create_timestamp"],
        "last_modified": row["last_modified"],
        "version": row["version"],
    }


def volume_object(volume: Volume) -> dict[str, Any]:
    """The volume object of the aggregate ``volume``: what ``VolumeQueries.get`` gives once
    ``volume_mounts`` reflects the aggregate's version (``render_volume`` of the row it would
    hold). A volume command answers with it, so its answer never waits for the projector
    (api.md, "Commands and the projector")."""
    return render_volume({
        "uuid": uuid_text(volume.id), "name": volume.name,
        "networks": json.dumps(volume.networks), "address": volume.address,
        "create_timestamp": rfc3339(volume.created_on),
        "last_modified": rfc3339(volume.modified_on), "version": volume.version,
    })


def with_mounts(tx: Tx, vms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fill in the ``address`` (the volume's current one) and ``stale`` of every ``volumes``
    entry of the VM objects ``vms`` (read inside ``tx``, with ``vm_view``); returns ``vms``."""
    uuids = [vm["uuid"] for vm in vms if vm.get("volumes")]
    if not uuids:
        return vms
    tx.execute("SELECT vm_uuid, mountpoint, address_at_boot, address FROM volume_mounts "
               f"WHERE vm_uuid IN ({', '.join('?' * len(uuids))})", uuids)
    found = {(row["vm_uuid"], row["mountpoint"]): row for row in tx.fetchall()}
    for vm in vms:
        for entry in vm.get("volumes", []):
            mount = found.get((vm["uuid"], entry["mountpoint"]))
            if mount is not None:
                entry["address"] = mount["address"]
                entry["stale"] = is_stale(vm["state"], mount)
    return vms


class VolumeQueries:
    """Read-only queries of the volumes (``GET /volumes``)."""

    def __init__(self, db: Database):
        self.db = db

    def get(self, volume_uuid: str) -> dict[str, Any] | None:
        """The volume object, or None."""
        row = self.db.one("SELECT * FROM volume_mounts_volumes WHERE uuid = ?", (volume_uuid,))
        return None if row is None else render_volume(row)

    def list(self, *, limit: int = 1000, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """A page of volume objects, oldest first (then by uuid), and the total count."""
        with self.db.transaction(commit=False) as tx:
            tx.execute("SELECT COUNT(*) AS n FROM volume_mounts_volumes")
            count = tx.fetchone()
            tx.execute("SELECT * FROM volume_mounts_volumes ORDER BY create_timestamp, uuid "
                       "LIMIT ? OFFSET ?", (limit, offset))
            rows = tx.fetchall()
        return [render_volume(row) for row in rows], int(count["n"]) if count else 0
