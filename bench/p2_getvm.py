"""P2: GetVm median latency for a VM with 10,000 events divided by that for a VM with 10
events. Goal: <= 1.2.

Both VMs are created through the command handlers, provisioned by the real job worker, then
given ``update_metadata`` events (alias changes) in batches of 1,000 per save until they have
exactly 10 and 10,000 events. GetVm is then measured as a user sees it: HTTP GETs to a real
``vmledger serve`` process (uvicorn, one keep-alive connection, read-your-writes on, so each
GET also waits for the read models to reach the log's head), the two VMs alternating.

On PostgreSQL the deployment is production mode (``serve --workers 1`` and ``project``); on
SQLite it is embedded mode (``serve`` with the runners in its process). Extras: the latency of a
command on each VM (which loads it from the log), and the time to fold each VM from its stream
with the aggregate cache off (what a cold process pays on its first command).

    python bench/p2_getvm.py [--quick] [--backend postgres|sqlite|both] [--gets 400]
"""

from __future__ import annotations

import http.client
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    REPO, Deployment, emit, free_port, parser, percentile, say, scratch_postgres,
    size_defaults,
)
from _signals import stop_process

GOAL = 1.2
BATCH = 1_000


def build_vms(database_url: str, lengths: dict[str, int]) -> dict[str, str]:
    """Create one VM per entry of ``lengths`` with exactly that many events; their uuids."""
    from domain.vm import Vm, make_cause
    from service.commands.application import VmSpec
    from service.container import Services
    from service.settings import Settings

    services = Services.build(Settings(database_url=database_url))
    cause = make_cause("bench")
    made = {}
    try:
        for label, length in lengths.items():
            accepted = services.commands.create_vm(
                VmSpec(owner_uuid="930896af-bf8c-48d4-885c-6573a94b1853", brand="bhyve",
                       ram=1024, alias=f"p2-{label}"), cause=cause)
            vm_uuid = accepted.vm_uuid
            services.worker.run_vm(vm_uuid)  # the provision: the VM is running, no job left
            counter = [0]

            def pad(vm, remaining: int) -> None:
                for _ in range(remaining):
                    counter[0] += 1
                    vm.update_metadata({"alias": f"p2-{label}-{counter[0]}"}, cause=cause)

            while (version := services.commands.load(vm_uuid).version) < length:
                services.commands.change(Vm, vm_uuid, lambda vm: pad(vm, min(BATCH, length - version)))
            made[label] = (vm_uuid, services.commands.load(vm_uuid).version)
        services.projections.catch_up()
    finally:
        services.close()
    return made


def fold_ms(database_url: str, vm_uuid: str, repeat: int) -> float:
    """Median time (ms) to fold the VM from its stream with the aggregate cache off."""
    from service.container import Services
    from service.settings import Settings

    services = Services.build(Settings(database_url=database_url, aggregate_cache_size=0))
    try:
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            services.commands.load(vm_uuid)
            times.append((time.perf_counter() - started) * 1000)
        return statistics.median(times)
    finally:
        services.close()


def get_latencies(base_url: str, vms: dict[str, str], gets: int) -> dict[str, list[float]]:
    """Alternate GET /vms/{uuid} on each VM; latencies (ms) per label, after a warm-up."""
    host, port = base_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    found: dict[str, list[float]] = {label: [] for label in vms}
    for round_ in range(gets + 20):
        for label, vm_uuid in vms.items():
            started = time.perf_counter()
            conn.request("GET", f"/vms/{vm_uuid}")
            response = conn.getresponse()
            response.read()
            elapsed = (time.perf_counter() - started) * 1000
            if response.status != 200:
                raise RuntimeError(f"GET {vm_uuid}: {response.status}")
            if round_ >= 20:  # the first rounds warm caches and connections up
                found[label].append(elapsed)
    conn.close()
    return found


def action_latency(base_url: str, vm_uuid: str) -> float:
    """Latency (ms) of one command on the VM over HTTP (an update: one event appended)."""
    host, port = base_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    started = time.perf_counter()
    conn.request("POST", f"/vms/{vm_uuid}?action=update",
                 body=f'{{"alias": "p2-{time.time_ns()}"}}',
                 headers={"content-type": "application/json"})
    response = conn.getresponse()
    response.read()
    conn.close()
    return (time.perf_counter() - started) * 1000


class EmbeddedServer:
    """``vmledger serve`` on SQLite (embedded mode: runners in the same process)."""

    def __init__(self, database_url: str, log_dir: str):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "VMLEDGER_DATABASE_URL": database_url}
        self.log_path = os.path.join(log_dir, "serve.log")

    def __enter__(self) -> EmbeddedServer:
        log = open(self.log_path, "ab")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-m", "service", "serve", "--port", str(self.port)], env=self.env,
            stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                    conn.request("GET", "/ping")
                    if conn.getresponse().status == 200:
                        return self
                except OSError:
                    time.sleep(0.1)
            raise RuntimeError(Path(self.log_path).read_text()[-3000:])
        except BaseException:  # interrupted or not up: the server does not outlive the run
            self.__exit__()
            raise

    def __exit__(self, *_exc: object) -> None:
        stop_process(self.process, group=True)


def measure(backend: str, url: str, tmp: str, args) -> dict:
    lengths = {"short": 10, "long": args.events}
    started = time.perf_counter()
    made = build_vms(url, lengths)
    say(f"[{backend}] built VMs {', '.join(f'{k}: {v[1]:,} events' for k, v in made.items())} "
        f"in {time.perf_counter() - started:.1f} s")
    vms = {label: made[label][0] for label in lengths}
    folds = {label: fold_ms(url, vm_uuid, 3) for label, vm_uuid in vms.items()}
    server = (Deployment(url, tmp, api_workers=1) if backend == "postgres"
              else EmbeddedServer(url, tmp))
    with server as running:
        profiler = None
        if args.profile:
            from _profile import Profiler

            pids = running.pids("serve") if backend == "postgres" else [running.process.pid]
            profiler = Profiler(args.profile, f"p2-{backend}", pids, seconds=8)
        latencies = get_latencies(running.base_url, vms, args.gets)
        if profiler is not None:
            from _profile import summarize

            say(summarize(profiler.wait(), f"[{backend}] profile of the API process"))
        commands = {label: action_latency(running.base_url, vm_uuid)
                    for label, vm_uuid in vms.items()}
    medians = {label: statistics.median(v) for label, v in latencies.items()}
    ratio = medians["long"] / medians["short"]
    for label in lengths:
        values = latencies[label]
        say(f"[{backend}] GetVm {label} ({made[label][1]:,} events): median "
            f"{medians[label]:.2f} ms, p90 {percentile(values, 90):.2f} ms over {len(values)}; "
            f"first command {commands[label]:.0f} ms; cold fold {folds[label]:.1f} ms")
    say(f"[{backend}] P2 = {medians['long']:.2f} / {medians['short']:.2f} = {ratio:.3f} "
        f"(goal <= {GOAL})")
    return {
        "events": {k: v[1] for k, v in made.items()},
        "getvm_median_ms": {k: round(v, 3) for k, v in medians.items()},
        "getvm_p90_ms": {k: round(percentile(v, 90), 3) for k, v in latencies.items()},
        "gets_each": args.gets,
        "first_command_ms": {k: round(v, 1) for k, v in commands.items()},
        "cold_fold_ms": {k: round(v, 1) for k, v in folds.items()},
        "ratio": round(ratio, 4),
    }


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("postgres", "sqlite", "both"), default="both")
    p.add_argument("--gets", type=int, help="GETs of each VM (default 400; --quick: 30)")
    p.add_argument("--events", type=int,
                   help="events of the long VM (default 10,000; --quick: 1,000)")
    p.add_argument("--profile", metavar="DIR", help="py-spy the API process for 8 s of GETs")
    args = p.parse_args()
    size_defaults(args, {"gets": 400, "events": 10_000}, {"gets": 30, "events": 1_000})
    if args.profile:
        from _profile import py_spy

        py_spy()  # refuses now, before any work, when py-spy is missing
    results = {}
    backends = ("postgres", "sqlite") if args.backend == "both" else (args.backend,)
    for backend in backends:
        with tempfile.TemporaryDirectory() as tmp:
            if backend == "postgres":
                with scratch_postgres("p2") as url:
                    results[backend] = measure(backend, url, tmp, args)
            else:
                results[backend] = measure(backend, f"sqlite:///{tmp}/p2.db", tmp, args)
    main_ratio = results.get("postgres", results.get("sqlite"))["ratio"]
    worst = max(r["ratio"] for r in results.values())
    emit("P2", "GetVm median latency, VM with 10,000 events / VM with 10 events (HTTP, real "
         "server, read-your-writes)", raw=results, ratio=main_ratio, goal=f"<= {GOAL}",
         met=worst <= GOAL)


if __name__ == "__main__":
    main()
