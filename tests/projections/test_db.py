"""The read models' transactions: a non-durable one on SQLite syncs less only while it runs."""

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
