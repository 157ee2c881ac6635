"""The console's pages on a fleet the size of the whole trace shard: the median time of each
fleet-wide fragment (the HTML the page's script fetches) over a synthetic read model of
196,585 VMs, against ``GET /stats/states`` on the same database as the reference. Goal: every
fragment well under a second (docs/console.md, "How fast").

The read models are written directly (rows shaped as the projections write them: 196,585
``vm_view`` and ``vm_current`` rows, about 250,000 ``vm_transitions`` and as many jobs, 12,492
servers with the running VMs' claims), with every tracking position at the empty log's head,
so read-your-writes waits for nothing. Requests go through the app in-process (no socket), so
the figures are the service's own time; the CPU time of this process (the app's thread and
the test client's) is printed beside the wall time, because on a shared machine the wall time
mostly measures the wait for a core. SQLite only: the embedded default.

    python bench/console_pages.py [--quick] [--vms N] [--repeat 7]
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _common import emit, parser, say, size_defaults

STATES = ("running",) * 67 + ("destroyed",) * 27 + ("provisioning",) * 5 + ("failed",) \
    + ("quarantined",)
OWNERS, SERVERS = 519, 12_492
GOAL_S = 1.0


def _vm_body(vm_uuid: str, owner: str, server: str | None, state: str, created: str) -> str:
    return json.dumps({
        "uuid": vm_uuid, "alias": f"task-{vm_uuid[:8]}", "owner_uuid": owner,
        "server_uuid": server, "brand": "joyent", "image_uuid": None, "ram": 1024,
        "cpu_cap": 100, "state": state, "desired_state": "running", "persistence": "persistent",
        "customer_metadata": {}, "internal_metadata": {}, "tags": {"job_id": "1"},
        "volumes": [], "error": None, "quarantine": None, "active_job_uuid": None,
        "queued_job_uuids": [], "create_timestamp": created, "last_modified": created,
        "destroyed": None, "version": 9})


def insert_rows(tx, table: str, rows: list[dict[str, Any]]) -> None:
    """Insert ``rows`` (column name -> value, the same names in every row) into ``table``,
    naming the columns: a column the read model adds later with a default, or one that may
    be null, needs no change here, and one that may not names itself in the error."""
    if not rows:
        return
    columns = list(rows[0])
    tx.executemany(f"INSERT INTO {table} ({', '.join(columns)}) "
                   f"VALUES ({', '.join('?' * len(columns))})",
                   [tuple(row[c] for c in columns) for row in rows])


def populate(services, vms: int) -> str:
    """Write ``vms`` synthetic VMs (and their jobs, transitions and servers); returns one
    owner's uuid."""
    from projections.vm_view import tag_format

    db = services.db
    owners = [str(uuid.uuid5(uuid.NAMESPACE_OID, f"owner{i}")) for i in range(OWNERS)]
    servers = [str(uuid.uuid5(uuid.NAMESPACE_OID, f"server{i}")) for i in range(SERVERS)]
    base_ms = 1_796_000_000_000
    tags = {"job_id": "1"}
    view, current, moves, jobs, claims = [], [], [], [], []
    for i in range(vms):
        vm_uuid = str(uuid.uuid5(uuid.NAMESPACE_OID, f"vm{i}"))
        state, owner = STATES[i % len(STATES)], owners[i % OWNERS]
        server = None if state == "provisioning" else servers[i % SERVERS]
        created_ms = base_ms + i * 28  # ~93 minutes in all, as the shard
        created = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created_ms / 1000)) + \
            f".{created_ms % 1000:03d}Z"
        view.append({"uuid": vm_uuid, "owner_uuid": owner, "server_uuid": server,
                     "brand": "joyent", "state": state, "alias": None, "image_uuid": None,
                     "ram": 1024, "create_timestamp": created, "version": 9,
                     "tags_text": tag_format(tags),
                     "body": _vm_body(vm_uuid, owner, server, state, created),
                     "snapshot": b"x"})
        current.append({"vm_uuid": vm_uuid, "state": state, "since": created,
                        "since_ms": created_ms, "owner_uuid": owner, "server_uuid": server,
                        "quarantined_from": None, "version": 9, "position": i,
                        "created": created, "created_state": "provisioning"})
        common = {"vm_uuid": vm_uuid, "position": i, "at": created, "at_ms": created_ms,
                  "server_uuid": server, "owner_uuid": owner, "reason": None, "message": None,
                  "actor": "trace", "job_uuid": None}
        if state != "provisioning":
            moves.append({**common, "version": 5, "event_type": "Provisioned",
                          "from_state": "provisioning", "to_state": "running",
                          "ms_in_from": 1000})
        if state in ("destroyed", "failed"):
            moves.append({**common, "version": 9, "event_type": "Destroyed",
                          "from_state": "running", "to_state": state, "ms_in_from": 5000})
        for n, name in enumerate(("provision", "destroy")[: 2 if state == "destroyed" else 1]):
            jobs.append({"uuid": str(uuid.uuid5(uuid.NAMESPACE_OID, f"job{i}.{n}")),
                         "vm_uuid": vm_uuid, "name": name,
                         "execution": "queued" if state == "provisioning" else "succeeded",
                         "params": "{}", "created_at": created, "started_at": None,
                         "finished_at": None, "attempt": 1, "error": None,
                         "chain_results": "[]", "worker": None, "lease_expires_at": None,
                         "position": 2 * i + n})
        if state == "running":
            claims.append({"server_uuid": server, "vm_uuid": vm_uuid, "ram_mib": 1024,
                           "cpus": 1})
    with db.transaction() as tx:
        insert_rows(tx, "vm_view", view)
        insert_rows(tx, "vm_current", current)
        insert_rows(tx, "vm_transitions", moves)
        insert_rows(tx, "job_view", jobs)
        insert_rows(tx, "server_view", [
            {"uuid": s, "hostname": f"host{i:05d}", "boot_id": "boot", "status": "running",
             "ram_mib": 262_144, "cpus": 64, "generation": 0, "version": 1}
            for i, s in enumerate(servers)])
        insert_rows(tx, "server_view_claims", claims)
        tx.execute("ANALYZE")
    return owners[0]


def main() -> None:
    args_parser = parser(__doc__.splitlines()[0])
    args_parser.add_argument("--vms", type=int, help="VMs written (default 196,585; --quick: 5,000)")
    args_parser.add_argument("--repeat", type=int,
                             help="requests of each page (default 7; --quick: 3)")
    args = args_parser.parse_args()
    size_defaults(args, {"vms": 196_585, "repeat": 7}, {"vms": 5_000, "repeat": 3})
    vms, repeat = args.vms, args.repeat

    from fastapi.testclient import TestClient

    from service.api.app import create_app
    from service.container import Services
    from service.settings import Settings

    medians: dict[str, float] = {}
    cpu: dict[str, float] = {}
    # interrupted or not: the services closed, the SQLite files removed
    with tempfile.TemporaryDirectory(prefix="vmledger-console-bench-") as tmp:
        services = Services.build(Settings(database_url=f"sqlite:///{Path(tmp) / 'bench.db'}",
                                           sim_servers=1))
        try:
            services.projections.catch_up()  # past the simulated server's registration
            started = time.perf_counter()
            owner = populate(services, vms)
            say(f"wrote {vms:,} synthetic VMs in {time.perf_counter() - started:.1f} s")
            pages = {
                "reference GET /stats/states": "/stats/states",
                "fleet": "/console/fragments/fleet",
                "fleet, state=running": "/console/fragments/fleet?state=running",
                "fleet, one owner": f"/console/fragments/fleet?owner_uuid={owner}",
                "fleet's chart (its own fragment)": "/console/fragments/fleet/chart",
                "fleet's chart, one owner": f"/console/fragments/fleet/chart?owner_uuid={owner}",
                "fleet, page 3,000 (offset 149,950)": "/console/fragments/fleet?offset=149950",
                "servers": "/console/fragments/servers",
                "servers, last page": "/console/fragments/servers?offset=12450",
            }
            with TestClient(create_app(services=services, background=False)) as http:
                for name, path in pages.items():
                    assert http.get(path).status_code == 200, path  # warm: templates, caches
                    times, cpu_times = [], []
                    for _ in range(repeat):
                        t, c = time.perf_counter(), time.process_time()
                        response = http.get(path)
                        times.append(time.perf_counter() - t)
                        cpu_times.append(time.process_time() - c)
                        assert response.status_code == 200, (path, response.text[:300])
                    medians[name] = statistics.median(times)
                    cpu[name] = statistics.median(cpu_times)
                    say(f"{name:40} median {medians[name] * 1000:8.1f} ms wall "
                        f"(min {min(times) * 1000:.1f}, max {max(times) * 1000:.1f}), "
                        f"{cpu[name] * 1000:8.1f} ms CPU")
        finally:
            services.close()
    reference = medians.pop("reference GET /stats/states")
    cpu.pop("reference GET /stats/states")
    slowest = max(medians, key=medians.get)
    emit("console", "console fragments on a fleet of the whole shard",
         raw={"vms": vms, "reference_s": round(reference, 4),
              "wall_s": {k: round(v, 4) for k, v in medians.items()},
              "cpu_s": {k: round(v, 4) for k, v in cpu.items()}},
         ratio=medians[slowest] / reference,
         goal=f"every fragment under {GOAL_S} s (slowest: {slowest})",
         met=medians[slowest] < GOAL_S)


if __name__ == "__main__":
    main()
