"""One ``vmledger rebuild`` at a time on a database (service/rebuild_lock.py): a second one
started meanwhile ends at once in one line, status 1, and the first is unharmed. Found by a
tester on PostgreSQL: of two at once, one ended in ``ProgrammingError: relation
"vm_view__rebuild" does not exist`` and the other reported every event applied twice."""

from __future__ import annotations

import re
import subprocess

import pytest

from domain.vm import make_cause
from service.commands.application import VmSpec
from service.rebuild_lock import one_rebuild_at_a_time
from tests.cli import VMLEDGER, environment, vmledger

# real rebuild processes started together (.ci/slow.sh), left out of the default run
pytestmark = pytest.mark.slow

OWNER = "930896af-bf8c-48d4-885c-6573a94b1853"
REFUSED = "vmledger rebuild: another rebuild is running on this database"
APPLIED = re.compile(r"^rebuilt .*: (\d+) events applied in all", re.MULTILINE)


@pytest.fixture
def log_of_vms(services) -> None:
    """A log of a hundred VMs (two events each), every read model caught up."""
    for _ in range(100):
        services.commands.create_vm(VmSpec(owner_uuid=OWNER, brand="joyent", ram=256),
                                    cause=make_cause())
    services.projections.catch_up()


def _applied(done: subprocess.CompletedProcess[str]) -> int:
    assert done.returncode == 0, done.stdout + done.stderr
    return int(APPLIED.search(done.stdout)[1])


def test_a_rebuild_started_while_another_runs_ends_in_one_line(settings, log_of_vms) -> None:
    with one_rebuild_at_a_time(settings):  # as a rebuild running in another process holds it
        refused = vmledger("rebuild", database_url=settings.database_url)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "Traceback" not in refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith(REFUSED) and line.endswith(
        "run one at a time; the live read models are as they were"), line
    assert _applied(vmledger("rebuild", database_url=settings.database_url)) > 0


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_two_rebuilds_racing_on_postgres_never_share_the_shadow_tables(
        settings, log_of_vms) -> None:
    alone = _applied(vmledger("rebuild", database_url=settings.database_url))
    for _ in range(3):
        racing = [subprocess.Popen([VMLEDGER, "rebuild"], text=True, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE,
                                   env=environment(database_url=settings.database_url))
                  for _ in range(2)]
        # communicate reads both pipes while it waits (a wait first could block on a full one)
        outcomes = [(process.returncode, stdout, stderr) for process in racing
                    for stdout, stderr in [process.communicate(timeout=120)]]
        for status, stdout, stderr in outcomes:
            assert "Traceback" not in stderr, stderr
            done = subprocess.CompletedProcess([], status, stdout, stderr)
            if status == 0:  # the one that ran (or both, one after the other): not twice
                assert _applied(done) == alone, stdout
            else:
                assert stderr.strip().splitlines()[-1].startswith(REFUSED), stderr
        assert 0 in [status for status, _, _ in outcomes]
