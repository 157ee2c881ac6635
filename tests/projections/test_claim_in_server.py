"""PostgreSQL: a batch's claim aborts its own transaction when refused (``vmledger_claim``), so
the runner sends ``COMMIT`` with it and waits for no answer before (docs/performance.md, P5).
A runner refused so raises ``ProjectionConflictError``: tests/projections/test_runner.py's
rivals, on both backends."""

from __future__ import annotations

import pytest

from projections.tracking import claim_or_abort, refused
from tests.builders import rows

ON_POSTGRES = pytest.mark.parametrize("database_url", ["postgres"], indirect=True)


def positions(services) -> dict[str, int]:
    """The tracking positions of this test's read models, ``a`` and ``b``."""
    return {row["name"]: int(row["position"])
            for row in rows(services, "projection_tracking", order_by="name")
            if row["name"] in ("a", "b")}


def pipelined_claim(services, names, start, reach, *, then: str | None = None) -> None:
    """``claim_or_abort`` in a pipelined batch transaction, with ``then`` sent after it."""
    with services.db.transaction(pipeline=True, durable=False) as tx:
        claim_or_abort(tx, names, start, reach)
        if then is not None:
            tx.execute(then)


@ON_POSTGRES
def test_claims_from_zero_and_from_a_position_move_every_named_read_model(services):
    pipelined_claim(services, ["a", "b"], 0, 7)
    pipelined_claim(services, ["a", "b"], 7, 9)
    assert positions(services) == {"a": 9, "b": 9}


@ON_POSTGRES
@pytest.mark.parametrize("start", [0, 7, 8])
def test_a_claim_with_one_read_model_elsewhere_moves_none_and_commits_nothing(services, start):
    pipelined_claim(services, ["a", "b"], 0, 7)
    pipelined_claim(services, ["b"], 7, 8)  # b moved on: a is at 7, b at 8
    with services.db.transaction() as tx:
        tx.execute("CREATE TABLE after_the_claim (k INTEGER)")
    with pytest.raises(Exception) as raised:
        pipelined_claim(services, ["a", "b"], start, 20,
                        then="INSERT INTO after_the_claim VALUES (1)")
    assert refused(raised.value)
    assert positions(services) == {"a": 7, "b": 8}
    assert rows(services, "after_the_claim", order_by="k") == []


@ON_POSTGRES
def test_after_refused_claims_the_connections_statements_still_run(services):
    # psycopg prepares a statement on its sixth use; a refusal aborts the statements sent
    # after the claim, a PREPARE among them (docs/performance.md, "Group commit")
    with services.db.transaction() as tx:
        tx.execute("CREATE TABLE after_the_claim (k INTEGER)")
    insert = "INSERT INTO after_the_claim VALUES (1)"
    at = 0
    for round_ in range(12):
        if round_ % 3 == 2:
            with pytest.raises(Exception) as raised:
                pipelined_claim(services, ["a"], at + 1, at + 2, then=insert)
            assert refused(raised.value)
        else:
            pipelined_claim(services, ["a"], at, at + 1, then=insert)
            at += 1
    assert positions(services) == {"a": 8}
    assert len(rows(services, "after_the_claim", order_by="k")) == 8
