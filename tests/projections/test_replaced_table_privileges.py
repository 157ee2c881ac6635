"""A table made to replace another keeps the replaced table's owner and grants: a rebuild's
switch (serial and parallel), a stale read model's table made again, the simulated fleet's
``sim_fences`` keyed anew (``projections.privileges``). Operator tester: after ``vmledger
rebuild job_view`` as the tables' owner, the app's role had lost SELECT on ``job_view``
(``GET /jobs`` answered a plain-text 500) and a ``work`` process as that role logged
"permission denied for table vm_view" after ``rebuild vm_view``. PostgreSQL only: SQLite has
no grants."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from service.container import RebuildRunner, Services
from service.jobs.compute.fences import carry_per_vm_fences
from service.settings import Settings
from tests.builders import create
from tests.cli import vmledger
from tests.roles import a_role, as_role, owner_of, run_sql, table_acl

pytestmark = pytest.mark.parametrize("database_url", ["postgres"], indirect=True)


@pytest.fixture
def roles(database_url: str) -> Iterator[tuple[str, str]]:
    """The app's role and an auditor's, as docs/operations.md ("Database privileges") has
    them, with more of what an operator may grant: the auditor's SELECT with its grant
    option, UPDATE of one column of ``job_view`` and ``vm_view``, and SELECT on ``job_view``
    to PUBLIC. Granted once the test has made the tables (``grant``)."""
    with a_role(database_url, "app") as app, a_role(database_url, "auditor") as auditor:
        yield app, auditor


def grant(database_url: str, app: str, auditor: str) -> None:
    run_sql(database_url,
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {app}",
            f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {app}",
            f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {auditor} WITH GRANT OPTION",
            f"GRANT UPDATE (uuid) ON job_view, vm_view TO {auditor}",
            "GRANT SELECT ON job_view TO PUBLIC")


def read_model_tables(services: Services) -> list[str]:
    return [table for read_model in services.projections.read_models.values()
            for table in read_model.real_tables()]


def acls(database_url: str, tables: list[str]) -> dict[str, set[tuple]]:
    return {table: table_acl(database_url, table) for table in tables}


@pytest.mark.parametrize("processes", [1, 2], ids=["serial", "parallel"])
def test_a_rebuild_keeps_every_grant_of_the_tables_it_replaces(
        services: Services, database_url: str, roles: tuple[str, str], processes: int) -> None:
    create(services)
    services.projections.catch_up()
    grant(database_url, *roles)
    tables = read_model_tables(services)
    before = acls(database_url, tables)
    assert any(grantee == roles[0] for _grantor, grantee, *_ in before["vm_view"])
    services.projections.rebuild_processes = processes
    services.projections.rebuild()
    assert acls(database_url, tables) == before


def test_the_rebuild_command_leaves_the_app_role_its_access(
        database_url: str, roles: tuple[str, str]) -> None:
    # the tester's steps: tables made by the owner, roles granted, then a rebuild as owner
    Services.build(Settings(database_url=database_url, sim_servers=1)).close()
    grant(database_url, *roles)
    done = vmledger("rebuild", "job_view", database_url=database_url, timeout=60)
    assert done.returncode == 0, done.stderr
    as_app = Services.build(Settings(database_url=as_role(database_url, roles[0])),
                            register_fleet=False)
    try:
        assert as_app.jobs.vms_with_unfinished_jobs() == []  # SELECT on job_view
    finally:
        as_app.close()


def test_a_stale_read_model_made_again_keeps_its_grants(
        services: Services, database_url: str, roles: tuple[str, str]) -> None:
    create(services)
    services.projections.catch_up()
    grant(database_url, *roles)
    # job_view as an older version made it (a column missing), having applied events
    run_sql(database_url, "ALTER TABLE job_view DROP COLUMN vm_uuid CASCADE")
    before = acls(database_url, ["job_view"])
    services.projections.mend_stale_tables()
    assert acls(database_url, ["job_view"]) == before
    with services.db.transaction(commit=False) as tx:
        assert "vm_uuid" in services.db.columns(tx, "job_view")  # made again


def test_the_fleets_fences_keyed_anew_keep_their_grants(
        services: Services, database_url: str, roles: tuple[str, str]) -> None:
    run_sql(database_url, "DROP TABLE sim_fences",
            "CREATE TABLE sim_fences (vm_uuid TEXT PRIMARY KEY, epoch BIGINT NOT NULL, "
            "job_uuid TEXT NOT NULL)")
    grant(database_url, *roles)
    before = acls(database_url, ["sim_fences"])
    assert before["sim_fences"]
    with services.db.transaction() as tx:
        carry_per_vm_fences(services.db, tx)
    assert acls(database_url, ["sim_fences"]) == before


def test_a_rebuild_by_a_member_of_the_owning_role_keeps_that_owner(
        database_url: str, roles: tuple[str, str]) -> None:
    """The tables' owner a group role, the rebuild run by a login role of that group: the
    new table was the login role's, and a rebuild by another member then failed ("must be
    owner of table job_view")."""
    Services.build(Settings(database_url=database_url, sim_servers=1)).close()
    with a_role(database_url, "owners", "NOLOGIN") as owners:
        run_sql(database_url, f"GRANT CREATE ON SCHEMA public TO {owners}",
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "
                f"{owners}", f"ALTER TABLE job_view OWNER TO {owners}")
        grant(database_url, *roles)
        with a_role(database_url, "member", f"LOGIN IN ROLE {owners}") as member:
            before = acls(database_url, ["job_view"])
            with RebuildRunner(Settings(database_url=as_role(database_url, member)))() as runner:
                runner.rebuild(["job_view"])
            assert owner_of(database_url, "job_view") == owners
            assert acls(database_url, ["job_view"]) == before
