"""Every instant the API reads has RFC 3339's ``date-time`` grammar (5.6) and no other
(docs/api.md, "Instants"): GetVm's and the console's ``?at=``, ListVms' ``create_timestamp``
and its markers, vm-agent's ``last_modified``. ISO 8601's other forms, which Python's
``fromisoformat`` also read, are refused as any malformed instant is (a tester found
``08.230,230Z``, ``+00`` and a space for ``T`` taken); lower-case ``t`` and ``z`` stay
accepted (RFC 3339 5.6's note). And ``?at=`` orders an instant against each event's stored
timestamp, to the microsecond, when it is given finer than the millisecond the history
shows; one given to the millisecond names every event of it."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from service.audit.history import vm_event_times
from tests.api.helpers import assert_error, create_running_vm, error_fields, get_vm

#: ISO 8601 forms RFC 3339 does not have
NOT_RFC_3339 = ("2026-12-06T08:04:08.230,230Z", "2026-12-06T08:04:08,230Z",
                "2026-12-06T08:04:08+00", "2026-12-06T08:04:08+0000",
                "2026-12-06 08:04:08.230Z", "2026-12-06T08:04:08.230", "2026-12-06",
                "2026-12-06T08:04Z", "20261206T080408Z", "2026-W49-7T08:04:08Z",
                "2026-12-06T08:04:08.Z", "2026-12-06T08:04:08.230Z ", "+2026-12-06T08:04:08Z")
AT_EXPECTED = "must be an RFC 3339 timestamp with a time zone, in years 1 to 9999 in UTC"
ONE_BACKEND = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def test_the_reader_takes_rfc_3339s_date_time_and_nothing_else() -> None:
    from projections.formats import parse_iso_instant, rfc3339

    for text in NOT_RFC_3339 + ("2026-12-06T08:04:60Z", "2026-12-06T08:04:08+24:00",
                                "2026-12-06T08:04:08+01:60", "２026-12-06T08:04:08Z"):
        assert parse_iso_instant(text) is None, text
    for text, utc in (("2026-12-06t08:04:08.2304z", "2026-12-06T08:04:08.230Z"),
                      ("2026-12-06T08:04:08-00:00", "2026-12-06T08:04:08.000Z"),
                      ("2026-12-06T10:34:08.5+02:30", "2026-12-06T08:04:08.500Z")):
        assert rfc3339(parse_iso_instant(text)) == utc, text
    # a fraction of any length, cut (floored) to the microsecond
    assert parse_iso_instant("2026-12-06T08:04:08.230460999Z").microsecond == 230460


@ONE_BACKEND
@pytest.mark.parametrize("stamp", NOT_RFC_3339)
def test_time_travel_refuses_other_forms_naming_at(client, stamp) -> None:
    vm_uuid = create_running_vm(client)
    for path in (f"/vms/{vm_uuid}", f"/console/fragments/vms/{vm_uuid}/state"):
        body = assert_error(client.get(path, params={"at": stamp}), 409, "ValidationFailed")
        assert body["errors"] == [{"field": "at", "code": "Invalid", "message": AT_EXPECTED}]


@ONE_BACKEND
@pytest.mark.parametrize("stamp", NOT_RFC_3339)
def test_list_vms_create_timestamp_and_markers_refuse_other_forms(client, stamp) -> None:
    body = assert_error(client.get("/vms", params={"create_timestamp": stamp}), 409,
                        "ValidationFailed")
    assert body["errors"][0]["message"] == f"Invalid timestamp: {stamp}"
    marker = json.dumps({"uuid": "ffffffff-ffff-ffff-ffff-ffffffffffff",
                         "create_timestamp": stamp})
    body = assert_error(client.get("/vms", params={"sort": "create_timestamp.asc",
                                                   "marker": marker}), 409, "ValidationFailed")
    assert body["errors"][0]["message"].endswith(
        f"Marker has an invalid create_timestamp field: {stamp}")


@ONE_BACKEND
def test_a_vm_agent_report_refuses_other_forms_naming_last_modified(client) -> None:
    vm_uuid = create_running_vm(client)
    server = get_vm(client, vm_uuid)["server_uuid"]
    for stamp in NOT_RFC_3339 + (1764547200000,):
        report = {"uuid": vm_uuid, "state": "stopped", "server_uuid": server,
                  "last_modified": stamp}
        body = assert_error(client.put(f"/vms/{vm_uuid}", json=report), 409,
                            "ValidationFailed")
        assert error_fields(body) == {"last_modified": "Invalid"}, body
    assert get_vm(client, vm_uuid)["state"] == "running"


def test_at_orders_an_instant_and_an_event_inside_the_same_millisecond(
        client, services) -> None:
    vm_uuid = create_running_vm(client)
    times = vm_event_times(services.commands, vm_uuid, limit=1000)
    # an event stored past the start of its millisecond: the history shows it at that start
    version, stored = max(times[1:], key=lambda pair: pair[1].microsecond % 1000)
    assert stored.microsecond % 1000 > 0
    just_before = (stored - timedelta(microseconds=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert get_vm(client, vm_uuid, at=just_before)["version"] == version - 1
    at_it = stored.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert get_vm(client, vm_uuid, at=at_it)["version"] >= version
    # its time as the history writes it (to the millisecond) names it too
    [shown] = [e["timestamp"] for e in client.get(f"/vms/{vm_uuid}/history").json()
               if e["version"] == version]
    assert get_vm(client, vm_uuid, at=shown)["version"] >= version


def _ms_start(moment: datetime) -> datetime:
    return moment.replace(microsecond=moment.microsecond - moment.microsecond % 1000)


def test_at_given_finer_than_the_millisecond_is_fine_whatever_its_digits_are(
        client, services) -> None:
    # a tester: .338000Z, .3380Z and .33800Z were read as the millisecond .338Z, so they
    # named an event stored at .338626; finer digits are compared to the microsecond,
    # zeros or not (docs/api.md, "Reads")
    vm_uuid = create_running_vm(client)
    times = vm_event_times(services.commands, vm_uuid, limit=1000)
    # an event stored past the start of its millisecond, some event of the VM before that start
    version, stored = next((v, moment) for v, moment in reversed(times)
                           if moment.microsecond % 1000 and times[0][1] <= _ms_start(moment))
    start = _ms_start(stored)
    before = [v for v, moment in times if moment <= start][-1]
    assert before < version
    to_the_ms = start.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    for zeros in ("0", "00", "000", "000000"):
        at = f"{to_the_ms}{zeros}Z"
        response = client.get(f"/vms/{vm_uuid}", params={"at": at},
                              headers={"Accept-Version": "~2"})
        assert response.status_code == 200, response.text
        assert response.json()["version"] == before, at
        state = client.get(f"/console/fragments/vms/{vm_uuid}/state", params={"at": at})
        assert f'data-version="{before}"' in state.text, at
    # to the millisecond it still names every event of that millisecond
    assert get_vm(client, vm_uuid, at=f"{to_the_ms}Z")["version"] >= version


@ONE_BACKEND
@pytest.mark.parametrize(("fraction", "hours", "said"), [
    (".123001", 0, ".123001Z"), (".1230", 0, ".1230Z"), (".12300", 0, ".12300Z"),
    (".1234567", 0, ".123456Z"), (".5", 0, ".500Z"), ("", 0, ".000Z"),
    (".123456", 2, ".123456Z"),
])
def test_an_instant_before_the_vm_is_said_as_given_to_the_microsecond(
        client, fraction, hours, said) -> None:
    # a tester: .338001Z was answered "did not exist at ...56.338Z"
    vm_uuid = create_running_vm(client)
    created = client.get(f"/vms/{vm_uuid}/history").json()[0]["timestamp"]
    # a whole minute before the VM, so that its second stays whatever the offset
    moment = datetime.fromisoformat(created) - timedelta(minutes=1)
    local = moment.astimezone(timezone(timedelta(hours=hours)))
    at = local.strftime("%Y-%m-%dT%H:%M:%S") + fraction + (f"+{hours:02}:00" if hours else "Z")
    body = assert_error(client.get(f"/vms/{vm_uuid}", params={"at": at}), 404,
                        "ResourceNotFound")
    utc = moment.strftime("%Y-%m-%dT%H:%M:%S")
    assert body["message"] == f"VM not found (it did not exist at {utc}{said})"


def test_whether_an_instant_is_finer_than_the_millisecond_is_read_from_its_digits() -> None:
    from projections.formats import parse_given_instant

    for text, fine, said in (("2026-12-06T10:55:56Z", False, "2026-12-06T10:55:56.000Z"),
                             ("2026-12-06T10:55:56.338Z", False, "2026-12-06T10:55:56.338Z"),
                             ("2026-12-06T10:55:56.3380Z", True, "2026-12-06T10:55:56.3380Z"),
                             ("2026-12-06T10:55:56.338000000Z", True,
                              "2026-12-06T10:55:56.338000Z"),
                             ("2026-12-06T12:55:56.000001+02:00", True,
                              "2026-12-06T10:55:56.000001Z")):
        given = parse_given_instant(text)
        assert given is not None and (given.fine, str(given)) == (fine, said), text
