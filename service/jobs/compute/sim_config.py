"""The configuration of a simulated VM copy (``sim_vms.config``): what ``reconfigure`` left
there (JSON: the whole values an update set, and ``nics``, keyed by MAC), so a test can see
that a repeated change changed nothing more (service/jobs/compute/simulated.py).
"""

from __future__ import annotations

import json
from typing import Any

from projections.db import Tx


def copy_config(tx: Tx, server_uuid: str, vm_uuid: str) -> dict[str, Any] | None:
    """The configuration of the VM's copy on the server (``{}`` before any change), or None
    when it has no copy there."""
    tx.execute("SELECT config FROM sim_vms WHERE vm_uuid = ? AND server_uuid = ?",
               (vm_uuid, server_uuid))
    row = tx.fetchone()
    return None if row is None else json.loads(row["config"] or "{}")


def reconfigure_copy(tx: Tx, server_uuid: str, vm_uuid: str, changes: dict[str, Any]) -> None:
    """Apply ``changes`` (``reconfigured``) to the configuration of the VM's copy on the
    server. A copy the server does not have (its host rebooted, its agent forgot it) has no
    configuration to change: the log holds the change, a later create takes it."""
    tx.execute("SELECT config FROM sim_vms WHERE vm_uuid = ? AND server_uuid = ? AND known = 1",
               (vm_uuid, server_uuid))
    row = tx.fetchone()
    if row is None:
        return
    config = reconfigured(json.loads(row["config"] or "{}"), changes)
    tx.execute("UPDATE sim_vms SET config = ? WHERE vm_uuid = ? AND server_uuid = ?",
               (json.dumps(config, sort_keys=True), vm_uuid, server_uuid))


def reconfigured(config: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``config`` with ``changes`` applied (``ComputeDriver.reconfigure``): ``add_nics``
    (``{"nics": [...]}``) adds the NICs whose MAC the copy has not, ``remove_nics``
    (``{"macs": [...]}``) removes those it has, and any other key is a whole new value. So
    applying the same changes again gives the same configuration: a replayed step (a lost
    response, a takeover) changes nothing more."""
    config = dict(config)
    nics = {nic["mac"]: nic for nic in config.get("nics", [])}
    for key, value in changes.items():
        if key == "add_nics":
            for nic in value.get("nics", []):
                nics.setdefault(nic["mac"], nic)
        elif key == "remove_nics":
            for mac in value.get("macs", []):
                nics.pop(mac, None)
        else:
            config[key] = value
    if nics or "nics" in config:
        config["nics"] = list(nics.values())
    return config
