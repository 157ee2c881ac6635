"""Connections cut while the database stays up (``pg_terminate_backend``): the pool's idle
connections are all dead then, and each used to fail its next request once with a 503
("terminating connection due to administrator command") for tens of seconds. Every route's
first request after the cut is answered as if nothing happened (docs/jobs.md, "Outages")."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import psycopg
import pytest

from tests.api.helpers import vm_body
from tests.conftest import ADMIN_URL
from tests.waiting import wait_until

# an outage run (.ci/slow.sh), left out of the default run
pytestmark = pytest.mark.slow

READS = ["/vms/{vm}/history", "/vms/{vm}", "/vms", "/ping", "/jobs", "/servers",
         "/stats/states"]


def cut_connections(dbname: str) -> None:
    """Terminate every backend of ``dbname`` but the admin's, and wait until each has gone
    (its end of the connection is then closed: what a pooled connection meets next)."""
    with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
        pids = [row[0] for row in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (dbname,)).fetchall()]
        assert pids, "no connection to cut"
        conn.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
        wait_until(lambda: not conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)).fetchone()[0],
            "the terminated backends to exit", timeout=10)


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_every_route_answers_its_first_requests_after_the_connections_are_cut(
        client, database_url):
    dbname = urlsplit(database_url).path[1:]
    vm = client.post("/vms", json=vm_body()).json()["vm_uuid"]
    paths = [path.format(vm=vm) for path in READS]

    def fill_the_pool() -> None:  # several idle pooled connections, as under load
        with ThreadPoolExecutor(8) as pool:
            assert {r.status_code for r in pool.map(client.get, paths * 6)} == {200}

    for path in paths:
        fill_the_pool()
        cut_connections(dbname)
        statuses = [client.get(path).status_code for _ in range(25)]
        assert statuses == [200] * 25, path
    fill_the_pool()
    cut_connections(dbname)
    statuses = [client.post("/vms", json=vm_body()).status_code for _ in range(10)]
    assert statuses == [202] * 10
