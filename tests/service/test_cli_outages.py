"""A database lost in the middle of a command that ends on it (``rebuild``, ``audit verify``,
``changes``, ``history``) ends the command with one line naming the database and the error,
and status 1, as the start-up check's ``cannot connect to PostgreSQL at ...`` does; a tester
found two chained tracebacks (about 75 lines) instead. A bug that is no database failure
keeps its traceback. Run through ``service.cli.app.main``, the console script's entry point."""

from __future__ import annotations

import sqlite3
import sys
from contextlib import ExitStack
from urllib.parse import urlsplit

import pytest
from eventsourcing.persistence import OperationalError

import projections.parallel_rebuild
import service.audit.history
import service.audit.verify
from projections.runner import ProjectionRunner
from service.changes.reader import LogReader
from service.cli.app import main
from service.database_url import sqlite_path
from tests.changes.scenarios import OWNER_A, create_vm
from tests.integration.outages import database_refused

# Each command, and the call in its middle where the database goes.
CUTS = {
    ("audit", "verify"): (service.audit.verify, "verify_chains"),
    ("rebuild",): (ProjectionRunner, "rebuild"),
    ("rebuild", "--processes", "2"): (projections.parallel_rebuild, "build_beside"),
    ("changes",): (LogReader, "read_after"),
    ("history", "VM"): (service.audit.history, "vm_history"),
}


@pytest.fixture
def command_line(services, settings, monkeypatch, capsys):
    """Runs ``vmledger ARGS`` through ``main`` on the test's database, which has a VM (its
    uuid for ``VM``): the exit status, stdout, stderr."""
    vm_uuid = create_vm(services, OWNER_A)
    monkeypatch.setenv("VMLEDGER_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("VMLEDGER_SIM_SERVERS", "4")
    monkeypatch.setenv("VMLEDGER_DATABASE_RETRY_S", "0")  # not a slow test
    monkeypatch.setenv("VMLEDGER_POSTGRES_POOL_WAIT_S", "0.2")

    def run(*args: str) -> tuple[int, str, str]:
        argv = [vm_uuid if arg == "VM" else arg for arg in args]
        monkeypatch.setattr(sys, "argv", ["vmledger", *argv])
        with pytest.raises(SystemExit) as ended:
            main()
        out, err = capsys.readouterr()
        return ended.value.code, out, err

    return run


def _cut(monkeypatch, where, name: str, outage) -> None:
    """``where.name`` meets ``outage()`` (a context entered for the rest of the test, or an
    error raised) as it is called, then goes on as itself."""
    real = getattr(where, name)

    def cut(*args, **kwargs):  # on a class, a method: its first argument is self
        outage()
        return real(*args, **kwargs)

    monkeypatch.setattr(where, name, cut)


def _sqlite_locked() -> None:
    # what the event store raises for SQLite's busy timeout run out
    try:
        raise sqlite3.OperationalError("database is locked")
    except sqlite3.OperationalError as error:
        raise OperationalError(str(error)) from error


@pytest.mark.parametrize("args", list(CUTS), ids=" ".join)
def test_a_database_lost_mid_command_ends_it_with_one_line_and_status_1(
        command_line, settings, database_url, monkeypatch, args):
    where, name = CUTS[args]
    with ExitStack() as outages:
        if settings.backend == "postgres":  # a real one: refused, every connection cut
            dbname = urlsplit(database_url).path[1:]
            _cut(monkeypatch, where, name,
                 lambda: outages.enter_context(database_refused(dbname)))
            target = settings.postgres_target()
            named = f"PostgreSQL at {target.host}:{target.port}, database {dbname}"
        else:
            _cut(monkeypatch, where, name, _sqlite_locked)
            named = f"SQLite file {sqlite_path(database_url)}"
        status, _out, err = command_line(*args)
    assert status == 1, err
    assert len(err.splitlines()) == 1, err
    line = err.strip()
    assert line.startswith(f"vmledger: the database failed ({named}): "), line
    if settings.backend == "sqlite":
        assert line.endswith("): database is locked"), line


def test_a_bug_that_is_no_database_failure_keeps_its_traceback(command_line, monkeypatch):
    def bug() -> None:
        try:  # our own SQL wrong: sqlite3 says so with the class of a locked database
            raise sqlite3.OperationalError('near "SELEC": syntax error')
        except sqlite3.OperationalError as error:
            raise OperationalError(str(error)) from error

    _cut(monkeypatch, service.audit.verify, "verify_chains", bug)
    monkeypatch.setattr(sys, "argv", ["vmledger", "audit", "verify"])
    with pytest.raises(OperationalError, match="syntax error"):
        main()


def test_the_line_names_a_database_without_its_password():
    from service.database_failures import database_named
    from service.settings import Settings

    named = database_named(Settings(database_url="postgresql://alice:s3cret@db.example:6432/vml"))
    assert named == "PostgreSQL at db.example:6432, database vml"
