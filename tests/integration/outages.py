"""Measure how a real ``vmledger serve`` answers through a database outage the test makes
with a TCP proxy (tests/integration/tcp_proxy.py): a refused connection (the database down)
or a silent partition (nothing passes, nothing is closed). Used by test_outages.py and by the
fault run, which prints the figures."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg

from tests.api.helpers import vm_body
from tests.conftest import ADMIN_URL
from tests.cli import vmledger_process
from tests.integration.processes import free_port
from tests.waiting import wait_until
from tests.integration.tcp_proxy import TcpProxy

OUTAGE_S = 5.0
PROBES = ("GET /ping", "GET /vms/{uuid}", "POST /vms/{uuid}?action=stop")


@dataclass
class Outage:
    """What the clients saw: every answer during the outage as (probe, latency s, status,
    Retry-After), and how long after the database came back each probe first answered 2xx."""

    kind: str
    answers: list[tuple[str, float, int | None, str | None]] = field(default_factory=list)
    recovered_s: dict[str, float] = field(default_factory=dict)

    @property
    def slowest_answer_s(self) -> float:
        return max(latency for _, latency, _, _ in self.answers)

    def summary(self) -> str:
        return (f"{self.kind}: {len(self.answers)} requests during a {OUTAGE_S:.0f} s outage, "
                f"slowest answer {self.slowest_answer_s:.2f} s; service back after "
                + ", ".join(f"{p} {s:.2f} s" for p, s in self.recovered_s.items()))


@contextmanager
def served_through_a_proxy(database_url: str, log_path: str) -> Iterator[tuple[str, TcpProxy]]:
    """``vmledger serve`` (embedded runner and worker) on a PostgreSQL database reached
    through a proxy; yields the API's base URL and the proxy."""
    parts = urlsplit(database_url)
    proxy = TcpProxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0] + "@" if len(netloc) == 2 else ""
    proxied = urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{proxy.port}"))
    port = free_port()
    env = {**os.environ, "VMLEDGER_DATABASE_URL": proxied, "VMLEDGER_EMBEDDED_RUNNERS": "true",
           "VMLEDGER_WORKER_POLL_S": "0.05", "VMLEDGER_PROJECTION_POLL_S": "0.02",
           "VMLEDGER_SIM_SERVERS": "2", "VMLEDGER_LOG_FORMAT": "text"}
    server = vmledger_process("serve", "--port", str(port), env=env, log_path=log_path)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _status(base, "/ping") == 200, "the API", log_path=log_path,
                   timeout=60)
        yield base, proxy
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except Exception:  # noqa: BLE001 - it must not outlive the test
            server.kill()
            server.wait()
        proxy.close()


def measure(base: str, proxy: TcpProxy, kind: str) -> Outage:
    """A running VM; then ``kind`` (``refuse`` or ``black_hole``) for ``OUTAGE_S`` while one
    client per probe asks again and again; then the proxy heals and each probe is asked
    every 0.1 s until it answers 2xx."""
    with httpx.Client(base_url=base, timeout=60) as http:
        vm_uuid = http.post("/vms", json=vm_body()).json()["vm_uuid"]
        wait_until(lambda: http.get(f"/vms/{vm_uuid}").json().get("state") == "running",
                   what="a running VM", log_path=os.devnull, timeout=30)
        outage = Outage(kind)
        getattr(proxy, kind)()
        ends = time.monotonic() + OUTAGE_S
        lock = threading.Lock()

        def ask_again_and_again(probe: str) -> None:
            while time.monotonic() < ends:
                began = time.monotonic()
                status, retry_after = _ask(http, probe, vm_uuid)
                with lock:
                    outage.answers.append((probe, time.monotonic() - began, status, retry_after))

        clients = [threading.Thread(target=ask_again_and_again, args=(p,)) for p in PROBES]
        for client in clients:
            client.start()
        for client in clients:
            client.join(timeout=120)
        proxy.heal()
        healed = time.monotonic()
        for probe in PROBES[:2]:
            while _ask(http, probe, vm_uuid)[0] != 200:
                if time.monotonic() - healed > 60:
                    raise AssertionError(f"{probe} never answered again after the {kind}")
                time.sleep(0.1)
            outage.recovered_s[probe] = time.monotonic() - healed
    return outage


def _ask(http: httpx.Client, probe: str, vm_uuid: str) -> tuple[int | None, str | None]:
    method, path = probe.split(" ")
    path = path.format(uuid=vm_uuid)
    try:
        answer = http.request(method, path)
    except httpx.HTTPError:
        return None, None
    return answer.status_code, answer.headers.get("retry-after")


def _status(base: str, path: str) -> int | None:
    try:
        return httpx.get(base + path, timeout=2).status_code
    except httpx.HTTPError:
        return None


@contextmanager
def database_refused(dbname: str) -> Iterator[None]:
    """``dbname`` refusing connections, every one of it cut (the server itself stays up)."""
    with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS false')
        try:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE datname = %s AND pid <> pg_backend_pid()", (dbname,))
            yield
        finally:
            conn.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')
