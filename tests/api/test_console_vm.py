"""A VM's console page (docs/console.md, "A VM's page"): the diff between two versions reads
truthfully whatever shape its fields take; the jobs say how many the VM has when only the
newest are listed; an owner is offered only the versions it may see. (Found by a tester of the
console.)"""

from __future__ import annotations

import html
import re

import pytest
from fastapi.testclient import TestClient

from service.audit import history
from service.audit.history import vm_history
from service.console import routes_vm
from service.console.render import differences
from tests.api.helpers import act_and_wait, create_running_vm, get_vm
from tests.api.test_authorization import bearer
from tests.api.test_console import authed  # noqa: F401 (a fixture)


def test_a_diff_reads_an_object_going_empty_or_not_truthfully() -> None:
    # {} was a leaf and {"k": "v"} left no entry at "tags": a first tag read "tags: {} -> null"
    assert differences({"tags": {}}, {"tags": {"k": "v"}}) == [
        {"field": "tags.k", "before": None, "after": "v", "absent": "before"}]
    assert differences({"tags": {"k": "v"}}, {"tags": {}}) == [
        {"field": "tags.k", "before": "v", "after": None, "absent": "after"}]
    # an object against null, or a field one side lacks, is one change of its whole value
    assert differences({"quarantine": None}, {"quarantine": {"reason": "x"}}) == [
        {"field": "quarantine", "before": None, "after": {"reason": "x"}, "absent": None}]
    assert differences({"a": {"b": {}}}, {}) == [
        {"field": "a", "before": {"b": {}}, "after": None, "absent": "after"}]
    # a field that is null is not a field that is absent
    assert differences({"alias": None}, {}) == [
        {"field": "alias", "before": None, "after": None, "absent": "after"}]
    assert differences({"tags": {}, "nics": [1]}, {"tags": {}, "nics": [1]}) == []


def test_a_diff_writes_a_key_that_holds_a_separator_so_it_reads_as_one_key() -> None:
    # a tag named "a.b" read "tags.a.b", the path of key "b" in an object at "tags.a"
    nested = differences({"tags": {"a": {"b": 1}}}, {"tags": {"a": {"b": 2}}})
    dotted = differences({"tags": {"a.b": 1}}, {"tags": {"a.b": 2}})
    assert [c["field"] for c in nested] == ["tags.a.b"]
    assert [c["field"] for c in dotted] == ['tags["a.b"]']
    odd = {"x[0]": 1, 'say "hi"': 1, "": 1, "two words": 1, "a\\b": 1, "user-script": 1,
           "über_1": 1}
    fields = [c["field"] for c in differences({"customer_metadata": {}},
                                              {"customer_metadata": odd})]
    assert fields == ['customer_metadata[""]', 'customer_metadata["a\\\\b"]',
                      'customer_metadata["say \\"hi\\""]', 'customer_metadata["two words"]',
                      "customer_metadata.user-script", 'customer_metadata["x[0]"]',
                      "customer_metadata.über_1"]
    # every path names one key: no two keys' paths are the same
    assert len(set(fields)) == len(odd)
    assert [c["field"] for c in differences({}, {"a.b": 1})] == ['["a.b"]']


def test_the_diff_fragment_shows_a_dotted_tag_as_one_key(client: TestClient) -> None:
    vm_uuid = create_running_vm(client)
    act_and_wait(client, vm_uuid, "update", json={"tags": {"a.b": "web"}})
    version = get_vm(client, vm_uuid)["version"]
    diff = client.get(f"/console/fragments/vms/{vm_uuid}/diff",
                      params={"from": 1, "to": version}).text
    fields = [html.unescape(f) for f in re.findall(r'data-field="([^"]+)"', diff)]
    assert 'tags["a.b"]' in fields and "tags.a.b" not in fields
    assert '<code>tags["a.b"]</code>' in html.unescape(diff)


def test_the_diff_fragment_shows_a_first_tag_as_added(client: TestClient) -> None:
    vm_uuid = create_running_vm(client)
    act_and_wait(client, vm_uuid, "update", json={"tags": {"role": "web"}})
    tagged = get_vm(client, vm_uuid)
    assert tagged["tags"] == {"role": "web"}
    history = client.get(f"/vms/{vm_uuid}/history").json()
    first = next(e["version"] for e in history
                 if get_vm(client, vm_uuid, version=e["version"])["tags"])
    diff = client.get(f"/console/fragments/vms/{vm_uuid}/diff",
                      params={"from": first - 1, "to": first}).text
    assert re.findall(r'data-field="([^"]+)"', diff).count("tags.role") == 1
    assert 'data-field="tags"' not in diff
    row = re.search(r'data-field="tags.role">(.*?)</tr>', diff).group(1)
    assert ('<td class="before"><em>absent</em></td><td class="after">"web"</td>'
            in html.unescape(row)), row
    changed = len(re.findall(r"<tr data-field=", diff))
    assert f"{changed} field{'' if changed == 1 else 's'} changed" in diff


def test_the_console_shows_values_as_the_api_answers_them(client: TestClient) -> None:
    # found by a console tester: the diff showed "<b>" as "\u003cb\u003e" and the VM object
    # "☃" as "\u2603", where the API answers both as they are
    vm_uuid = create_running_vm(client)
    tags = {"markup": "<b>bold</b> & 'q'", "snow": "☃ 😀"}
    act_and_wait(client, vm_uuid, "update", json={"tags": tags})
    version = get_vm(client, vm_uuid)["version"]
    assert get_vm(client, vm_uuid)["tags"] == tags
    diff = client.get(f"/console/fragments/vms/{vm_uuid}/diff",
                      params={"from": 1, "to": version}).text
    state = client.get(f"/console/fragments/vms/{vm_uuid}/state").text
    page = client.get(f"/console/vms/{vm_uuid}").text
    for html in (diff, state):
        assert "&lt;b&gt;bold&lt;/b&gt; &amp; &#39;q&#39;" in html, html
        assert "☃ 😀" in html and "\\u" not in html, html
        assert "<b>" not in html
    assert "\\u" not in page


def test_a_vms_jobs_say_how_many_it_has_when_only_the_newest_are_listed(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    # "Jobs 100" for a VM with 111 jobs, its oldest (the provision) left out unsaid
    vm_uuid = create_running_vm(client)
    for n in range(3):
        act_and_wait(client, vm_uuid, "update", json={"tags": {"n": n}})
    jobs = client.get("/jobs", params={"vm_uuid": vm_uuid}).json()
    assert len(jobs) == 4
    page = client.get(f"/console/fragments/vms/{vm_uuid}").text
    assert '<small data-testid="vm-jobs-count">4</small>' in page
    monkeypatch.setattr(routes_vm, "JOBS", 2)
    page = client.get(f"/console/fragments/vms/{vm_uuid}").text
    assert '<small data-testid="vm-jobs-count">4, the newest 2 of 4 listed</small>' in page
    assert re.findall(r'<tr data-job="([^"]+)"', page) == [j["uuid"] for j in jobs[:2]]


def _offered(page: str) -> tuple[str, str, str, str, str]:
    """The slider's (min, max, hidden runs) and the diff form's (from, to) defaults."""
    slider = re.search(r'data-hidden="([^"]*)">.*?<input type="range" name="version" '
                       r'min="(\d+)" max="(\d+)"', page, re.S)
    assert slider, page
    hidden, low, high = slider.groups()
    start = re.search(r'name="from" type="number" min="1" max="\d+" value="(\d+)"', page)
    end = re.search(r'name="to" type="number" min="1" max="\d+" value="(\d+)"', page)
    assert start and end, page
    return low, high, hidden, start.group(1), end.group(1)


def test_an_owner_is_offered_only_the_versions_it_may_see(authed: TestClient) -> None:
    # after a quarantine and a release the diff was pre-filled from=N-1 to=N and the slider's
    # first step back was N-1: the Quarantined event, which the owner may not see (404)
    authed.headers.update(bearer("operator"))
    vm_uuid = create_running_vm(authed)
    for action, body in (("quarantine", {"reason": "lost"}), ("release", {})):
        response = authed.post(f"/vms/{vm_uuid}", params={"action": action}, json=body)
        assert response.status_code == 200, response.text
    newest = get_vm(authed, vm_uuid)["version"]
    history = authed.get(f"/vms/{vm_uuid}/history", headers=bearer("owner")).json()
    seen = [e["version"] for e in history]
    assert newest - 1 not in seen and newest in seen
    page = authed.get(f"/console/fragments/vms/{vm_uuid}", headers=bearer("owner")).text
    assert _offered(page) == ("1", str(newest), f"{newest - 1}-{newest - 1}",
                              str(seen[-2]), str(newest))
    for version in seen:  # every version offered is one the owner may open
        state = authed.get(f"/console/fragments/vms/{vm_uuid}/state",
                           params={"version": version}, headers=bearer("owner"))
        assert state.status_code == 200, (version, state.text)
    diff = authed.get(f"/console/fragments/vms/{vm_uuid}/diff", headers=bearer("owner"),
                      params={"from": seen[-2], "to": newest})
    assert diff.status_code == 200, diff.text
    # the operator sees every version
    page = authed.get(f"/console/fragments/vms/{vm_uuid}").text
    assert _offered(page) == ("1", str(newest), "", str(newest - 1), str(newest))


def _rows_read(services, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of events each stream read of the history returns (appended to)."""
    recorder, read = services.app.recorder, []
    select = recorder.select_stream

    def counted(*args, **kwargs):
        rows = select(*args, **kwargs)
        read.append(len(rows))
        return rows
    monkeypatch.setattr(recorder, "select_stream", counted)
    return read


def test_an_owners_page_reads_no_more_of_the_stream_than_its_timeline(
        authed: TestClient, services, monkeypatch: pytest.MonkeyPatch) -> None:
    # the owner's page folded the VM's whole stream to find the versions it may not see, so
    # every view grew slower with the VM's reports; those versions are the quarantines'
    authed.headers.update(bearer("operator"))
    vm_uuid = create_running_vm(authed)
    for action, body in (("quarantine", {"reason": "lost"}), ("release", {})):
        assert authed.post(f"/vms/{vm_uuid}", params={"action": action},
                           json=body).status_code == 200
    history = authed.get(f"/vms/{vm_uuid}/history").json()
    quarantined = next(e["version"] for e in history if e["type"] == "Quarantined")
    released = next(e["version"] for e in history if e["type"] == "Released")
    for n in range(3):
        act_and_wait(authed, vm_uuid, "update", json={"tags": {"n": n}})
    newest = get_vm(authed, vm_uuid)["version"]
    monkeypatch.setattr(routes_vm, "TIMELINE", 4)  # the quarantine is past the timeline
    read = _rows_read(services, monkeypatch)
    page = authed.get(f"/console/fragments/vms/{vm_uuid}", headers=bearer("owner")).text
    assert sum(read) <= routes_vm.TIMELINE, read
    assert _offered(page) == ("1", str(newest), f"{quarantined}-{released - 1}",
                              str(newest - 1), str(newest))
    shown = re.findall(r'<li class="kind-[^"]*" data-version="(\d+)"', page)
    assert shown == [str(v) for v in range(1, routes_vm.TIMELINE + 1)]
    assert f"the first {routes_vm.TIMELINE} of {newest}" in page


def test_the_versions_hidden_from_an_owner_are_those_its_scoped_history_leaves_out(
        client: TestClient, services) -> None:
    # read from the quarantines' versions alone, they must agree with the fold, event by event
    vm_uuid = create_running_vm(client)
    owner = get_vm(client, vm_uuid)["owner_uuid"]
    for n, action in enumerate(("quarantine", "release", "update", "quarantine", "release",
                                "update", "quarantine")):  # the last still lasts
        if action == "update":
            act_and_wait(client, vm_uuid, "update", json={"tags": {"n": n}})
            continue
        body = {"reason": "look"} if action == "quarantine" else {}
        assert client.post(f"/vms/{vm_uuid}", params={"action": action},
                           json=body).status_code == 200
    newest = services.commands.load(vm_uuid).version
    seen = {e["version"] for e in vm_history(services.commands, vm_uuid, limit=newest,
                                             scope_owner=owner)}
    hidden = history.hidden_from_its_owner(services.commands, vm_uuid, newest)
    assert len(hidden) == 3
    assert {v for first, last in hidden for v in range(first, last + 1)} == \
        set(range(1, newest + 1)) - seen
    # up to its own Quarantined, a quarantine that ended later still lasts there
    first = hidden[1][0]
    assert history.hidden_from_its_owner(services.commands, vm_uuid, first) == \
        [hidden[0], (first, first)]
