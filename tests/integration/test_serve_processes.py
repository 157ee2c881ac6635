"""``vmledger serve --workers N`` runs N processes, each on a listening socket of its own
(``SO_REUSEPORT``): connections opened together are spread over them, a SIGTERM stops them
all gracefully, and none outlives a parent killed outright."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.cli.app import cli
from tests.cli import vmledger_process
from tests.integration.processes import free_port
from tests.waiting import wait_until

# long runs of real processes: .ci/slow.sh runs them, the default run leaves them out
pytestmark = pytest.mark.slow

WORKERS = 2


def children_of(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended meanwhile
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def sockets_on(port: int, pids: set[int], state: str) -> dict[int, int]:
    """How many TCP sockets on local ``port`` in ``state`` (/proc/net/tcp's hex code: 01
    established, 0A listening) each of ``pids`` holds."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] == state:
            inodes.add(fields[9])
    counts = {}
    for pid in pids:
        links = []
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                links.append(os.readlink(fd))
            except OSError:
                continue
        counts[pid] = sum(link[8:-1] in inodes for link in links if link.startswith("socket:["))
    return counts


# /ping's answer here: no projection runner runs (the runners are off, so that the processes
# do nothing but answer) while the log holds the fleet's servers, unprojected, so it is 503
# (docs/operations.md, "Is a projection runner running?"): an answer all the same
PING_ANSWER = b"HTTP/1.1 503"


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            conn.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return conn.recv(64).startswith(PING_ANSWER)
    except OSError:
        return False


@contextmanager
def serving(tmp_path: Path, log_format: str = "text",
            ) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    parent = vmledger_process("serve", "--port", str(port), "--workers", str(WORKERS),
                              log_path=tmp_path / "serve.log",
                              database_url=f"sqlite:///{tmp_path / 'vmledger.db'}",
                              env={"VMLEDGER_EMBEDDED_RUNNERS": "false",
                                   "VMLEDGER_LOG_FORMAT": log_format})
    try:
        wait_until(lambda: sum(1 for n in sockets_on(port, children_of(parent.pid), "0A").values()
                               if n) == WORKERS and answers(port), "every process listening")
        yield parent, port
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_connections_opened_together_are_spread_over_the_processes(tmp_path):
    with serving(tmp_path) as (parent, port):
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(16)]
        try:
            for client in clients:  # keep-alive requests: each connection stays open
                client.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
            for client in clients:
                assert client.recv(64).startswith(PING_ANSWER)
            counts = sockets_on(port, children_of(parent.pid), "01")
        finally:
            for client in clients:
                client.close()
    serving_ones = [n for n in counts.values() if n]
    assert sum(counts.values()) == 16
    # The kernel hashes connections over the sockets: all 16 on one of 2 has odds of 2**-15.
    assert len(serving_ones) == WORKERS, counts


def test_a_sigterm_stops_every_process_and_the_parent_exits_0(tmp_path):
    with serving(tmp_path) as (parent, port):
        children = children_of(parent.pid)
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=30) == 0
        wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in children),
                   "the processes to end")
        assert not answers(port)


def test_no_process_outlives_a_parent_killed_outright(tmp_path):
    log_path = tmp_path / "serve.log"
    with serving(tmp_path, log_format="json") as (parent, _port):
        children = children_of(parent.pid)
        before = len(log_path.read_text().splitlines())
        parent.kill()
        parent.wait()
        wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in children),
                   "the processes to end")
    # each says so in one JSON line, and no more (test_serve_orphans.py: while starting);
    # the line of the request that found them listening may come after the kill
    after = log_path.read_text().splitlines()[before:]
    assert all(line.startswith("{") for line in after), after
    records = [r for r in map(json.loads, after) if r["logger"] != "vmledger.access"]
    assert [r["level"] for r in records] == ["WARNING"] * WORKERS, records
    assert all("is gone" in r["message"] for r in records), records


@pytest.mark.parametrize("port", ["0"])
def test_workers_need_a_fixed_port(port, database_env):
    result = CliRunner().invoke(cli, ["serve", "--workers", "2", "--port", port])
    assert result.exit_code == 2
    assert "fixed --port" in result.output


def test_a_second_serve_on_the_same_port_is_refused_not_sharing_it(tmp_path, database_env):
    with serving(tmp_path) as (_parent, port):
        result = CliRunner().invoke(cli, ["serve", "--workers", "2", "--port", str(port)])
    # as one process ends (operator tester: a usage error, exit 2, where one process exits 3)
    assert result.exit_code == 3
    assert "address already in use" in result.output and "Usage" not in result.output


def test_workers_must_be_at_least_1(database_env):
    result = CliRunner().invoke(cli, ["serve", "--workers", "0"])
    assert result.exit_code == 2


def test_a_process_killed_outright_stops_the_others_and_the_parent_exits_128_plus_9(tmp_path):
    # operator tester: the parent exited 9, where a shell reports a SIGKILL as 137
    with serving(tmp_path) as (parent, _port):
        children = children_of(parent.pid)
        # an HTTP process, not multiprocessing's resource tracker
        http = next(pid for pid in children
                    if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes())
        os.kill(http, signal.SIGKILL)
        assert parent.wait(timeout=30) == 128 + signal.SIGKILL
        wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in children),
                   "the processes to end")
