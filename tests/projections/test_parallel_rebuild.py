"""A rebuild split over processes: the same rows as a serial rebuild, switched only once every
process has built its read models; a failing process fails the rebuild and nothing is
switched; the CLI's progress bar still counts the log's events."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from typer.testing import CliRunner

from projections.parallel_rebuild import RebuildFailed, split
from projections.rebuild import SUFFIX
from projections.vm_view import VmView
from service.cli.app import cli
from projections.runner import ProjectionRunner
from service.container import RebuildRunner
from service.settings import Settings
from tests.builders import a_mix_of_commands_and_jobs, cause, read_model_tables
from tests.projections.test_rebuild import provisioned_vms


def a_varied_log(services) -> None:
    """Commands, jobs, failures and claims on several servers, in the log and applied."""
    vms = a_mix_of_commands_and_jobs(services)
    services.commands.record_failure(vms[1], "crashed", "guest died", cause=cause())
    provisioned_vms(services, 30)
    services.projections.catch_up()


def test_two_read_model_groups_of_about_equal_weight_vm_view_alone(services):
    groups = split(list(services.projections.read_models.values()), 2)
    assert [[rm.name for rm in group] for group in groups] == [
        ["vm_view"], ["job_view", "server_view", "analytics", "volume_mounts", "network_view"]]
    assert len(split(list(services.projections.read_models.values()), 1)) == 1


@pytest.mark.parametrize("batch_size", [7, 10_000])
def test_a_parallel_rebuild_gives_the_serial_rebuilds_tables_row_for_row(services, batch_size):
    a_varied_log(services)
    runner = services.projections
    runner.rebuild_batch_size = batch_size
    runner.rebuild_processes = 1
    serial_total = runner.rebuild()
    serial = read_model_tables(services, tracking=True)
    assert serial["vm_view"] and serial["server_view_claims"] and serial["vm_transitions"]
    runner.rebuild_processes = 2
    moved: list[int] = []
    assert runner.rebuild(progress=moved.append) == serial_total
    assert read_model_tables(services, tracking=True) == serial
    assert sum(moved) == services.commands.head_position()


@dataclass(frozen=True)
class FailingRunner:
    """A rebuild process's runner whose ``job_view`` fails after its first batch: by raising,
    or by ending the process with no word (``exit``)."""

    settings: Settings
    exit: bool

    @contextlib.contextmanager
    def __call__(self) -> Iterator[object]:
        with RebuildRunner(self.settings)() as runner:
            # the class's, in the child process only: the shadow is a copy of the live instance
            view = type(runner.read_models["job_view"])
            real_write, batches = view.write, []

            def write_then_fail(self_, tx, events, stored):
                real_write(self_, tx, events, stored)
                batches.append(len(events))
                if len(batches) > 1:
                    if self.exit:
                        os._exit(3)
                    raise RuntimeError("job_view failed in its process")

            view.write = write_then_fail
            yield runner


@pytest.mark.parametrize("exits", [False, True], ids=["raises", "exits"])
def test_a_failing_process_fails_the_rebuild_and_nothing_is_switched(services, exits):
    a_varied_log(services)
    runner = services.projections
    live = read_model_tables(services, tracking=True)
    runner.rebuild_batch_size = 20
    runner.rebuild_processes = 2
    runner.open_runner = FailingRunner(services.settings, exit=exits)
    with pytest.raises(RebuildFailed, match="exit code 3" if exits else
                       "job_view failed in its process"):
        runner.rebuild()
    assert read_model_tables(services, tracking=True) == live  # vm_view's build was stopped, and not switched
    # the shadows left beside are dropped by the next rebuild
    runner.open_runner = RebuildRunner(services.settings)
    runner.rebuild()
    assert read_model_tables(services, tracking=True) == live
    assert runner.position("job_view" + SUFFIX) == runner.position("vm_view" + SUFFIX) == 0


def test_the_rebuild_command_in_two_processes_counts_every_event_of_the_log(
        services, database_url, monkeypatch):
    a_varied_log(services)
    live = read_model_tables(services, tracking=True)
    events = len(services.app.recorder.select_notifications(0, 100_000))
    monkeypatch.setenv("VMLEDGER_DATABASE_URL", database_url)
    monkeypatch.setenv("VMLEDGER_SIM_SERVERS", str(services.settings.sim_servers))
    result = CliRunner().invoke(cli, ["rebuild", "--processes", "2"])
    assert result.exit_code == 0, result.output
    assert (f"(6 read models), {events} events in the log read by the build; what was "
            "appended meanwhile applied at the switch") in result.output
    assert read_model_tables(services, tracking=True) == live


def test_a_failure_in_the_rebuilding_process_stops_its_child_and_nothing_is_switched(
        services, monkeypatch):
    a_varied_log(services)
    runner = services.projections
    live = read_model_tables(services, tracking=True)
    runner.rebuild_batch_size = 20
    runner.rebuild_processes = 2
    real_write, batches = VmView.write, []

    def write_then_fail(self, tx, events, stored):  # this process's vm_view only
        real_write(self, tx, events, stored)
        batches.append(len(events))
        if len(batches) > 1:
            raise RuntimeError("vm_view failed in the rebuilding process")

    monkeypatch.setattr(VmView, "write", write_then_fail)
    with pytest.raises(RuntimeError, match="vm_view failed"):
        runner.rebuild()
    assert multiprocessing.active_children() == []  # the child was stopped and waited for
    assert read_model_tables(services, tracking=True) == live


def test_the_rebuild_command_says_a_failed_process_in_one_line(services, database_url,
                                                               monkeypatch):
    # left by a builder: a child process's failure (its traceback as text) reached the
    # command line as a traceback of the parent's
    def failing(self, *args, **kwargs):
        raise RebuildFailed("rebuilding job_view, analytics failed:\nTraceback (most recent "
                            "call last):\n  File ...\nLookupError: job_view has no row")

    monkeypatch.setattr(ProjectionRunner, "rebuild", failing)
    monkeypatch.setenv("VMLEDGER_DATABASE_URL", database_url)
    result = CliRunner().invoke(cli, ["rebuild", "--processes", "2"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == (
        "vmledger rebuild: rebuilding job_view, analytics failed: LookupError: job_view has "
        "no row; nothing was switched (the live read models are as they were)")
    assert isinstance(result.exception, SystemExit)  # said, not raised
