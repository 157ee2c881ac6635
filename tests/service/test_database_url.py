"""``VMLEDGER_DATABASE_URL``'s rules (service/database_url.py): a URL is refused when settings
are read, before anything connects, and one accepted means to every user of it what it means
to libpq."""

from __future__ import annotations


import pytest
from pydantic import ValidationError

from service.container import Services
from service.settings import Settings
from tests.cli import vmledger


@pytest.mark.parametrize("url, problem", [
    # found by a tester: no name wrote every table into the postgres maintenance database
    ("postgresql://postgres@127.0.0.1:5432/", "names no database"),
    ("postgresql://postgres@127.0.0.1:5432", "names no database"),
    ("postgres://postgres@127.0.0.1", "names no database"),
    ("postgresql://postgres@127.0.0.1:5432/%20", "names no database"),
    # found by a tester: ValueError's traceback from every command
    ("postgresql://postgres@127.0.0.1:notaport/x", "port must be a number from 1 to 65535"),
    ("postgresql://postgres@127.0.0.1:99999/x", "port must be a number from 1 to 65535"),
    ("postgresql://postgres@127.0.0.1:0/x", "port must be a number from 1 to 65535"),
    ("postgresql://postgres@127.0.0.1:-1/x", "port must be a number from 1 to 65535"),
    ("postgresql://postgres@[::1/x", "cannot be read as a URL"),
    ("postgresql://postgres@::1]/x", "cannot be read as a URL"),
    ("postgresql://postgres@::1/x", "port must be a number"),  # IPv6 without brackets
    ("postgresql://u:pa#ss@127.0.0.1/x", "port must be a number"),  # '#' not encoded
    ("postgresql://u:p@127.0.0.1/x?sslmode=require", "has a query"),
    # found by a tester: accepted, then failed resolving "%2frun%2fpostgresql" as a host
    ("postgresql://%2Frun%2Fpostgresql/db", "a Unix-domain socket"),
    ("postgresql://postgres@%2Ftmp:5432/db", "a Unix-domain socket"),
    ("sqlite:///", "names no file"),
    # found by a tester: accepted, and the service then took writes it never read back
    ("sqlite:///:memory:", "names an in-memory database"),
    ("sqlite:///file::memory:?cache=shared", "names an in-memory database"),
    ("sqlite:///file:x?mode=memory", "names an in-memory database"),
    # found by a tester: a file named "a.db " was made (a leading space was refused)
    ("sqlite:///a.db ", "has spaces before or after it"),
    (" sqlite:///a.db", "has spaces before or after it"),
    ("sqlite:/// a.db", "has spaces around the file's name"),
    ("postgresql://postgres@127.0.0.1:5432/vmledger\t", "has spaces before or after it"),
])
def test_a_malformed_database_url_is_refused_with_what_is_wrong(url: str, problem: str) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(database_url=url)
    [error] = refused.value.errors(include_input=False)
    assert error["loc"] == ("database_url",) and problem in error["msg"]


def test_the_message_never_holds_the_password() -> None:
    for url in ("postgresql://u:hunter2@127.0.0.1:hunter2/x", "postgresql://u:hun#ter2@h/x",
                "postgresql://u:hunter2@h/x?hunter2", "postgresql://u:hunter2@h/"):
        with pytest.raises(ValidationError) as refused:
            Settings(database_url=url)
        messages = str(refused.value.errors(include_input=False, include_url=False))
        assert "hunter2" not in messages and "hun" not in messages


@pytest.mark.parametrize("url, expected", [
    ("postgresql://postgres@127.0.0.1:5432/vmledger",
     ("127.0.0.1", "5432", "postgres", "", "vmledger")),
    ("postgres://app:p%40ss%3Aw%2Fo%23rd@db.example:6543/my%20db",
     ("db.example", "6543", "app", "p@ss:w/o#rd", "my db")),
    ("postgresql://app:p@ss@db.example/v", ("db.example", "5432", "app", "p@ss", "v")),
    ("postgresql://app:s3cr3t!$&'()*+,;=@[::1]:5433/v", ("::1", "5433", "app",
                                                         "s3cr3t!$&'()*+,;=", "v")),
    ("postgresql://127.0.0.1/v", ("127.0.0.1", "5432", "postgres", "", "v")),
])
def test_a_good_url_gives_the_event_store_what_libpq_would_read(url: str, expected) -> None:
    env = Settings(database_url=url).eventsourcing_env()
    assert tuple(env[f"POSTGRES_{name}"] for name in (
        "HOST", "PORT", "USER", "PASSWORD", "DBNAME")) == expected


@pytest.mark.parametrize("url", [
    "sqlite:///:memory:", "sqlite:///a.db ",
    "postgresql://postgres@127.0.0.1:1/",  # port 1: before the fix, nothing was written
    "postgresql://postgres@127.0.0.1:notaport/x", "postgresql://postgres@127.0.0.1:99999/x",
])
def test_every_command_refuses_it_in_one_line_naming_the_setting(tmp_path, url: str) -> None:
    for command in (["work"], ["changes"], ["rebuild", "vm_view"]):
        done = vmledger(*command, database_url=url, cwd=tmp_path, timeout=60)
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.strip().splitlines()
        assert line.startswith("VMLEDGER_DATABASE_URL: ") and "Value error" not in line


@pytest.mark.postgres
def test_libpq_environment_variables_reach_every_connection(postgres_url, monkeypatch) -> None:
    """The URL takes no query, so libpq's other parameters (``sslmode``, ``application_name``,
    ...) come from its ``PG*`` variables: the event store's pool and the read models' must
    both read them (docs/operations.md, ``VMLEDGER_DATABASE_URL``)."""
    monkeypatch.setenv("PGAPPNAME", "vmledger-env-probe")
    built = Services.build(Settings(database_url=postgres_url, sim_servers=1))
    try:
        with built.app.recorder.datastore.get_connection() as conn:
            events_side = conn.execute("SHOW application_name").fetchone()
        read_side = built.db.one("SHOW application_name")
    finally:
        built.close()
    assert list(events_side.values()) == ["vmledger-env-probe"]
    assert list(read_side.values()) == ["vmledger-env-probe"]
