"""A rebuild of a read model whose tracking position is past the log's head (tester, bug 1):
the switch caught the shadow up to the live position, found no event after the head and
ended in ``LookupError``, so ``vmledger rebuild NAME``, the documented fix, failed. Now the
shadow catches up only as far as the log goes, the past-head position is discarded, and the
read model runs again."""

from __future__ import annotations

import logging

import pytest
from typer.testing import CliRunner

from domain.states import Action
from projections import rebuild
from projections.rebuild import build_beside, switch_all
from service.audit.read_models import verify_read_models
from service.cli.app import cli
from tests.builders import a_mix_of_commands_and_jobs, act, create, settle
from tests.integration.test_audit_exact import _push_past_head


def _runs_again(services, name: str) -> None:
    """Read model ``name`` applies what is appended next, and agrees with a fresh fold."""
    runner = services.projections
    create(services, alias="after-the-rebuild")
    runner.catch_up()
    assert runner.position(name) == runner.head()
    assert verify_read_models(services) == []


@pytest.mark.parametrize("names, processes", [(["job_view"], 1), (None, 1), (None, 2)],
                         ids=["job_view", "all", "all-in-2-processes"])
def test_a_read_model_past_the_head_is_rebuilt_up_to_the_head_and_runs_again(
        services, names, processes, caplog):
    a_mix_of_commands_and_jobs(services)
    runner = services.projections
    position, head = _push_past_head(services, "job_view", by=500)
    runner.catch_up()  # the runner refuses it (projections.past_head)
    assert runner.past_head.refused == {"job_view": position}
    runner.rebuild_processes = processes
    with caplog.at_level(logging.WARNING, logger="vmledger.projections.rebuild"):
        runner.rebuild(names)
    assert runner.positions() == dict.fromkeys(runner.read_models, head)
    assert [r.getMessage() for r in caplog.records if r.name.endswith(".rebuild")] == [
        f"read model job_view was at position {position}, past the log's head {head}: "
        f"switched at position {head}, the last event the log holds up to it; the position "
        f"it was at is discarded"]
    _runs_again(services, "job_view")


def test_the_switch_applies_what_the_log_holds_up_to_a_live_position_past_the_head(services):
    # events appended between the build and the switch: the shadow of a read model past the
    # head applies them and stops at the head; the others catch up to their live position
    vms = a_mix_of_commands_and_jobs(services)
    runner = services.projections
    lives = [runner.read_models[name] for name in ("vm_view", "job_view", "analytics")]
    position, head = _push_past_head(services, "job_view", by=500)
    build_beside(runner, lives)
    act(services, vms[0], Action.STOP, version=1)
    settle(services)
    runner.catch_up()
    later = runner.head()
    assert head < later < position
    assert runner.position("job_view") == position and runner.position("vm_view") == later

    applied = switch_all(runner, lives)

    assert applied == 3 * (later - head)
    assert runner.positions() == dict.fromkeys(runner.read_models, later)
    assert verify_read_models(services) == []
    _runs_again(services, "job_view")


def test_the_rebuild_command_mends_a_read_model_past_the_head(services, database_url,
                                                              monkeypatch):
    a_mix_of_commands_and_jobs(services)
    monkeypatch.setenv("VMLEDGER_DATABASE_URL", database_url)
    monkeypatch.setenv("VMLEDGER_SIM_SERVERS", str(services.settings.sim_servers))
    position, _ = _push_past_head(services, "job_view", by=500)
    services.projections.catch_up()  # this runner, a `project` process's, refuses it
    assert services.projections.past_head.refused == {"job_view": position}
    found = CliRunner().invoke(cli, ["audit", "verify"])
    assert found.exit_code == 1 and "past the log's head" in found.output, found.output
    rebuilt = CliRunner().invoke(cli, ["rebuild", "job_view"])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert "rebuilt job_view:" in rebuilt.output
    verified = CliRunner().invoke(cli, ["audit", "verify"])
    assert verified.exit_code == 0, verified.output
    _runs_again(services, "job_view")  # the runner that refused it, not restarted


def test_a_switch_that_fails_logs_no_position_discarded(services, monkeypatch, caplog):
    # the warning says the switch happened: it is logged once the switch is committed, so a
    # switch rolled back (here, naming the indexes fails) logs none and discards nothing
    a_mix_of_commands_and_jobs(services)
    runner = services.projections
    live = runner.read_models["job_view"]
    position, _ = _push_past_head(services, "job_view", by=500)
    build_beside(runner, [live])

    def fails(*args, **kwargs):
        raise RuntimeError("the switch failed")

    monkeypatch.setattr(rebuild, "_name_indexes", fails)
    with caplog.at_level(logging.WARNING, logger="vmledger.projections.rebuild"), \
            pytest.raises(RuntimeError):
        switch_all(runner, [live])
    assert [r for r in caplog.records if r.name.endswith(".rebuild")] == []
    assert runner.position("job_view") == position
