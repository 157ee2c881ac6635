"""The command line as an operator meets it in the first hour (issue #17), always through the
real ``vmledger`` entry point in a subprocess, checking its output and exit status."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from service.container import READ_MODEL_NAMES
from tests.cli import VMLEDGER, environment, vmledger
from tests.conftest import ADMIN_URL, REQUIRE_POSTGRES, _with_dbname
from tests.trace import SCHEDULE, SUBMIT, row, write_trace

# the real entry point in a subprocess for every case (about 45 s): CI runs it as slow
pytestmark = pytest.mark.slow


@pytest.fixture
def sqlite_env(tmp_path: Path) -> dict[str, str]:
    return {"VMLEDGER_DATABASE_URL": f"sqlite:///{tmp_path / 'vmledger.db'}",
            "VMLEDGER_SIM_SERVERS": "2", "VMLEDGER_LOG_FORMAT": "text"}


def test_version_prints_the_installed_version() -> None:
    from importlib.metadata import version

    done = vmledger("--version")
    assert (done.returncode, done.stdout.strip()) == (0, f"vmledger {version('vmledger')}")


def test_rebuild_help_and_its_unknown_name_error_list_the_read_models(
        sqlite_env: dict[str, str]) -> None:
    helped = vmledger("rebuild", "--help", env={"COLUMNS": "200"})
    assert helped.returncode == 0
    assert all(name in helped.stdout for name in READ_MODEL_NAMES)
    refused = vmledger("rebuild", "vm_veiw", env={**sqlite_env, "COLUMNS": "200"})
    assert refused.returncode == 2
    assert "unknown read models: vm_veiw" in refused.stderr
    assert all(name in refused.stderr for name in READ_MODEL_NAMES)


def test_help_texts_are_not_hard_wrapped() -> None:
    done = vmledger("--help", env={"COLUMNS": "400"})
    assert done.returncode == 0
    work = next(line for line in done.stdout.splitlines() if re.search(r"\bwork\b", line))
    assert "The first SIGINT or SIGTERM" in work and '"Stopping processes")' in work
    rebuild = next(line for line in done.stdout.splitlines() if re.search(r"\brebuild\b", line))
    assert "then each switched in one transaction" in rebuild


def test_an_empty_metrics_address_means_unset(sqlite_env: dict[str, str]) -> None:
    done = vmledger("rebuild", env={**sqlite_env, "VMLEDGER_METRICS_ADDRESS": ""})
    assert done.returncode == 0, done.stderr
    bad = vmledger("rebuild", env={**sqlite_env, "VMLEDGER_METRICS_ADDRESS": "nope"})
    # one line naming the setting and the form it takes: it printed pydantic's raw regex
    assert (bad.returncode, bad.stderr) == (
        2, ("VMLEDGER_METRICS_ADDRESS: must be HOST:PORT, e.g. 127.0.0.1:9100 "
            "([::1]:9100 for IPv6)\n"))


def test_a_metrics_address_already_taken_is_one_line_naming_it_not_a_traceback(
        sqlite_env: dict[str, str]) -> None:
    # found by a new user: vmledger work died with OSError's whole traceback
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        done = vmledger("work", env={**sqlite_env, "VMLEDGER_METRICS_ADDRESS": address}, timeout=60)
    # one line, not click's usage box (5 lines, "Usage: vmledger work [OPTIONS]")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(
        f"VMLEDGER_METRICS_ADDRESS: cannot listen on {address}: "), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr


@pytest.fixture(scope="module")
def missing_database_url() -> str:
    """A URL of the test PostgreSQL server naming a database that does not exist."""
    try:
        psycopg.connect(ADMIN_URL, connect_timeout=5).close()
    except psycopg.OperationalError as error:
        if REQUIRE_POSTGRES:
            pytest.fail(f"PostgreSQL not reachable at {ADMIN_URL}: {error}")
        pytest.skip(f"PostgreSQL not reachable at {ADMIN_URL}: {error}")
    return _with_dbname(ADMIN_URL, f"vmledger_missing_{uuid.uuid4().hex[:8]}")


#: Every command that touches the database, as run by the preflight tests below.
DATABASE_COMMANDS = [
    ["serve", "--port", "0"], ["serve", "--workers", "2", "--port", "1"], ["project"],
    ["work"], ["history", str(uuid.uuid4())], ["rebuild"], ["audit", "verify"],
    ["replay", __file__], ["changes"], ["changes", "--follow"],
]
#: Commands that never open the database.
NO_DATABASE_COMMANDS = [["token", "create"]]


def test_every_command_is_in_the_preflight_tests() -> None:
    # found by a tester: changes was added without the check every other command had
    import typer

    from service.cli.app import cli

    def leaves(group, prefix: list[str]) -> list[list[str]]:
        return [path for name, command in group.commands.items()
                for path in (leaves(command, [*prefix, name])
                             if hasattr(command, "commands") else [[*prefix, name]])]

    covered = {tuple(c[:2]) if c[0] in ("audit", "token") else (c[0],)
               for c in DATABASE_COMMANDS + NO_DATABASE_COMMANDS}
    assert {tuple(path) for path in leaves(typer.main.get_command(cli), [])} == covered


@pytest.mark.parametrize("command", DATABASE_COMMANDS, ids=lambda c: " ".join(c[:3]))
def test_a_missing_database_is_one_line_saying_how_to_create_it(
        missing_database_url: str, command: list[str]) -> None:
    dbname = missing_database_url.rsplit("/", 1)[1]
    done = vmledger(*command, env={"VMLEDGER_DATABASE_URL": missing_database_url}, timeout=60)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [(
        f'vmledger: database "{dbname}" does not exist on 127.0.0.1:5432; create it with: '
        f"createdb -h 127.0.0.1 -p 5432 -U postgres {dbname}")]


@pytest.mark.parametrize("command", [["changes"], ["changes", "--follow"], ["project"]],
                         ids=" ".join)
@pytest.mark.parametrize("url", ["postgresql://postgres@127.0.0.1:1/vmledger",
                                 "postgresql://nouser_x@127.0.0.1:5432/postgres"])
def test_a_server_it_cannot_reach_or_log_in_to_is_one_line(
        missing_database_url: str, url: str, command: list[str]) -> None:
    # found by a tester: vmledger changes printed 71 lines of traceback, then exit 1
    done = vmledger(*command, env={"VMLEDGER_DATABASE_URL": url}, timeout=60)
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("vmledger: cannot connect to PostgreSQL at 127.0.0.1:")


class Process:
    """A ``vmledger`` process whose stderr lines can be waited for."""

    def __init__(self, *args: str, env: dict[str, str]):
        self.popen = subprocess.Popen([VMLEDGER, *args], env=environment(env),
                                      stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                      text=True, start_new_session=True)
        self.lines: list[str] = []
        self._new: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.popen.stderr is not None
        for line in self.popen.stderr:
            self.lines.append(line.rstrip("\n"))
            self._new.put(line)
        self._new.put(None)

    def wait_for(self, text: str, timeout: float = 60) -> str:
        """The first stderr line holding ``text``; fails at the timeout or at end of output."""
        for line in self.lines:
            if text in line:
                return line
        while True:
            line = self._new.get(timeout=timeout)
            assert line is not None, f"{text!r} never logged: {self.lines}"
            if text in line:
                return line

    def stop(self) -> int:
        self.popen.send_signal(signal.SIGTERM)
        status = self.popen.wait(timeout=60)
        self._new.put(None)
        return status


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in started:
        if process.popen.poll() is None:
            os.killpg(process.popen.pid, signal.SIGKILL)
            process.popen.wait()


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("workers", [1, 2])
def test_serve_says_where_it_listens_once_every_process_does(
        sqlite_env: dict[str, str], processes: list[Process], workers: int) -> None:
    # operator tester: one process never said it; with two the line came once the first
    # accepted connections, seconds before the second had started
    port = _free_port()
    serve = Process("serve", "--workers", str(workers), "--port", str(port), env=sqlite_env)
    processes.append(serve)
    line = serve.wait_for("listening on").rstrip("\n")
    said = "process" if workers == 1 else "processes"
    assert line.endswith(f"vmledger.service.api.serving: listening on http://127.0.0.1:{port} "
                         f"with {workers} HTTP {said}")
    before = serve.lines[:serve.lines.index(line)]
    assert sum("Application startup complete" in earlier for earlier in before) == workers
    # one process ends as SIGTERM's default would (143), the parent of several with 0
    assert serve.stop() == (-signal.SIGTERM if workers == 1 else 0)


def test_project_logs_one_line_at_start_and_one_at_stop(sqlite_env: dict[str, str],
                                                       processes: list[Process]) -> None:
    project = Process("project", env=sqlite_env)
    processes.append(project)
    started = project.wait_for("projection runner started")
    assert "vmledger.project:" in started
    assert sqlite_env["VMLEDGER_DATABASE_URL"] in started and "vm_view" in started
    assert project.stop() == 0
    project.wait_for("projection runner stopped")
    assert all(" vmledger." in line or not re.match(r"\d{4}-", line) for line in project.lines)
    assert _events_in(sqlite_env) == 0  # it registers no simulated server: serve does


def test_work_logs_one_line_at_start_naming_itself_and_the_database(
        sqlite_env: dict[str, str], processes: list[Process]) -> None:
    # found by a new user: a worker with no job logged nothing, so nothing said it came up
    work = Process("work", env=sqlite_env)
    processes.append(work)
    started = work.wait_for("started: database")
    assert "vmledger.work:" in started and "worker worker-" in started
    assert sqlite_env["VMLEDGER_DATABASE_URL"] in started
    assert work.stop() == 0
    work.wait_for("stopped")


def _events_in(env: dict[str, str]) -> int:
    import sqlite3

    with sqlite3.connect(env["VMLEDGER_DATABASE_URL"].removeprefix("sqlite:///")) as db:
        [(events,)] = db.execute("SELECT count(*) FROM stored_events").fetchall()
    return events


def _trace(path: Path, tasks: int) -> Path:
    """``tasks`` tasks of one job, each submitted and scheduled."""
    return write_trace(path, [row(event, index=str(index), machine="42" if event else "",
                                  cpu="0.01", mem="0.01")
                              for index in range(tasks) for event in (SUBMIT, SCHEDULE)])


def _final_counts(stderr: str, label: str) -> tuple[int, int]:
    """The last ``done/total`` figures rich printed on the line of ``label``."""
    lines = [line for line in stderr.splitlines() if label in line]
    assert lines, stderr
    done, total = re.findall(r"(\d+)/(\d+)", lines[-1])[-1]
    return int(done), int(total)


def test_replay_rebuild_and_audit_bars_go_to_stderr_and_end_full(
        sqlite_env: dict[str, str], tmp_path: Path) -> None:
    env = {**sqlite_env, "COLUMNS": "200"}
    replayed = vmledger("replay", str(_trace(tmp_path / "t.csv.gz", 30)), "--json", env=env)
    assert replayed.returncode == 0, replayed.stderr
    import json

    summary = json.loads(replayed.stdout)  # stdout holds the summary alone
    assert _final_counts(replayed.stderr, "replaying") == (60, 60)
    assert f"replaying: {summary['vms_created']} VMs" in replayed.stderr
    done, total = _final_counts(replayed.stderr, "read models")
    assert done == total > 0
    rebuilt = vmledger("rebuild", env=env)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert rebuilt.stdout.startswith("rebuilt ")
    done, total = _final_counts(rebuilt.stderr, "rebuilt")
    assert done == total > 0
    verified = vmledger("audit", "verify", env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.strip().splitlines() == [
        (f"audit verify: every stream's chain, every snapshot and every read model held "
         f"({total} events)")]
    assert _final_counts(verified.stderr, "checking hash chains") == (total, total)
    done, folded = _final_counts(verified.stderr, "comparing read models")
    assert done == folded == total * len(READ_MODEL_NAMES)


def test_a_rebuild_that_meets_another_ends_with_one_line_not_a_traceback(
        sqlite_env: dict[str, str], monkeypatch) -> None:
    # found by a new user: a second rebuild at once died with ProjectionConflictError's trace
    from typer.testing import CliRunner

    from projections.runner import ProjectionRunner
    from projections.tracking import ProjectionConflictError
    from service.cli.app import cli

    def conflicting(*_args, **_kwargs):
        raise ProjectionConflictError("another runner moved the position past 0 first")

    monkeypatch.setattr(ProjectionRunner, "rebuild", conflicting)
    for name, value in sqlite_env.items():
        monkeypatch.setenv(name, value)
    done = CliRunner().invoke(cli, ["rebuild"])
    assert done.exit_code == 1, done.output
    assert "another rebuild running" in done.output and "Traceback" not in done.output


@pytest.mark.parametrize("port", ["99999", "65536", "-1", "18446744073709551616"])
def test_a_port_out_of_range_is_a_usage_error_naming_the_option(
        port: str, sqlite_env: dict[str, str], monkeypatch) -> None:
    # found by a tester: 99999 listened on 99999 mod 65536 and said 99999; -1 started, then
    # failed with exit 3
    from typer.testing import CliRunner

    from service.api import processes, serving
    from service.cli.app import cli

    served: list[object] = []  # a port let through is recorded here, never listened on
    monkeypatch.setattr(serving, "run", lambda *args, **kwargs: served.append(kwargs))
    monkeypatch.setattr(processes, "serve_processes", lambda *args: served.append(args) or 0)
    for workers in ("1", "2"):
        done = CliRunner().invoke(cli, ["serve", "--workers", workers, "--port", port],
                                  env={**sqlite_env, "COLUMNS": "200"})
        assert done.exit_code == 2, done.output
        assert "Invalid value for '--port'" in done.output and "Traceback" not in done.output
    assert served == []


@pytest.mark.parametrize("address", ["127.0.0.1:99999", "127.0.0.1:65536", "[::1]:70000"])
def test_a_metrics_port_out_of_range_is_refused_naming_the_variable(
        sqlite_env: dict[str, str], address: str) -> None:
    # the same kind: vmledger work died with bind()'s OverflowError and its traceback
    done = vmledger("rebuild", env={**sqlite_env, "VMLEDGER_METRICS_ADDRESS": address})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("VMLEDGER_METRICS_ADDRESS:") and "65535" in done.stderr


def test_commands_that_read_or_rebuild_append_nothing_to_the_log(
        sqlite_env: dict[str, str]) -> None:
    """Found in review: every command built the services the way ``serve`` does, so an
    auditor's first ``audit verify`` of a database recorded the simulated compute nodes as
    servers. Only ``serve`` and ``work`` register them; the others leave the log as it is."""
    # rebuild first: it makes the database, which the commands that only read refuse to make
    for args in (["rebuild"], ["audit", "verify"], ["history", str(uuid.uuid4())],
                 ["changes"]):
        done = vmledger(*args, env=sqlite_env)
        assert "Traceback" not in done.stderr, done.stderr
        # it ran (history of an unknown VM says so and exits 1) and appended nothing
        assert done.returncode == (1 if args[0] == "history" else 0), done.stderr
        assert _events_in(sqlite_env) == 0, f"{args} appended to the log"


@pytest.mark.parametrize("command", [["audit", "verify"], ["history", str(uuid.uuid4())],
                                     ["changes"], ["serve", "--port", "0"]])
@pytest.mark.parametrize("where", ["directory", "unopenable", "not-a-database"])
def test_a_sqlite_url_sqlite_cannot_open_is_one_line_naming_the_variable(
        tmp_path: Path, command: list[str], where: str) -> None:
    # tester D, bug 9: a directory, or a file SQLite cannot create, ended in a traceback
    # ("unable to open database file"; serve: "Application startup failed", status 3); and
    # a file that is not a database: sqlite3.connect() reads no header, so the check passed
    # and the command ended in "file is not a database"
    path = {"directory": tmp_path, "unopenable": Path("/proc/vmledger-no.db"),
            "not-a-database": tmp_path / "text.db"}[where]
    if where == "not-a-database":
        path.write_text("hello\n")
    done = vmledger(*command, env={"VMLEDGER_DATABASE_URL": f"sqlite:///{path}",
                              "VMLEDGER_LOG_FORMAT": "text"}, timeout=60)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("VMLEDGER_DATABASE_URL:") and str(path) in line, done.stderr
