"""P1's ceiling under FastAPI: the same 16-client lifecycle load as ``bench/p1_commands.py``
against a FastAPI app that appends nothing, divided by the same reference measured in the same
run (pgbench of the event store's append transaction, 16 clients).

The app answers every command of the load as vmledger does (202, a small JSON body with the
VM's and job's uuids, ``etag`` and ``x-log-position`` headers; ``POST /vms`` validates a
pydantic body) and does nothing else: no event store, no log lines, no middleware. It runs as
``serve --workers 2`` runs vmledger: two uvicorn processes on ``SO_REUSEPORT`` sockets, uvloop,
httptools with the protocol ``serve`` uses. So its rate is what any FastAPI service can reach
on this machine under this load generator, and its ratio the highest P1 a FastAPI edge leaves;
the API CPU a request is the part of P1's CPU no route code can remove.

    python bench/p1_edge_ceiling.py [--quick] [--seconds 20] [--pgbench-seconds 3]
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
import uuid
from typing import Annotated

import orjson
from fastapi import Body, FastAPI, Query, Response
from pydantic import BaseModel

from _common import (
    CpuMeter, answers_ping, emit, free_port, parser, percentile, say, scratch_postgres,
    size_defaults,
)
from _load import run_load
from _signals import stop_process
from p1_commands import GOAL, locked_insert_tps


class CreateVm(BaseModel):
    """The body the load sends to ``POST /vms``."""

    owner_uuid: uuid.UUID
    brand: str
    ram: int
    alias: str | None = None


def bare_app() -> FastAPI:
    """A FastAPI app with the load's three routes, answered 202 at once."""
    app = FastAPI()
    positions = itertools.count(1)

    def accepted(vm: uuid.UUID) -> Response:
        position = next(positions)
        return Response(orjson.dumps({"vm_uuid": str(vm), "job_uuid": str(uuid.uuid4())}),
                        status_code=202, media_type="application/json",
                        headers={"etag": f'"{position}"', "x-log-position": str(position)})

    @app.post("/vms", status_code=202)
    async def create_vm(body: Annotated[CreateVm, Body()]) -> Response:
        return accepted(uuid.uuid4())

    @app.post("/vms/{vm_uuid}", status_code=202)
    async def act(vm_uuid: uuid.UUID, action: Annotated[str, Query()]) -> Response:
        return accepted(vm_uuid)

    @app.delete("/vms/{vm_uuid}", status_code=202)
    async def delete_vm(vm_uuid: uuid.UUID) -> Response:
        return accepted(vm_uuid)

    @app.get("/ping")
    async def ping() -> dict[str, bool]:
        return {"ok": True}

    return app


def serve_one(port: int) -> None:
    """One uvicorn process on its own ``SO_REUSEPORT`` socket, as ``serve --workers`` runs."""
    import uvicorn

    from service.api.http_protocol import NoDelayHttpToolsProtocol
    from service.api.processes import reuse_port_socket

    config = uvicorn.Config(bare_app(), access_log=False, log_level="warning",
                            http=NoDelayHttpToolsProtocol, loop="uvloop")
    uvicorn.Server(config).run(sockets=[reuse_port_socket("127.0.0.1", port)])


def _wait_for(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not answers_ping(port):
        if time.monotonic() > deadline:
            raise RuntimeError("the bare app did not come up")
        time.sleep(0.1)  # polling a server's start, no race hidden


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve_one(int(sys.argv[2]))
        return
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seconds", type=float, help="measured window (default 20; --quick: 3)")
    p.add_argument("--pgbench-seconds", type=float,
                   help="the pgbench reference's run (default 3; --quick: 1)")
    args = p.parse_args()
    size_defaults(args, {"seconds": 20.0, "pgbench_seconds": 3.0},
                  {"seconds": 3.0, "pgbench_seconds": 1.0})
    warmup = 1.0 if args.quick else 4.0

    with scratch_postgres("p1edge") as url:
        reference = locked_insert_tps(url, notify=True, clients=args.clients,
                                      seconds=args.pgbench_seconds)
    say(f"pgbench, the event store's locked insert (with notify): {reference:,.0f} tps")

    port = free_port()
    servers: list[subprocess.Popen[bytes]] = []
    try:  # interrupted while they start, those started are stopped too
        for _ in range(args.workers):
            servers.append(subprocess.Popen([sys.executable, __file__, "--serve", str(port)]))
        _wait_for(port)
        time.sleep(1.0)  # every process accepting
        meter = CpuMeter({"api": [s.pid for s in servers], "load_generator": [os.getpid()]})
        outcome = run_load(f"http://127.0.0.1:{port}", clients=args.clients, warmup_s=warmup,
                           seconds=args.seconds, on_window_start=meter.start,
                           on_window_end=meter.stop)
    finally:
        for server in servers:
            stop_process(server)

    commands = len(outcome.acks)
    rate = commands / outcome.seconds
    used = meter.used
    per_request_ms = {k: round(used[k] * 1000 / commands, 3)
                      for k in ("api", "load_generator") if commands}
    busy = used["machine_busy"] / max(used["machine_total"], 1e-9)
    latencies = [a[2] * 1000 for a in outcome.acks]
    ratio = rate / reference
    say(f"bare FastAPI, {args.workers} processes: {commands:,} commands in "
        f"{outcome.seconds:.1f} s = {rate:,.1f} /s; latency p50 "
        f"{percentile(latencies, 50):.1f} ms, p99 {percentile(latencies, 99):.1f} ms")
    say(f"CPU ms per command: {per_request_ms}; machine busy {busy:.0%}")
    say(f"P1 ceiling under FastAPI = {rate:,.1f} / {reference:,.0f} = {ratio:.3f} "
        f"(P1's goal >= {GOAL})")
    emit("P1-edge-ceiling", "commands/s of a FastAPI app that appends nothing (16 clients) / "
         "pgbench of the event store's append transaction, 16 clients",
         raw={"commands_per_s": round(rate, 1), "commands": commands,
              "window_s": round(outcome.seconds, 1), "pgbench_locked_insert_tps": reference,
              "cpu_ms_per_command": per_request_ms, "machine_busy": round(busy, 3),
              "latency_ms_p50": round(percentile(latencies, 50), 2),
              "latency_ms_p99": round(percentile(latencies, 99), 2),
              "statuses": dict(outcome.statuses)},
         # not a goal of its own: the most P1 could reach with this edge on this machine
         ratio=ratio, goal=f"none (P1's is >= {GOAL})", met=None,
         setup={"clients": args.clients, "workers": args.workers})


if __name__ == "__main__":
    main()
