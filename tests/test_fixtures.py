"""The PostgreSQL database a test builds its ``services`` on (tests/conftest.py): emptied
rather than dropped when its schema is the one ``Services.build`` creates, it must be built
into the same database as a new one, or tests would run on something else than a new
deployment's database."""

from __future__ import annotations

import psycopg
import pytest

from service.container import Services
from service.settings import Settings
from tests.conftest import _built_schema, _emptied_for_services, _empty_schema, _fingerprint

pytestmark = pytest.mark.postgres


def built(url: str) -> dict[str, object]:
    """Build ``Services`` on ``url`` as the ``services`` fixture does; what it made: the
    schema's fingerprint, each table's rows (their count, and the event log's ids and
    topics), and each sequence's last value."""
    Services.build(Settings(database_url=url, sim_servers=4, sim_server_ram_mib=65_536)).close()
    with psycopg.connect(url) as conn:
        tables = [t for (t,) in conn.execute(
            "SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = 'public' "
            "ORDER BY 1")]
        return {
            "schema": _fingerprint(conn),
            "rows": {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables},
            "log": conn.execute("SELECT notification_id, originator_id::text, topic "
                                "FROM vmledger_events ORDER BY 1").fetchall(),
            "sequences": conn.execute("SELECT sequencename, last_value FROM pg_sequences "
                                      "WHERE schemaname = 'public' ORDER BY 1").fetchall(),
        }


def test_an_emptied_database_builds_into_what_a_new_one_does(postgres_url):
    _empty_schema(postgres_url)
    new = built(postgres_url)
    assert new["log"] and any(new["rows"].values())
    with psycopg.connect(postgres_url) as conn:
        assert _fingerprint(conn) == _built_schema(postgres_url)
    _emptied_for_services(postgres_url)
    with psycopg.connect(postgres_url) as conn:  # emptied, not dropped
        assert _fingerprint(conn) == new["schema"]
        assert conn.execute("SELECT count(*) FROM vmledger_events").fetchone() == (0,)
    assert built(postgres_url) == new


def test_a_schema_a_test_changed_is_dropped_not_emptied(postgres_url):
    _empty_schema(postgres_url)
    built(postgres_url)
    with psycopg.connect(postgres_url) as conn:
        conn.execute("CREATE TABLE left_behind (n int)")
        conn.execute("CREATE INDEX vm_view_extra ON vm_view (uuid)")
    _emptied_for_services(postgres_url)
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM pg_class "
                            "WHERE relnamespace = 'public'::regnamespace").fetchone() == (0,)
