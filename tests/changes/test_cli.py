"""``vmledger changes``: one line per change, filtered; ``--follow`` keeps printing."""

from __future__ import annotations

import threading
from urllib.parse import urlsplit

import pytest
from typer.testing import CliRunner

from service.changes.filters import ChangeFilter
from service.changes.tail import tail
from service.cli.app import cli
from tests.waiting import wait_until
from tests.integration.outages import database_refused
from tests.changes.scenarios import OWNER_A, OWNER_B, create_vm, log_positions


def test_changes_prints_one_line_per_change_with_filters(services, settings, monkeypatch):
    monkeypatch.setenv("VMLEDGER_DATABASE_URL", settings.database_url)
    mine = create_vm(services, OWNER_A)
    create_vm(services, OWNER_B)
    everything = CliRunner().invoke(cli, ["changes"])
    assert everything.exit_code == 0, everything.output
    lines = everything.output.splitlines()
    assert [int(line.split()[0]) for line in lines] == log_positions(services, 0)
    owned = CliRunner().invoke(cli, ["changes", "--owner-uuid", OWNER_A, "--type", "Created"])
    [created] = owned.output.splitlines()
    assert f"vm {mine} v1 Created state=provisioning owner={OWNER_A} actor=test" in created
    later = CliRunner().invoke(cli, ["changes", "--after", str(log_positions(services, 0)[-2])])
    assert len(later.output.splitlines()) == 1


def test_follow_prints_changes_appended_after_it_started(services):
    printed, stop = [], threading.Event()
    start = services.commands.head_position()
    follower = threading.Thread(target=tail, args=(services, start, ChangeFilter()), kwargs={
        "follow": True, "emit": printed.append, "stop": stop}, daemon=True)
    follower.start()
    try:
        vm_uuid = create_vm(services, OWNER_A)
        wait_until(lambda: len(printed) >= 2, "the follower to print the new VM's events")
    finally:
        stop.set()
        follower.join(10)
    assert [c.uuid for c in printed] == [vm_uuid, vm_uuid]
    assert [c.type for c in printed] == ["Created", "JobQueued"]


def test_bad_filters_are_refused_naming_the_option_as_get_changes_refuses_them(
        services, settings, monkeypatch):
    # found by a new user: each printed nothing and exited 0, like a filter matching nothing
    monkeypatch.setenv("VMLEDGER_DATABASE_URL", settings.database_url)
    for option, value in [("--type", "Bogus"), ("--type", "stopped"), ("--type", "VmEvent"),
                          ("--type", "Event"), ("--state", "Stopped"),
                          ("--vm-uuid", "bad"), ("--owner-uuid", "bad"),
                          ("--server-uuid", "bad")]:
        refused = CliRunner().invoke(cli, ["changes", option, value])
        assert refused.exit_code == 2, (option, value, refused.output)
        assert option in refused.output, refused.output


def test_uuids_in_capitals_match_as_get_changes_matches_them(services, settings, monkeypatch):
    monkeypatch.setenv("VMLEDGER_DATABASE_URL", settings.database_url)
    mine = create_vm(services, OWNER_A)
    for option, value in [("--vm-uuid", mine.upper()), ("--owner-uuid", OWNER_A.upper())]:
        found = CliRunner().invoke(cli, ["changes", option, value, "--type", "Created"])
        assert found.exit_code == 0, found.output
        assert len(found.output.splitlines()) == 1, (option, found.output)


def test_positions_get_changes_would_refuse_are_refused_naming_the_option(
        services, settings, monkeypatch):
    # found by a tester: 2**63 died with OverflowError's traceback (SQLite INTEGER), exit 1
    from projections.formats import MAX_INTEGER

    monkeypatch.setenv("VMLEDGER_DATABASE_URL", settings.database_url)
    for value in (str(MAX_INTEGER + 1), str(2**63), "99999999999999999999999", "-1"):
        for follow in ([], ["--follow"]):
            refused = CliRunner().invoke(cli, ["changes", *follow, "--after", value])
            assert refused.exit_code == 2, (value, refused.output)
            assert "'--after'" in refused.output and "Traceback" not in refused.output
    at_most = CliRunner().invoke(cli, ["changes", "--after", str(MAX_INTEGER)])
    assert (at_most.exit_code, at_most.output) == (0, "")


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_follow_outlives_an_outage_resuming_after_the_last_position_it_printed(
        services, database_url, caplog):
    """The connections cut and refused for longer than ``VMLEDGER_DATABASE_RETRY_S``: the
    follower says so once and carries on where it was (before, it died with the error)."""
    dbname = urlsplit(database_url).path[1:]
    printed, stop, died = [], threading.Event(), []
    start = services.commands.head_position()

    def follow() -> None:
        try:
            tail(services, start, ChangeFilter(), follow=True, emit=printed.append, stop=stop)
        except BaseException as error:  # noqa: BLE001 - what the test looks for
            died.append(error)

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    try:
        first = create_vm(services, OWNER_A)
        wait_until(lambda: len(printed) >= 2, "the follower to print the first VM's events")
        with database_refused(dbname):
            wait_until(lambda: died or _retrying(caplog), "the follower to meet the outage")
        assert not died, died
        second = create_vm(services, OWNER_B)
        wait_until(lambda: len(printed) >= 4 or died, "the follower to print the second VM's")
    finally:
        stop.set()
        follower.join(10)
    assert not died, died
    assert [c.position for c in printed] == log_positions(services, start)
    assert [c.uuid for c in printed] == [first, first, second, second]
    assert _retrying(caplog) == [
        f"changes: reading the log after position {printed[1].position} failed"]


def test_a_stop_during_an_outage_ends_follow_at_its_last_position(services, monkeypatch,
                                                                   caplog):
    from eventsourcing.persistence import OperationalError

    from service.changes import tail as tail_module

    start = services.commands.head_position()

    def refused(*_args, **_kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(tail_module.LogReader, "read_after", refused)
    monkeypatch.setattr(tail_module, "FIRST_RETRY_S", 60.0)  # the stop must cut the wait
    stop, ended = threading.Event(), []
    follower = threading.Thread(target=lambda: ended.append(tail(
        services, start, ChangeFilter(), follow=True, emit=print, stop=stop)), daemon=True)
    follower.start()
    wait_until(lambda: _retrying(caplog), "the follower to meet the outage")
    stop.set()  # while it waits to try again
    follower.join(2)
    assert ended == [start]
    with pytest.raises(OperationalError):  # without --follow the error ends it
        tail(services, start, ChangeFilter(), follow=False, emit=print, stop=threading.Event())


def _retrying(caplog) -> list[str]:
    """What each warning that the follower is retrying says before the error it names."""
    return [r.getMessage().partition(" (")[0] for r in caplog.records
            if r.levelname == "WARNING" and r.getMessage().endswith("; retrying")]



def test_filters_take_comma_separated_values_as_get_changes_does(services, settings,
                                                                  monkeypatch):
    # found by a new user: --type Stopped,Destroyed, copied from ?type=Stopped,Destroyed,
    # was refused as one unknown type
    monkeypatch.setenv("VMLEDGER_DATABASE_URL", settings.database_url)
    mine, theirs = create_vm(services, OWNER_A), create_vm(services, OWNER_B)
    listed = CliRunner().invoke(cli, ["changes", "--vm-uuid", f"{mine},{theirs}",
                                      "--type", "Created, JobQueued"])
    repeated = CliRunner().invoke(cli, ["changes", "--vm-uuid", mine, "--vm-uuid", theirs,
                                        "--type", "Created", "--type", "JobQueued"])
    assert listed.exit_code == 0, listed.output
    assert listed.output == repeated.output and len(listed.output.splitlines()) == 4
    empty = CliRunner().invoke(cli, ["changes", "--type", ","])
    assert empty.exit_code == 2 and "--type" in empty.output
    # an empty element is a malformed list, as GET /changes refuses it (console tester)
    for option, value in [("--type", "Stopped,,Started"), ("--type", "Stopped,"),
                          ("--state", "running,,stopped"), ("--vm-uuid", f"{mine},")]:
        refused = CliRunner().invoke(cli, ["changes", option, value])
        assert refused.exit_code == 2, (option, value, refused.output)
        assert option in refused.output and "an empty value" in refused.output, refused.output
