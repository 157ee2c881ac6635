"""What orders an agent's report against a job's step (domain/vm_reports.py): the node's
sequence number a step's answer was as of (``NodeObserved``), and a report's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from eventsourcing.domain import Snapshot
from eventsourcing.utils import get_topic

from domain.states import VmState
from domain.vm import Vm
from tests.builders import cause, recorded, vm_in


def test_a_step_records_the_nodes_number_once_and_only_a_newer_one_after_it():
    vm = vm_in(VmState.RUNNING)
    recorded(vm)
    assert vm.node_seen is None
    assert vm.record_node_seen("s1", 7, cause=cause())
    assert not vm.record_node_seen("s1", 7, cause=cause())  # that one is recorded
    assert not vm.record_node_seen("s1", 5, cause=cause())  # an older one says nothing new
    assert recorded(vm) == ["NodeObserved"]
    assert vm.node_seen["server_uuid"] == "s1" and vm.node_seen["seq"] == 7
    assert vm.record_node_seen("s2", 3, cause=cause())  # another node numbers its own
    assert vm.node_seen["server_uuid"] == "s2" and vm.node_seen["seq"] == 3


def test_a_report_not_newer_than_the_recorded_step_of_that_node_is_older_than_the_log():
    vm = vm_in(VmState.RUNNING)
    assert not vm.is_older_than_recorded("s1", 4)  # nothing recorded: unordered, applied
    vm.record_node_seen("s1", 7, cause=cause())
    assert vm.is_older_than_recorded("s1", 6)
    assert vm.is_older_than_recorded("s1", 7)  # as of the step itself: it shows the same
    assert not vm.is_older_than_recorded("s1", 8)
    assert not vm.is_older_than_recorded("s1", None)  # an unnumbered report: as before
    assert not vm.is_older_than_recorded("s2", 1)  # another node's numbers are not these


def test_a_snapshot_taken_before_version_3_knows_no_step_of_any_node():
    vm = vm_in(VmState.RUNNING)
    state = Snapshot.take(vm).state
    del state["node_seen"]
    state["class_version"] = 2
    thawed = Snapshot(originator_id=vm.id, originator_version=vm.version,
                      timestamp=vm.modified_on, topic=get_topic(Vm), state=state).mutate(None)
    assert thawed.node_seen is None and not thawed.is_older_than_recorded("s1", 1)


def test_a_generationless_report_is_remembered_with_what_it_changed_or_as_seen_by_its_server():
    vm = vm_in(VmState.RUNNING)
    recorded(vm)
    later = datetime(2026, 1, 1, 0, 30, tzinfo=UTC)
    # another server's, or a state nothing is recorded of: it changed nothing, no mark moved
    assert not vm.record_report(later, cause=cause(), observed=False)
    assert recorded(vm) == [] and not vm.is_stale_report(later - timedelta(minutes=1))
    # the VM's own server saw it as the log has it: the mark orders its later reports
    assert vm.record_report(later, cause=cause(), observed=True)
    assert recorded(vm) == ["AgentReported"] and vm.is_stale_report(later)
    even_later = later + timedelta(minutes=1)
    vm.record_stopped(cause=cause())
    assert vm.record_report(even_later, cause=cause(), observed=False)
    assert recorded(vm) == ["Stopped", "AgentReported"]
    assert vm.is_stale_report(even_later)
