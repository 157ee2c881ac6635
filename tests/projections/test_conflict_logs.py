"""A batch another runner won is refused quietly on PostgreSQL (docs/architecture.md: a
normal event, with several ``vmledger project`` at once). Its statements are sent in one
pipeline; the conflict ended the pipeline with an error, and psycopg logged ``WARNING
psycopg: error ignored terminating <psycopg.Pipeline [INERROR, pipeline=ON] ...>: pipeline
aborted`` for each batch lost (operator tester: 83 lines in 23 s with two runners)."""

from __future__ import annotations

import logging
import select

import pytest

from domain.states import Action
from projections.tracking import ProjectionConflictError
from tests.builders import act, create
from tests.projections.test_runner import (
    VIEWS,
    RacedSource,
    rival,
    second_runner,
    snapshot,
)


def answers_arrived(tx) -> None:
    """Have the server send what it answered so far in ``tx``'s pipeline, and wait until it
    is here: the next statement sent reads it, as when a batch is big enough, or the server
    quick enough, for an error to come back while the batch is still being sent."""
    conn = tx._cursor.connection
    conn.pgconn.send_flush_request()
    conn.pgconn.flush()
    select.select([conn.fileno()], [], [], 10)


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
@pytest.mark.parametrize("view", VIEWS)
def test_a_batch_another_runner_won_is_refused_without_a_psycopg_warning(
        services, view, caplog):
    create(services)
    services.projections.catch_up()
    vm_uuid = create(services).vm_uuid
    act(services, vm_uuid, Action.STOP)
    seen: list = []
    loser = second_runner(services, RacedSource(services.app.recorder, rival(services, view, seen)))
    with caplog.at_level(logging.WARNING, logger="psycopg"), \
            pytest.raises(ProjectionConflictError):
        loser.run_once(view)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")] == []
    [after_the_winner] = seen  # refused as before: nothing of the loser's batch was kept
    assert snapshot(services) == after_the_winner
    assert services.projections.position(view) == services.commands.head_position()
    loser.run_once(view)  # and its connection serves the next batch


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_refused_claim_seen_while_the_batch_is_sent_is_a_conflict_without_a_psycopg_warning(
        services, monkeypatch, caplog):
    # The refusal came back while the loser still sent its batch (the common case with two
    # busy runners): psycopg raised it inside the pipeline, then failed to leave it.
    from projections import batches

    apply_together = batches.apply_together

    def refusal_seen_while_sending(tx, *args, **kwargs):
        answers_arrived(tx)  # the claim's refusal, read by the apply's first statement
        return apply_together(tx, *args, **kwargs)

    create(services)
    services.projections.catch_up()
    act(services, create(services).vm_uuid, Action.STOP)
    seen: list = []
    loser = second_runner(services, RacedSource(services.app.recorder,
                                                rival(services, "vm_view", seen)))
    monkeypatch.setattr(batches, "apply_together", refusal_seen_while_sending)
    with caplog.at_level(logging.WARNING, logger="psycopg"), \
            pytest.raises(ProjectionConflictError):
        loser.run_once("vm_view")
    assert [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")] == []
    [after_the_winner] = seen
    assert snapshot(services) == after_the_winner
    monkeypatch.undo()
    loser.run_once("vm_view")  # its connection, given back to the pool, serves on


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_an_error_raised_inside_a_pipelined_transaction_is_raised_without_a_psycopg_warning(
        services, caplog):


    with caplog.at_level(logging.WARNING, logger="psycopg"):
        with pytest.raises(Exception, match="division by zero"), \
                services.db.transaction(pipeline=True) as tx:
            tx.execute("SELECT 1 / 0")
            answers_arrived(tx)
            tx.execute("SELECT 1")  # raises the error, this one's result still to come
        with pytest.raises(RuntimeError, match="ours"), \
                services.db.transaction(pipeline=True) as tx:
            tx.execute("SELECT 1 / 0")
            answers_arrived(tx)  # here, but not read: no statement was sent after it
            raise RuntimeError("ours")
    assert [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")] == []
    assert services.db.one("SELECT 2 AS x") == {"x": 2}
