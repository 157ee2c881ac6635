"""pgbench, the references of P1: the event store's own append transaction and a plain
one-row insert, measured on the same database in the same run."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import psycopg


def pgbench_path() -> str:
    """The pgbench binary (on PATH, or PostgreSQL's bin directory)."""
    found = shutil.which("pgbench") or next(
        iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/pgbench"), reverse=True)), None)
    if not found:
        raise SystemExit("pgbench not found (it ships with the PostgreSQL server packages)")
    return found


# The reference transaction: one row of about a stored event's size, autocommitted.
PGBENCH_TABLE = "bench_insert"
PGBENCH_DDL = (f"CREATE TABLE IF NOT EXISTS {PGBENCH_TABLE} ("
               "id bigserial PRIMARY KEY, payload bytea NOT NULL)")
PGBENCH_INSERT = (f"INSERT INTO {PGBENCH_TABLE} (payload) "
                  "VALUES (convert_to(repeat('x', :size), 'UTF8'));\n")


def pgbench_tps(url: str, script: str, *, clients: int, seconds: float,
                setup: Sequence[str] = (), define: dict[str, Any] | None = None) -> float:
    """Run ``script`` (pgbench custom script text) with ``clients`` connections for
    ``seconds`` and return its tps (without connection time)."""
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in setup:
            conn.execute(statement)
    parts = urlsplit(url)
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script)
    try:
        command = [
            pgbench_path(), "-n", "-h", parts.hostname or "127.0.0.1",
            "-p", str(parts.port or 5432), "-U", parts.username or "postgres",
            "-c", str(clients), "-j", str(min(clients, os.cpu_count() or 1)),
            "-T", str(max(1, round(seconds))), "-f", f.name,
        ]
        for key, value in (define or {}).items():
            command += ["-D", f"{key}={value}"]
        command.append(parts.path.lstrip("/"))
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(f.name)
    match = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out)
    if not match:
        raise RuntimeError(f"unexpected pgbench output:\n{out}")
    return float(match.group(1))


def pgbench_insert_tps(url: str, *, clients: int, seconds: float, size: int = 500) -> float:
    """The reference of P1: pgbench one-row-insert transactions per second."""
    return pgbench_tps(url, PGBENCH_INSERT, clients=clients, seconds=seconds,
                       setup=[PGBENCH_DDL], define={"size": size})
