"""The library's own recorder contract (``eventsourcing.tests.persistence``, shipped with
eventsourcing 9.5) run against every recorder vmledger writes or subclasses, on SQLite and on
PostgreSQL, so the group commit's ``insert_batch`` keeps every promise of ``insert_events``
(ids, order, conflicts, no interleaving of concurrent writers' ids). On PostgreSQL the ledger
recorder's ``insert_events`` is itself a batch of one append; on SQLite it is the library's,
so the SQLite recorder is also run with every insert sent through ``insert_batch``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from eventsourcing.persistence import IntegrityError, StoredEvent
from eventsourcing.postgres import PostgresDatastore
from eventsourcing.sqlite import SQLiteDatastore
from eventsourcing.tests.persistence import (
    ApplicationRecorderTestCase,
    NonInterleavingNotificationIDsBaseCase,
)

from service.storage import PostgresLedgerRecorder, SQLiteLedgerRecorder
from tests.conftest import _empty_schema


class _ThroughBatch:
    """``insert_events`` as a group commit of one append."""

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any
                      ) -> Sequence[int] | None:
        [outcome] = self.insert_batch([(stored_events, kwargs)])  # type: ignore[attr-defined]
        if isinstance(outcome, IntegrityError):
            raise outcome
        return outcome


class BatchedSQLiteRecorder(_ThroughBatch, SQLiteLedgerRecorder):
    pass


class _SQLite:
    recorder_class: type = SQLiteLedgerRecorder

    @pytest.fixture(autouse=True)
    def _database(self, tmp_path):
        self.db_path = str(tmp_path / "contract.db")

    def create_recorder(self):
        recorder = self.recorder_class(SQLiteDatastore(self.db_path))
        recorder.create_table()
        return recorder


class _Postgres:
    recorder_class: type = PostgresLedgerRecorder
    EXPECT_CONTIGUOUS_NOTIFICATION_IDS = False  # a failed insert consumes sequence values

    @pytest.fixture(autouse=True)
    def _database(self, postgres_url):
        from urllib.parse import urlsplit

        _empty_schema(postgres_url)
        self.parts = urlsplit(postgres_url)
        yield
        _empty_schema(postgres_url)  # the next tests' services must not read these events

    def create_recorder(self):
        p = self.parts
        datastore = PostgresDatastore(p.path.lstrip("/"), p.hostname, p.port or 5432,
                                      p.username or "postgres", p.password or "",
                                      pool_size=12, max_overflow=4, lock_timeout=10)
        recorder = self.recorder_class(datastore, events_table_name="vmledger_events")
        recorder.create_table()
        return recorder


class _Contract(ApplicationRecorderTestCase):
    __test__ = False


class TestSQLiteLedgerRecorder(_SQLite, _Contract):
    __test__ = True


class TestSQLiteLedgerRecorderThroughBatch(_SQLite, _Contract):
    __test__ = True
    recorder_class = BatchedSQLiteRecorder


@pytest.mark.postgres
class TestPostgresLedgerRecorder(_Postgres, _Contract):
    __test__ = True


@pytest.mark.postgres
class TestPostgresNonInterleaving(_Postgres, NonInterleavingNotificationIDsBaseCase):
    pass


class TestSQLiteNonInterleavingThroughBatch(_SQLite, NonInterleavingNotificationIDsBaseCase):
    recorder_class = BatchedSQLiteRecorder
