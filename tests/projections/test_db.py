"""The read models' transactions: a non-durable one on SQLite syncs less only while it runs;
the catalogue's columns of many tables in one query."""

from __future__ import annotations

import pytest


def synchronous_level(services) -> int:
    with services.app.recorder.datastore.get_connection(commit=False) as conn:
        cursor = conn.cursor()
        cursor.execute("PRAGMA synchronous")
        return int(cursor.fetchone()[0])


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # a SQLite setting
def test_a_non_durable_sqlite_transaction_syncs_normally_inside_and_restores_the_level(
    services,
):
    before = synchronous_level(services)
    assert before > 1  # FULL or EXTRA: the event store's commits are synced
    with services.db.transaction(durable=False) as tx:
        tx.execute("PRAGMA synchronous")
        assert tx.fetchone() == {"synchronous": 1}  # NORMAL: WAL not synced at commit
    assert synchronous_level(services) == before
    with services.db.transaction() as tx:
        tx.execute("PRAGMA synchronous")
        assert tx.fetchone() == {"synchronous": before}


def test_the_columns_of_many_tables_are_those_of_each_and_none_for_a_missing_one(services):
    make_table(services)
    with services.db.transaction(commit=False) as tx:
        found = services.db.columns_of(tx, ["pipelined", "vm_view", "no_such_table"])
        assert found == {"pipelined": {"k", "v"}, "no_such_table": set(),
                         "vm_view": services.db.columns(tx, "vm_view")}
        assert "owner_uuid" in found["vm_view"]
        assert services.db.columns_of(tx, []) == {}


# The runner's batches and position reads are pipelined transactions (PostgreSQL; plain ones
# on SQLite): BEGIN, statements and COMMIT synced once (docs/performance.md, P5).

def make_table(services) -> None:
    with services.db.transaction() as tx:
        tx.execute("CREATE TABLE IF NOT EXISTS pipelined (k TEXT PRIMARY KEY, v INTEGER)")


def value_of(services, key: str) -> int | None:
    row = services.db.one("SELECT v FROM pipelined WHERE k = ?", (key,))
    return None if row is None else row["v"]


def test_a_failed_pipelined_transaction_commits_nothing_and_the_next_ones_work(services):
    make_table(services)
    for i in range(8):  # past psycopg's prepare threshold (5)
        with services.db.transaction(pipeline=True, durable=False) as tx:
            tx.execute("INSERT INTO pipelined (k, v) VALUES (?, ?)", (f"k{i}", i))
    with pytest.raises(Exception, match="(?i)unique|duplicate"):
        with services.db.transaction(pipeline=True, durable=False) as tx:
            tx.execute("INSERT INTO pipelined (k, v) VALUES (?, ?)", ("new", 100))
            tx.execute("INSERT INTO pipelined (k, v) VALUES (?, ?)", ("k0", 100))
            tx.execute("UPDATE pipelined SET v = ? WHERE k = ?", (100, "k1"))
    assert (value_of(services, "new"), value_of(services, "k1")) == (None, 1)
    for i in range(8, 16):
        with services.db.transaction(pipeline=True, durable=False) as tx:
            tx.execute("INSERT INTO pipelined (k, v) VALUES (?, ?)", (f"k{i}", i))
            tx.execute("UPDATE pipelined SET v = ? WHERE k = ?", (i, "k1"))
    assert value_of(services, "k1") == 15


def test_a_write_in_a_pipelined_transaction_that_does_not_commit_is_not_kept(services):
    make_table(services)
    try:
        with services.db.transaction(commit=False, pipeline=True) as tx:
            tx.execute("INSERT INTO pipelined (k, v) VALUES (?, ?)", ("kept?", 1))
    except Exception as error:  # PostgreSQL: the transaction is READ ONLY
        assert "read-only" in str(error)
    assert value_of(services, "kept?") is None


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # a SQLite setting
def test_a_connections_own_synchronous_level_is_read_once_and_restored_after_each_batch(
    services,
):
    from projections.db import _synchronous

    sent: list[str] = []
    with services.app.recorder.datastore.get_connection(commit=True) as conn:
        conn._sqlite_conn.set_trace_callback(sent.append)
        try:
            for _ in range(3):
                with _synchronous(conn, durable=False):
                    pass
        finally:
            conn._sqlite_conn.set_trace_callback(None)
    level = synchronous_level(services)
    reads = [statement for statement in sent if statement == "PRAGMA synchronous"]
    assert len(reads) <= 1  # none when an earlier batch on this connection read it
    assert [statement for statement in sent if statement not in reads] == [
        "PRAGMA synchronous = NORMAL", f"PRAGMA synchronous = {level}"] * 3
