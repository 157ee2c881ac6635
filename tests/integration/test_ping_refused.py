"""A real PostgreSQL refusing the service's database (``ALLOW_CONNECTIONS false``, every
connection cut): ``/ping`` and a read answer 503 saying the server's own ``FATAL`` line, as
the log does, and never the password the service connects with (operator tester: they said
only ``OperationalError``)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.container import Services
from service.settings import Settings
from tests.api.conformance import conforming
from tests.api.helpers import assert_error
from tests.conftest import _empty_schema
from tests.integration.outages import database_refused

# an outage run (.ci/slow.sh), left out of the default run
pytestmark = [pytest.mark.postgres, pytest.mark.slow]

REFUSAL = "is not currently accepting connections"


def _with_password(url: str) -> tuple[str, str]:
    """``url`` and its password: the one it has, else one added (a server that trusts the
    test's role ignores it), so that the test can look for it in every answer."""
    parts = urlsplit(url)
    if parts.password:
        return url, parts.password
    password = "Pw-never-shown-42"
    host = parts.netloc.rsplit("@", 1)[-1]
    user = parts.username or "postgres"
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}")), password


def test_a_refusing_database_is_named_by_its_cause_in_every_503(postgres_url) -> None:
    _empty_schema(postgres_url)
    url, password = _with_password(postgres_url)
    # a probe that waits out the pool and the retry (about 2 s) rather than "no answer"
    settings = Settings(database_url=url, sim_servers=1, ping_timeout_s=15.0)
    services = Services.build(settings)
    services.projections.catch_up()  # the fleet's servers: no read model behind the log
    try:
        with conforming(TestClient(create_app(services=services, background=False))) as http:
            assert http.get("/ping").status_code == 200
            with database_refused(urlsplit(postgres_url).path.lstrip("/")):
                ping, read = http.get("/ping"), http.get("/vms")
            assert http.get("/ping").status_code == 200  # back by itself
    finally:
        services.close()
    body = assert_error(ping, 503, "Unavailable")
    assert body["message"].startswith("database unreachable: couldn't get a connection")
    assert REFUSAL in body["message"] and "FATAL: database" in body["message"]
    assert body["pingErrors"] == {"database": body["message"]}
    assert REFUSAL in assert_error(read, 503, "Unavailable")["message"]
    for answer in (ping, read):
        assert password not in answer.text and "\n" not in answer.json()["message"]
