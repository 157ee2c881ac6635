"""What every benchmark script shares: scratch databases, pgbench, a production-mode
deployment, CPU accounting, percentiles and the final JSON line.

Every figure is a ratio against a reference measured in the same run on the same machine
(docs/performance.md, "Method"): the machine is shared, so absolute numbers drift by tens of
percent from run to run while ratios hold much better.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from _signals import stop_cleanly_on_signals, stop_process

REPO = Path(__file__).resolve().parent.parent
# Measure the code of the checkout these scripts live in (also in child processes), even when
# the environment's editable install points at another checkout.
sys.path.insert(0, str(REPO))
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
ADMIN_URL = os.environ.get(
    "VMLEDGER_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

# every script stops cleanly on SIGINT and SIGTERM by importing this module
stop_cleanly_on_signals()


# -- output --------------------------------------------------------------------------------


def say(*parts: Any) -> None:
    """A human-readable line (everything before the final JSON line)."""
    print(*parts, flush=True)


def machine_state() -> dict[str, Any]:
    """How busy the (shared) machine is: load averages and CPU pressure (PSI, % of time some
    task waited for a CPU, last 60 s)."""
    state: dict[str, Any] = {"cpus": os.cpu_count()}
    with open("/proc/loadavg") as f:
        state["loadavg_1m"] = float(f.read().split()[0])
    try:
        with open("/proc/pressure/cpu") as f:
            state["cpu_pressure_some_avg60"] = float(f.readline().split()[2].split("=")[1])
    except OSError:
        pass
    return state


_MACHINE_AT_START = machine_state()


def _json_safe(value: Any, *, quick: bool) -> Any:
    """``value`` with every non-finite float (NaN, ±Infinity: a percentile of nothing, a rate
    over no time) as ``None``, which JSON can carry; in a quick run, also every ``*_met``
    verdict inside it, since a smoke run is judged against nothing."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: None if quick and isinstance(key, str) and (key == "met" or key.endswith("_met"))
                else _json_safe(item, quick=quick) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item, quick=quick) for item in value]
    return value


def result_line(figure: str, name: str, *, raw: dict[str, Any], ratio: float | None,
                goal: str, met: bool | None, quick: bool, **extra: Any) -> str:
    """The final JSON line's text: strict JSON (``null`` for NaN or infinite numbers), and
    with ``quick`` every verdict (``met`` and each ``*_met``) ``null``."""
    record = {"figure": figure, "name": name, "raw": raw,
              "ratio": None if ratio is None else round(ratio, 4),
              "goal": goal, "met": None if quick else met, **extra, "quick": quick}
    return json.dumps(_json_safe(record, quick=quick), allow_nan=False)


def emit(figure: str, name: str, *, raw: dict[str, Any], ratio: float | None, goal: str,
         met: bool | None, **extra: Any) -> None:
    """Print the script's last line: one JSON object with the figure, raw numbers, ratio, and
    the machine's load at the script's start and end (``result_line``)."""
    commit = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip() or None
    quick = "--quick" in sys.argv
    if quick:  # a smoke run says so, and claims no goal met or missed
        say(f"{figure}: --quick is a smoke run of a few seconds; its figures are not "
            "meaningful and are not judged against the goal")
    print(result_line(figure, name, raw=raw, ratio=ratio, goal=goal, met=met, quick=quick,
                      **extra, commit=commit,
                      machine={"start": _MACHINE_AT_START, "end": machine_state()}),
          flush=True)


def parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the ``--quick`` flag every script has."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true",
                   help="a smoke run of a few seconds (figures are not meaningful); a size "
                   "option given explicitly still wins over its quick default")
    return p


def size_defaults(args: argparse.Namespace, full: dict[str, Any],
                  quick: dict[str, Any]) -> None:
    """Fill each size option of ``full`` that the command line left ``None``: with its
    ``quick`` value under ``--quick`` (when it has one), else with its ``full`` default. An
    option given explicitly always wins, with or without ``--quick`` (docs/performance.md,
    "Method")."""
    for name, default in full.items():
        if getattr(args, name) is None:
            setattr(args, name, quick.get(name, default) if args.quick else default)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by the nearest-rank method; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


# -- PostgreSQL ----------------------------------------------------------------------------


def _with_dbname(url: str, dbname: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{dbname}"))


@contextmanager
def scratch_postgres(tag: str) -> Iterator[str]:
    """A new PostgreSQL database (``vmledger_bench_<tag>_<hex>``), dropped afterwards."""
    dbname = f"vmledger_bench_{tag}_{uuid.uuid4().hex[:8]}"
    try:  # an interruption between the CREATE and the yield still drops it
        with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{dbname}"')
        yield _with_dbname(ADMIN_URL, dbname)
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


# -- CPU accounting --------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process so far (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(rest[1]), []).append(int(stat.split("/")[2]))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    return found


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / CLOCK_TICKS, sum(values) / CLOCK_TICKS


def backend_pids(url: str) -> list[int]:
    """The PostgreSQL server processes serving connections to ``url``'s database."""
    dbname = urlsplit(url).path.lstrip("/")
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s",
                            (dbname,)).fetchall()
    return [r[0] for r in rows]


class CpuMeter:
    """CPU seconds used by named groups of processes between ``start`` and ``stop``."""

    def __init__(self, groups: dict[str, list[int]]):
        self.groups = groups
        self.before: dict[str, float] = {}
        self.used: dict[str, float] = {}

    def _read(self) -> dict[str, float]:
        values = {name: sum(cpu_seconds(p) for p in pids) for name, pids in self.groups.items()}
        busy, total = machine_cpu()
        values["machine_busy"], values["machine_total"] = busy, total
        return values

    def start(self) -> None:
        self.before = self._read()

    def stop(self) -> dict[str, float]:
        after = self._read()
        self.used = {k: round(after[k] - self.before.get(k, 0.0), 2) for k in after}
        return self.used


# -- a production-mode deployment --------------------------------------------------------------


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def answers_ping(port: int) -> bool:
    """Whether a server on loopback ``port`` answers ``GET /ping`` with 200."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return s.recv(12).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


class Deployment:
    """``vmledger project``, ``serve --workers N`` and ``work`` × M as separate processes on a
    PostgreSQL database, with ``VMLEDGER_EMBEDDED_RUNNERS=false`` (docs/operations.md); the
    code of this checkout, or of ``repo`` run by ``python`` (``bench/p1_ab.py``)."""

    def __init__(self, database_url: str, log_dir: str, *, api_workers: int = 2,
                 job_workers: int = 0, projectors: int = 1, env: dict[str, str] | None = None,
                 repo: Path = REPO, python: str = sys.executable):
        self.env = {
            **os.environ,
            "VMLEDGER_DATABASE_URL": database_url,
            "VMLEDGER_EMBEDDED_RUNNERS": "false",
            **({} if repo == REPO else {"PYTHONPATH": str(repo)}),
            **(env or {}),
        }
        self.repo, self.python = repo, python
        self.database_url = database_url
        self.log_path = os.path.join(log_dir, "deployment.log")
        self.api_workers = api_workers
        self.job_workers = job_workers
        self.projectors = projectors
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.processes: dict[str, list[subprocess.Popen[bytes]]] = {}

    def _spawn(self, role: str, *args: str) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen([self.python, "-m", "service", *args], env=self.env,
                                   stdout=log, stderr=subprocess.STDOUT, cwd=self.repo,
                                   start_new_session=True)
        self.processes.setdefault(role, []).append(process)

    def __enter__(self) -> Deployment:
        # The first process creates the schema; the others start once it exists.
        self._spawn("project", "project")
        try:
            self._wait(self._has_tables, "the schema")
            for _ in range(self.projectors - 1):
                self._spawn("project", "project")
            self._spawn("serve", "serve", "--port", str(self.port),
                        "--workers", str(self.api_workers))
            for _ in range(self.job_workers):
                self._spawn("work", "work")
            self._wait(self._answers, "the API")
            # uvicorn's workers answer one by one: give every one a moment to finish its start.
            time.sleep(1.0 + 0.5 * self.api_workers)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        every = [p for group in self.processes.values() for p in group]
        for process in every:  # all at once: each takes a moment to stop
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for process in every:
            stop_process(process, group=True)

    def pids(self, role: str) -> list[int]:
        """Every process of ``role`` (``serve`` includes uvicorn's worker processes)."""
        return [pid for p in self.processes.get(role, []) for pid in descendants(p.pid)]

    def _has_tables(self) -> bool:
        with psycopg.connect(self.database_url) as conn:
            row = conn.execute("SELECT to_regclass('public.projection_tracking')").fetchone()
        return row is not None and row[0] is not None

    def _answers(self) -> bool:
        return answers_ping(self.port)

    def _wait(self, condition: Any, what: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if condition():
                    return
            except psycopg.Error:
                pass
            if time.monotonic() > deadline:
                with open(self.log_path) as log:
                    tail = log.read()[-3000:]
                raise RuntimeError(f"{what} did not come up in {timeout} s:\n{tail}")
            time.sleep(0.1)


def rss_mib_of_children() -> float:
    """Peak resident set size (MiB) of the largest waited-for child process so far."""
    import resource

    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
