"""``vmledger replay``: the Google 2011 trace drives the service's own command handlers.

The end-to-end test replays a slice of whole jobs from the real shard on each backend and checks
the outcome three ways: against a small fold of the trace written here (not the service's
code), against the ``vm_view`` read model, and against a rebuild of every read model (all
their tables, row for row). The shorter tests feed made-up rows to the mapping's odd cases.
"""

from __future__ import annotations

import csv
import gzip
from collections import Counter
from pathlib import Path
from uuid import UUID, uuid4

import pytest
from eventsourcing.persistence import IntegrityError

from service.container import Services
from service.audit.history import vm_history
from domain.errors import DomainError
from service.replay.follow import Follower
from service.replay.run import Replayer, Summary, catch_up, replay, replay_and_catch_up
from domain.vm import Vm
from service.replay.commands import ReplayAppendFailedError, ReplayCommands
from service.replay.trace import server_uuid, vm_uuid
from tests.builders import create, event_names, new_vm, read_model_tables
from tests.trace import (
    EVICT, FAIL, FINISH, KILL, LOST, SCHEDULE, SUBMIT, TRACE, UPDATE_PENDING, needs_trace, row,
    write_trace,
)

# Jobs 3,834..3,850 in order of first appearance: 2,089 rows holding every event type the shard
# has (874 SUBMIT, 874 SCHEDULE, 6 EVICT, 9 FAIL, 277 FINISH, 49 KILL), with tasks submitted
# again after an EVICT or a FAIL. The shard's first jobs are nearly all SUBMIT + SCHEDULE.
SKIP_JOBS, MAX_JOBS = 3833, 17



# -- an independent fold of the trace ------------------------------------------------------


def selected_rows(path: Path, skip_jobs: int, max_jobs: int) -> list[list[str]]:
    """The rows of jobs number skip_jobs+1 .. skip_jobs+max_jobs, by first appearance."""
    number: dict[str, int] = {}
    with gzip.open(path, "rt", newline="") as stream:
        return [row for row in csv.reader(stream)
                if skip_jobs <= number.setdefault(row[2], len(number)) < skip_jobs + max_jobs]


def expected_final_states(rows: list[list[str]]) -> tuple[Counter[str], int]:
    """Each VM's final state by the README's table, and how many rows do not fit it.

    A task is a list of VMs; a SUBMIT after FINISH or KILL starts a new one. "restarting" is
    a failed VM submitted again (a start is queued): it counts as failed until a SCHEDULE.
    """
    after = {"1": "running", "2": "failed", "3": "failed", "4": "destroyed",
             "5": "destroyed", "6": "quarantined"}
    alive = {"provisioning", "running", "failed", "restarting"}
    allowed_from = {"1": {"provisioning", "restarting"}, "2": {"running"}, "3": {"running"},
                    "4": {"running"}, "5": alive, "6": alive}
    vms: dict[tuple[str, str], list[str]] = {}
    misfits = 0
    for fields in rows:
        task, event = (fields[2], fields[3]), fields[5]
        states = vms.setdefault(task, [])
        if event == "0" and (not states or states[-1] == "destroyed"):
            states.append("provisioning")
        elif event == "0" and states[-1] == "failed":
            states[-1] = "restarting"
        elif event in after and states and states[-1] in allowed_from[event]:
            states[-1] = after[event]
        else:
            misfits += 1
    finals = (state.replace("restarting", "failed") for states in vms.values() for state in states)
    return Counter(finals), misfits


# -- reading the read models ----------------------------------------------------------------


def view_states(services: Services) -> Counter[str]:
    with services.db.transaction(commit=False) as tx:
        tx.execute("SELECT state, COUNT(*) AS n FROM vm_view GROUP BY state")
        return Counter({row["state"]: int(row["n"]) for row in tx.fetchall()})


@needs_trace
def test_replay_of_a_slice_matches_the_trace_and_rebuilds_identically(services: Services):
    # As the CLI runs it: the read models followed by a second process during the replay,
    # then caught up to the head.
    summary = replay_and_catch_up(services, TRACE, skip_jobs=SKIP_JOBS, max_jobs=MAX_JOBS)

    rows = selected_rows(TRACE, SKIP_JOBS, MAX_JOBS)
    states, misfits = expected_final_states(rows)
    assert summary.rows_read == len(rows)
    assert summary.final_states == states
    assert summary.vms_created == sum(states.values())
    assert sum(summary.refused.values()) == misfits
    assert summary.rows_applied == len(rows) - misfits
    # the slice exercises the whole mapping: every event type, restarts after EVICT and FAIL
    assert {row[5] for row in rows} == {"0", "1", "2", "3", "4", "5"}
    starts = services.jobs.list(name="start")
    assert starts and {j["execution"] for j in starts} == {"succeeded"}

    assert view_states(services) == summary.final_states

    live = read_model_tables(services)
    positions = services.projections.positions()
    services.projections.rebuild()
    assert services.projections.positions() == positions
    rebuilt = read_model_tables(services)
    assert rebuilt.keys() == live.keys() and live["vm_view"] and live["job_view"]
    for table, rows in live.items():
        assert rebuilt[table] == rows, table


# -- the mapping's odd rows -----------------------------------------------------------------


def feed(services: Services, *rows: list[str]) -> Replayer:
    replayer = Replayer(ReplayCommands(services.commands), Summary(trace="test"))
    for line, fields in enumerate(rows, start=1):
        replayer.apply(line, fields)
    replayer.commit_all()  # as replay() does: every append committed
    return replayer


def test_submit_then_schedule_runs_the_vm_on_the_machine_with_the_requests_scaled(services):
    replayer = feed(services, row(SUBMIT), row(SCHEDULE, machine="42"))
    vm = services.commands.load(vm_uuid("7", "0", 0))
    assert (vm.state, vm.server_uuid) == ("running", server_uuid("42"))
    assert (vm.ram, vm.cpu_cap) == (4096, 800)  # 1.0 = 65,536 MiB and 64 CPUs
    assert replayer.summary.rows_applied == 2


def test_evict_of_a_vm_that_is_not_running_is_refused_and_counted(services):
    replayer = feed(services, row(SUBMIT), row(EVICT))
    assert replayer.summary.refused == {"EVICT of a provisioning VM": 1}
    assert replayer.summary.rows_applied == 1
    assert services.commands.load(vm_uuid("7", "0", 0)).state == "provisioning"


def test_submit_after_finish_creates_a_new_vm(services):
    replayer = feed(services, row(SUBMIT), row(SCHEDULE, machine="1"), row(FINISH),
                    row(SUBMIT))
    first = services.commands.load(vm_uuid("7", "0", 0))
    second = services.commands.load(vm_uuid("7", "0", 1))
    assert (first.state, second.state) == ("destroyed", "provisioning")
    assert replayer.summary.vms_created == 2
    assert replayer.final_states() == {"destroyed": 1, "provisioning": 1}


def test_kill_during_provisioning_ends_destroyed_without_a_server(services):
    feed(services, row(SUBMIT), row(KILL))
    vm = services.commands.load(vm_uuid("7", "0", 0))
    assert (vm.state, vm.server_uuid, vm.active_jobs) == ("destroyed", None, [])
    services.projections.catch_up()
    jobs = {j["name"]: j for j in services.jobs.list(vm_uuid=str(vm.id))}
    assert jobs["provision"]["execution"] == "canceled"
    assert jobs["destroy"]["execution"] == "succeeded"
    queued_by = [e["cause"]["request_id"] for e in vm_history(services.commands, str(vm.id))
                 if e["type"] == "JobQueued"]
    assert queued_by == ["trace-row-1-SUBMIT", "trace-row-2-KILL"]


def test_each_event_names_the_trace_row_or_the_job_that_wrote_it(services):
    """docs/replay.md, "Causes": the replay's own events name their row, a job's events the
    job (and no row); no VM event names a SCHEDULE row (a tester read "each event's cause
    names its row")."""
    feed(services, row(SUBMIT), row(SCHEDULE, machine="1"), row(EVICT), row(SUBMIT),
         row(SCHEDULE, machine="2"), row(FINISH))
    by_row: dict[str, list[str]] = {}
    for event in vm_history(services.commands, str(vm_uuid("7", "0", 0))):
        cause = event["cause"]
        if cause["actor"] == "worker:replay":
            assert cause.get("request_id") is None and cause["job_uuid"], event
        else:
            assert cause["actor"] == "trace:google2011" and not cause.get("job_uuid"), event
            by_row.setdefault(cause["request_id"], []).append(event["type"])
    assert by_row == {"trace-row-1-SUBMIT": ["Created", "JobQueued"],
                      "trace-row-3-EVICT": ["CapacityReleased", "Failed"],
                      "trace-row-4-SUBMIT": ["JobQueued"],
                      "trace-row-6-FINISH": ["JobQueued"]}
    # a SCHEDULE row is named only by its machine's registration, on the server's stream
    [registered] = services.app.recorder.select_events(UUID(server_uuid("2")), limit=1)
    assert registered.topic == "server.registered"
    assert services.app.mapper.to_domain_event(registered).cause["request_id"] == (
        "trace-row-5-SCHEDULE")


def test_evicted_vm_resubmitted_restarts_on_the_machine_of_the_next_schedule(services):
    feed(services, row(SUBMIT), row(SCHEDULE, machine="1"), row(EVICT, machine="1"),
         row(SUBMIT), row(SCHEDULE, machine="2"))
    vm = services.commands.load(vm_uuid("7", "0", 0))
    assert (vm.state, vm.desired_state, vm.error) == ("running", "running", None)
    assert vm.server_uuid == server_uuid("2")


def test_kill_of_an_evicted_vm_waiting_for_a_machine_fails_the_start_and_destroys_it(services):
    feed(services, row(SUBMIT), row(SCHEDULE, machine="1"), row(EVICT), row(SUBMIT), row(KILL))
    vm = services.commands.load(vm_uuid("7", "0", 0))
    assert (vm.state, vm.active_jobs) == ("destroyed", [])
    services.projections.catch_up()
    jobs = {j["name"]: j["execution"] for j in services.jobs.list(vm_uuid=str(vm.id))}
    assert jobs == {"provision": "succeeded", "start": "failed", "destroy": "succeeded"}


def test_evict_and_fail_leave_the_vm_failed_and_still_wanted_running(services):
    feed(services, row(SUBMIT), row(SCHEDULE, machine="1"), row(FAIL),
         row(SUBMIT, index="1"), row(SCHEDULE, index="1", machine="1"), row(EVICT, index="1"))
    crashed = services.commands.load(vm_uuid("7", "0", 0))
    evicted = services.commands.load(vm_uuid("7", "1", 0))
    assert (crashed.state, crashed.desired_state, crashed.error["reason"]) == (
        "failed", "running", "crashed")
    assert (evicted.state, evicted.error["reason"]) == ("failed", "evicted")


def test_lost_quarantines_the_vm_and_cancels_its_queued_start(services):
    feed(services, row(SUBMIT), row(SCHEDULE, machine="1"), row(EVICT), row(SUBMIT), row(LOST))
    vm = services.commands.load(vm_uuid("7", "0", 0))
    assert (vm.state, vm.quarantine["reason"], vm.active_jobs) == ("quarantined", "lost", [])


def test_kill_destroys_a_vm_the_live_service_would_call_stuck(services):
    # A replay squeezes or stretches time: the wall-clock stuck-VM rule (a DELETE of a VM
    # provisioning for an hour quarantines it) must not decide what a KILL does.
    services.commands.is_stuck = lambda _vm: "stuck in provisioning (as if for hours)"
    feed(services, row(SUBMIT), row(KILL))
    assert services.commands.load(vm_uuid("7", "0", 0)).state == "destroyed"


def test_rows_that_do_not_fit_are_counted_never_raised(services):
    replayer = feed(
        services,
        row(SCHEDULE, machine="1"),  # unknown task
        row(SUBMIT), row(SUBMIT),  # already pending
        row(SCHEDULE),  # no machine
        row(UPDATE_PENDING),  # ignored by decision
        ["garbage"],
        row(SCHEDULE, machine="1"), row(SCHEDULE, machine="1"),  # nothing left to run
        row(KILL), row(KILL), row(FINISH),  # the VM is gone
    )
    summary = replayer.summary
    assert summary.refused == {
        "SCHEDULE of an unknown task": 1,
        "SUBMIT of a provisioning VM with a job queued": 1,
        "SCHEDULE without a machine": 1,
        "malformed row": 1,
        "SCHEDULE of a running VM with no job queued": 1,
        "KILL of a destroyed VM": 1,
        "FINISH of a destroyed VM": 1,
    }
    assert summary.ignored == {"UPDATE_PENDING: ram and cpu are not updatable": 1}
    assert summary.rows_applied == 3 and summary.rows_read == 11


def test_replay_refuses_a_database_that_already_has_events(services, tmp_path):
    trace = write_trace(tmp_path / "t.csv", [row(SUBMIT), row(SCHEDULE, machine="1")])
    replay(services, trace)
    with pytest.raises(ValueError, match="already has VMs"):
        replay(services, trace)


def test_replay_refuses_a_database_whose_only_vm_its_agent_found(services, tmp_path):
    # it looked for "vm.created" alone: a VM recorded as Discovered let the replay in
    from fastapi.testclient import TestClient

    from service.api.app import create_app

    found = str(uuid4())
    with TestClient(create_app(services=services, background=False)) as http:
        assert http.put(f"/vms/{found}", json={"uuid": found, "state": "running"}
                        ).status_code == 200
    trace = write_trace(tmp_path / "t.csv", [row(SUBMIT), row(SCHEDULE, machine="1")])
    with pytest.raises(ValueError, match="already has VMs"):
        replay(services, trace)


def test_the_summary_says_how_far_behind_the_read_models_were_when_the_replay_ended(
        services, tmp_path):
    # a slow catch-up was read as costlier read models where the follower had been starved
    # of a core (docs/replay.md): the summary now says how far behind they were left
    trace = write_trace(tmp_path / "t.csv", [row(SUBMIT), row(SCHEDULE, machine="1")])
    summary = replay(services, trace)  # no follower: every read model at its start
    runner = services.projections
    behind = sum(runner.head() - position for position in runner.positions().values())
    assert behind > 0
    catch_up(services, summary)
    assert summary.behind_at_end == behind == summary.as_dict()["behind_at_end"]
    assert set(runner.positions().values()) == {runner.head()}


def test_a_refused_replay_starts_no_follower(services, tmp_path, monkeypatch):
    # found in review: the follower was started before the check, and began catching up
    # the read models of a database the replay then refused
    trace = write_trace(tmp_path / "t.csv", [row(SUBMIT)])
    replay(services, trace)
    started = []
    monkeypatch.setattr(Follower, "start", lambda self: started.append(self))
    with pytest.raises(ValueError, match="already has VMs"):
        replay_and_catch_up(services, trace)
    assert started == []


def test_a_failed_deferred_append_is_raised_as_the_replays_bug_not_as_a_later_commands_conflict(
        services):
    # The replay's saves do not wait: an append that fails (here a stream another writer
    # took first) surfaces at a later save or at the flush. It must stop the replay naming
    # that append, not be taken by the change loop for the later command's own conflict
    # (which retried that command, sending its append twice).
    # The failure is waited for before the later command, so it surfaces at that command's
    # save, the case the change loop mistook: the later append is then never sent. (Without
    # the wait it may surface at the flush instead, after the later append was written once:
    # this test once failed so, under load, when it did not wait.)
    commands = ReplayCommands(services.commands)
    taken = create(services).vm_uuid
    commands.save(new_vm(vm_uuid=UUID(taken)))  # version 1 of a stream that has it: fails
    (failing,) = commands._in_flight
    with pytest.raises(IntegrityError):
        commands.committer.wait_for(failing, timeout=30)
    later = uuid4()
    with pytest.raises(ReplayAppendFailedError):
        commands.change(Vm, later, lambda vm: None, new=lambda: new_vm(vm_uuid=later))
    assert event_names(services, str(later)) == []  # neither sent nor retried
    commands.flush()  # nothing is left in flight


def test_a_change_that_raises_leaves_no_trace_of_its_decision_in_the_replays_cache(services):
    # The cache hands out the aggregate it saved, not a copy; a decision that recorded an
    # event and then refused must not leave that event on it for the next command.
    commands = ReplayCommands(services.commands)
    vm_id = uuid4()
    commands.change(Vm, vm_id, lambda vm: None, new=lambda: new_vm(vm_uuid=vm_id))
    saved = commands.load(vm_id)
    version = saved.version

    def refused(vm: Vm) -> None:
        vm.update_metadata({"alias": "never-saved"}, cause={"actor": "test"})
        raise DomainError("refused after deciding")

    with pytest.raises(DomainError):
        commands.change(Vm, vm_id, refused)
    again = commands.load(vm_id)
    assert again is not saved and (again.version, again.alias) == (version, None)
    commands.change(Vm, vm_id, lambda vm: vm.update_metadata({"alias": "saved"},
                                                             cause={"actor": "test"}))
    commands.flush()
    assert services.commands.load(vm_id).alias == "saved"  # no conflict with itself


def test_a_replay_stopped_during_a_job_says_it_cannot_be_resumed(services, monkeypatch, caplog):
    # tester: an interrupted replay logged "job provision left unfinished: another worker
    # takes it over once its lease expires", though no other worker exists and a replay
    # cannot be resumed
    replayer = Replayer(ReplayCommands(services.commands), Summary(trace="test"))
    replayer.apply(1, row(SUBMIT))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C while the provision's compute call runs

    monkeypatch.setattr(replayer.driver, "ensure_registered", interrupted)
    with pytest.raises(KeyboardInterrupt):
        replayer.apply(2, row(SCHEDULE, machine="42"))
    [warning] = [r.getMessage() for r in caplog.records if "left unfinished" in r.getMessage()]
    assert warning == ("job provision left unfinished: the replay was stopped, and a replay "
                       "cannot be resumed (no other worker runs its jobs)")


class LastPassFollower:
    """A follower that had applied nothing while the replay ran and does all its work in
    its last pass (``finish``), as one starved of a core does."""

    def __init__(self, services: Services):
        self.services, self.applied = services, 0

    def finish(self, while_waiting=None) -> bool:
        self.applied = self.services.projections.catch_up()
        return True


def test_the_events_applied_during_the_replay_leave_out_the_followers_last_pass(
        services, tmp_path):
    # the summary counted the last pass, after the replay had ended, as applied during it:
    # "behind when it ended" plus "applied during the replay" came to twice the log (tester)
    trace = write_trace(tmp_path / "t.csv", [row(SUBMIT), row(SCHEDULE, machine="1")])
    summary = replay(services, trace)
    runner = services.projections
    behind = sum(runner.head() - position for position in runner.positions().values())
    catch_up(services, summary, follower=LastPassFollower(services))
    assert summary.behind_at_end == behind > 0
    assert summary.applied_beside == 0
