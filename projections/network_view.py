"""``network_view``: the networks vmledger hands NIC addresses out of (``GET /networks``), with
the analytics of each: how many addresses are in use and free.

Each row keeps the network's claims (``{ip: vm_uuid}``, or a volume's uuid for a volume's
address), so the counts are folded from the
same events as the aggregate's (``domain/network.py``) and a fresh fold can be compared.
``used`` counts the claims inside the provisioning range and the body's
``addresses_outside_range`` those outside it, by the aggregate's own rule
(``in_provisioning_range``, ``range_counts``): ``addresses_total`` counts the range only, so a
claim outside it counted in use made ``addresses_free`` negative. A batch decodes each
network's row once, applies its events, and encodes it once.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from domain.network import Network, in_provisioning_range, range_counts
from projections.db import Database, Tx
from projections.formats import rfc3339, uuid_text
from projections.runner import ReadModel

_COLUMNS = ("uuid", "name", "create_timestamp", "version", "used", "body", "claims")
_OUTSIDE = "addresses_outside_range"


def render_network(row: dict[str, Any]) -> dict[str, Any]:
    """The network object: ``uuid, name, subnet, netmask, gateway, provision_start_ip,
    provision_end_ip, addresses_total, addresses_in_use, addresses_free, create_timestamp,
    version``."""
    body = json.loads(row["body"])
    used, outside = _range_counts(row, body)
    body.pop(_OUTSIDE, None)
    return {**body, "addresses_in_use": used, "addresses_free": body["addresses_total"] - used,
            _OUTSIDE: outside, "version": int(row["version"])}


def _range_counts(row: dict[str, Any], body: dict[str, Any]) -> tuple[int, int]:
    """``(claims inside the range, claims outside it)`` of a row. A row written before the
    body had ``addresses_outside_range`` counted every claim in ``used``: its counts are folded
    from its claims instead, so it reads right before ``vmledger rebuild network_view``."""
    if _OUTSIDE in body:
        return int(row["used"]), int(body[_OUTSIDE])
    return range_counts(body["provision_start_ip"], body["provision_end_ip"],
                        json.loads(row["claims"]))


@dataclass
class _NetworkRow:
    """One network's row while a batch applies its events: decoded once, encoded once."""

    row: dict[str, Any]
    body: dict[str, Any]
    claims: dict[str, str]
    used: int
    outside: int

    @classmethod
    def decoded(cls, row: dict[str, Any]) -> _NetworkRow:
        body = json.loads(row["body"])
        used, outside = _range_counts(row, body)
        return cls(dict(row), body, json.loads(row["claims"]), used, outside)

    def apply(self, event: Any) -> None:
        """Move the claims, and the counts by the one address (a recount of every claim on
        each event would make a big network's rebuild quadratic)."""
        step = 0
        if isinstance(event, Network.AddressClaimed | Network.VolumeAddressClaimed):
            step = 0 if event.ip in self.claims else 1
            self.claims[event.ip] = (event.vm_uuid if isinstance(event, Network.AddressClaimed)
                                     else event.volume_uuid)
        elif isinstance(event, Network.AddressReleased | Network.VolumeAddressReleased):
            step = -1 if self.claims.pop(event.ip, None) is not None else 0
        if in_provisioning_range(self.body["provision_start_ip"],
                                 self.body["provision_end_ip"], event.ip):
            self.used += step
        else:
            self.outside += step
        self.row["version"] = event.originator_version

    def encoded(self) -> dict[str, Any]:
        return {**self.row, "claims": json.dumps(self.claims), "used": self.used,
                "body": json.dumps({**self.body, _OUTSIDE: self.outside})}


class NetworkView(ReadModel):
    """One row per network."""

    name = "network_view"
    blind_writes = True
    tables = ("network_view",)

    def create_statements(self, db: Database) -> list[str]:
        view = self.table("network_view")
        return [
            (f"CREATE TABLE IF NOT EXISTS {view} (uuid TEXT PRIMARY KEY, name TEXT NOT NULL, "
            "create_timestamp TEXT NOT NULL, version INTEGER NOT NULL, used INTEGER NOT NULL, "
            "body TEXT NOT NULL, claims TEXT NOT NULL)"),
            f"CREATE INDEX IF NOT EXISTS {self.index('network_view_name')} ON {view} (name)",
        ]

    def read(self, tx: Tx, events: Sequence[tuple[int, Any]]
             ) -> Callable[[], dict[str, dict[str, Any]]]:
        return tx.submit_rows_by_key(self.table("network_view"), "uuid", {
            uuid_text(e.originator_id) for _, e in events
            if isinstance(e, Network.Event) and not isinstance(e, Network.Created)})

    def write(self, tx: Tx, events: Sequence[tuple[int, Any]],
              stored: dict[str, dict[str, Any]]) -> None:
        changed: dict[str, _NetworkRow] = {}
        for _position, event in events:
            if not isinstance(event, Network.Event):
                continue
            key = uuid_text(event.originator_id)
            if isinstance(event, Network.Created):
                changed[key] = self._created(event)
                continue
            if key not in changed:
                changed[key] = _NetworkRow.decoded(stored[key])
            changed[key].apply(event)
        updates = ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS[1:])
        tx.executemany(
            f"INSERT INTO {self.table('network_view')} ({', '.join(_COLUMNS)}) "
            f"VALUES ({', '.join('?' * len(_COLUMNS))}) ON CONFLICT (uuid) DO UPDATE SET {updates}",
            [[row[c] for c in _COLUMNS] for row in (n.encoded() for n in changed.values())])

    @staticmethod
    def _created(event: Any) -> _NetworkRow:
        stamp = rfc3339(event.timestamp)
        body = _body(uuid_text(event.originator_id), event.name, event.subnet,
                     event.provision_start_ip, event.provision_end_ip, event.gateway, stamp)
        row = {"uuid": uuid_text(event.originator_id), "name": event.name,
               "create_timestamp": stamp, "version": event.originator_version}
        return _NetworkRow(row, body, claims={}, used=0, outside=0)


def _body(network_uuid: str, name: str, subnet: str, start_ip: str, end_ip: str,
          gateway: str | None, stamp: str) -> dict[str, Any]:
    """A row's body as ``Created`` leaves it (no claims yet)."""
    start = int(ipaddress.IPv4Address(start_ip))
    total = int(ipaddress.IPv4Address(end_ip)) - start + 1
    return {"uuid": network_uuid, "name": name, "subnet": subnet,
            "netmask": str(ipaddress.IPv4Network(subnet).netmask), "gateway": gateway,
            "provision_start_ip": start_ip, "provision_end_ip": end_ip,
            "addresses_total": total, "create_timestamp": stamp}


def network_object(network: Network) -> dict[str, Any]:
    """The network object of the aggregate ``network``: what ``NetworkQueries.get`` gives
    once ``network_view`` reflects the aggregate's version (``render_network`` of the row it
    would hold, counted by the same ``range_counts``). ``POST /networks`` answers with it, so
    its answer never waits for the projector (api.md, "Commands and the projector")."""
    used, outside = range_counts(network.provision_start_ip, network.provision_end_ip,
                                 network.claims)
    body = _body(uuid_text(network.id), network.name, network.subnet,
                 network.provision_start_ip, network.provision_end_ip, network.gateway,
                 rfc3339(network.created_on))
    return render_network({"body": json.dumps({**body, _OUTSIDE: outside}), "used": used,
                           "version": network.version})


class NetworkQueries:
    """Read-only queries of ``network_view``."""

    def __init__(self, db: Database):
        self.db = db

    def get(self, network_uuid: str) -> dict[str, Any] | None:
        """The network object, or None."""
        row = self.db.one("SELECT * FROM network_view WHERE uuid = ?", (network_uuid,))
        return None if row is None else render_network(row)

    def by_name(self, name: str) -> list[dict[str, Any]]:
        """The networks called ``name`` (names are not unique), oldest first."""
        with self.db.transaction(commit=False) as tx:
            tx.execute("SELECT * FROM network_view WHERE name = ? ORDER BY create_timestamp, "
                       "uuid", (name,))
            return [render_network(row) for row in tx.fetchall()]

    def list(self) -> list[dict[str, Any]]:
        """Every network, oldest first."""
        with self.db.transaction(commit=False) as tx:
            tx.execute("SELECT * FROM network_view ORDER BY create_timestamp, uuid")
            return [render_network(row) for row in tx.fetchall()]
