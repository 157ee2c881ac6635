"""Run vmledger's own processes (``serve``, ``project``, ``work``) against a test database, for
tests that need real processes racing each other."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from tests.cli import stop_processes, vmledger_process
from tests.waiting import wait_until


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def deployment(database_url: str, tmp_dir: str, *, api_workers: int = 2, job_workers: int = 2,
               extra_env: dict[str, str] | None = None) -> Iterator[str]:
    """A production-mode deployment: ``serve --workers N``, one ``project``, ``job_workers``
    ``work`` processes. Yields the API's base URL; stops everything afterwards."""
    env = {
        **os.environ,
        "VMLEDGER_DATABASE_URL": database_url,
        "VMLEDGER_EMBEDDED_RUNNERS": "false",
        "VMLEDGER_PROJECTION_POLL_S": "0.01",
        "VMLEDGER_WORKER_POLL_S": "0.02",
        "VMLEDGER_SIM_SERVERS": "8",
        **(extra_env or {}),
    }
    port = free_port()
    log_path = os.path.join(tmp_dir, "deployment.log")
    # The schema is created by the first process; start it alone so the others find it.
    processes = [vmledger_process("project", env=env, log_path=log_path)]
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _has_tables(database_url), "the schema", log_path=log_path,
                   timeout=60, interval=0.1)
        processes.append(vmledger_process("serve", "--port", str(port), "--workers", str(api_workers),
                                   env=env, log_path=log_path))
        processes += [vmledger_process("work", env=env, log_path=log_path) for _ in range(job_workers)]
        wait_until(lambda: _answers(base_url), "the API", log_path=log_path, timeout=60,
                   interval=0.1)
        yield base_url
    finally:
        stop_processes(processes)


def _answers(base_url: str) -> bool:
    try:
        return httpx.get(f"{base_url}/ping", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _has_tables(database_url: str) -> bool:
    import psycopg

    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT to_regclass('public.projection_tracking')").fetchone()
    return row is not None and row[0] is not None
