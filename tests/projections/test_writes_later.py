"""On SQLite a batch is folded before the runner takes the database's one write lock: other
writers (a replay's appends, the API's commands) are not kept waiting while Python folds
(projections.writes_later)."""

from __future__ import annotations

import sqlite3

import pytest

from projections.db import Dialect
from projections.runner import ProjectionRunner
from projections.tracking import ProjectionConflictError
from projections.vm_view import VmView
from projections.writes_later import WritesLater
from tests.builders import create, rows


class ProbingVmView(VmView):
    """``VmView`` that, while it folds a batch, tries to take SQLite's write lock from a
    connection of its own without waiting, and notes whether it could (``took_the_lock``);
    then runs ``during_fold`` (a rival's work)."""

    def __init__(self, transcoder, path: str, *, blind: bool, during_fold=None):
        super().__init__(transcoder)
        self.blind_writes = blind
        self.path, self.during_fold = path, during_fold
        self.took_the_lock: list[bool] = []

    def write(self, tx, events, stored):
        other = sqlite3.connect(self.path, timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
            self.took_the_lock.append(True)
        except sqlite3.OperationalError:  # "database is locked"
            self.took_the_lock.append(False)
        finally:
            other.close()
        if self.during_fold is not None:
            self.during_fold()
        super().write(tx, events, stored)


def probing_runner(services, **probe) -> tuple[ProjectionRunner, ProbingVmView]:
    path = services.settings.database_url.removeprefix("sqlite:///")
    view = ProbingVmView(services.app.mapper.transcoder, path, **probe)
    runner = ProjectionRunner(services.db, services.app.recorder, services.app.mapper, [view])
    return runner, view


# SQLite's database-wide write lock (PostgreSQL locks rows, and folds inside its transaction)
ON_SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@ON_SQLITE
@pytest.mark.parametrize("blind", [True, False])  # False: the control, folded under the lock
def test_a_blind_read_model_folds_while_another_writer_can_take_the_lock(services, blind):
    create(services)
    runner, view = probing_runner(services, blind=blind)
    runner.catch_up()
    assert view.took_the_lock == [blind]
    assert len(rows(services, "vm_view")) == 1  # and its rows were written


@ON_SQLITE
def test_a_rival_that_applies_the_batch_during_the_fold_wins_and_nothing_is_written_twice(
        services):
    create(services)
    rival = services.projections
    runner, _view = probing_runner(
        services, blind=True, during_fold=lambda: rival.catch_up(["vm_view"]))
    with pytest.raises(ProjectionConflictError):
        runner.catch_up()
    assert runner.position("vm_view") == services.commands.head_position()
    assert len(rows(services, "vm_view")) == 1


def test_a_read_model_that_asks_for_a_kept_writes_rows_is_refused():
    later = WritesLater(reads=type("Reads", (), {"dialect": Dialect.SQLITE})())
    later.execute("INSERT INTO t VALUES (?)", (1,))
    with pytest.raises(TypeError, match="not blind"):
        later.fetchone()


def test_kept_statements_run_in_the_order_given():
    sent: list[tuple[str, object]] = []

    class Recording:
        def execute(self, statement, params):
            sent.append((statement, params))

        def executemany(self, statement, params_seq):
            sent.append((statement, params_seq))

    later = WritesLater(reads=type("Reads", (), {"dialect": Dialect.SQLITE})())
    later.executemany("DELETE", [[1], [2]])
    later.execute("UPDATE", [3])
    later.executemany("INSERT", [])  # nothing to send: not kept
    later.executemany("INSERT", [[4]])
    later.run_in(Recording())
    assert sent == [("DELETE", [[1], [2]]), ("UPDATE", [3]), ("INSERT", [[4]])]
