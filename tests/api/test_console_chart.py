"""The fleet's chart of VMs by state over time (docs/console.md, "The fleet page"): its x-axis is
time, each count held until the next change; its labels name the first and last buckets' times;
and a life of any length draws a bounded number of points. (Found by a tester of the console:
points were spaced evenly, so three quiet minutes were drawn as wide as ten seconds.)"""

from __future__ import annotations

import re
import uuid

import pytest
from fastapi.testclient import TestClient

from projections.analytics_queries import STATE_ORDER
from projections.console_queries import MAX_BUCKETS, ConsoleQueries, StatesOverTime, bucket_width
from service.console.render import Chart, chart, render
from service.container import Services
from tests.api.helpers import OWNER, create_running_vm


def _counts(**counts: int) -> dict[str, int]:
    return {state: counts.get(state, 0) for state in STATE_ORDER}


def _line(drawn: Chart, state: str) -> list[tuple[float, float]]:
    line = next(s for s in drawn.series if s["state"] == state)
    return [tuple(map(float, xy.split(","))) for xy in line["points"].split()]


def test_points_stand_at_their_time_and_each_count_holds_until_the_next() -> None:
    # buckets at 0 s, 10 s and 190 s: the third was drawn at 600 as the second was at 300
    drawn = chart(StatesOverTime("ten seconds", [
        ("2026-11-30T01:30:0", _counts(running=1)),
        ("2026-11-30T01:30:1", _counts(running=2)),
        ("2026-11-30T01:33:1", _counts(running=4))]))
    at_10s = round(Chart.WIDTH * 10 / 190, 1)
    height = Chart.HEIGHT
    assert _line(drawn, "running") == [
        (0, height * 3 / 4), (at_10s, height * 3 / 4), (at_10s, height / 2),
        (Chart.WIDTH, height / 2), (Chart.WIDTH, 0)]
    # the axis is labelled with the first and last buckets' times
    assert (drawn.first, drawn.last) == ("2026-11-30T01:30:00Z", "2026-11-30T01:33:10Z")


def test_one_bucket_is_drawn_across_the_chart() -> None:
    drawn = chart(StatesOverTime("second", [("2026-11-30T01:30:07", _counts(stopped=2))]))
    assert _line(drawn, "stopped") == [(0, 0), (Chart.WIDTH, 0)]
    assert drawn.first == drawn.last == "2026-11-30T01:30:07Z"


@pytest.mark.parametrize(("first", "last", "unit"), [
    ("2026-11-30T01:30:00.000Z", "2026-11-30T01:31:59.999Z", "second"),  # 120 seconds
    ("2026-11-30T01:30:00.000Z", "2026-11-30T01:49:59.000Z", "ten seconds"),  # 120 of them
    # 1,199 s, but over 121 ten-second buckets (:0 of 01:30 to :1 of 01:50)
    ("2026-11-30T01:30:09.000Z", "2026-11-30T01:50:08.000Z", "minute"),
    ("2011-05-01T00:00:00.000Z", "2011-05-30T00:00:00.000Z", "day"),  # a trace's 29 days
    ("2017-01-01T00:00:00.000Z", "2026-12-31T00:00:00.000Z", "month"),  # 120 months
    # 16 years: by the month, 187 buckets, which were drawn past the bound of 120
    ("2011-05-01T00:00:00.000Z", "2026-11-30T00:00:00.000Z", "year"),
])
def test_the_bucket_is_the_finest_that_gives_at_most_max_buckets(
        first: str, last: str, unit: str) -> None:
    assert bucket_width(first, last)[0] == unit


def test_a_long_lives_chart_has_a_bounded_number_of_points() -> None:
    points = [(f"{2000 + year}", _counts(running=year)) for year in range(MAX_BUCKETS)]
    drawn = chart(StatesOverTime("year", points))
    assert len(_line(drawn, "running")) == 2 * MAX_BUCKETS - 1
    assert drawn.last == "2119"


@pytest.mark.parametrize("most, view_box", [
    # left: 40 at least, else 4 (the tick gap) + ceil(7.5 a character x "28,770") + 6;
    # right: 700 at least, else 600 + 8 (the legend gap) + ceil(7.5 x "provisioning 28,770")
    # + 6; the view box is "-left -10 left+right 240"
    (7, "-40 -10 759 240"),  # "provisioning 7": 600 + 8 + 105 + 6 = 719
    (28_770, "-55 -10 812 240"),  # 4 + 45 + 6 = 55; 600 + 8 + 143 + 6 = 757
    (9_999_999, "-78 -10 857 240"),  # 4 + 68 + 6 = 78; 600 + 8 + 165 + 6 = 779
])
def test_the_charts_view_leaves_room_for_its_longest_labels(most: int, view_box: str) -> None:
    """Fixed view boxes, worked out by hand from the layout's sizes (render.Chart's): checked
    against the code's own formula, a wrong constant passed. Only the browser test
    (tests/browser/test_console_chart.py) measures the labels as Chromium draws them."""
    # a fixed view box (-40 to 700) cut a y-axis label of 5 digits and a legend past 3
    drawn = chart(StatesOverTime("second", [("2026-11-30T01:30:07", _counts(
        provisioning=most, quarantined=1))]))
    html = render("chart.html", chart=drawn, owner=False)
    assert re.search(r'viewBox="([^"]+)"', html).group(1) == view_box


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_charts_heading_and_labels_say_what_it_draws(client: TestClient) -> None:
    create_running_vm(client)
    html = client.get("/console/fragments/fleet/chart").text
    heading = re.search(r"<h2>(.*?)</h2>", html, re.DOTALL).group(1)
    assert "(per " not in heading  # each point is a bucket with a change, not every bucket
    assert re.search(r"at the end of each \w[\w ]* in which a count changed", heading), heading
    labels = re.findall(r'<text class="tick x"[^>]*>([^<]+)</text>', html)
    assert len(labels) == 2 and all(
        re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", label) for label in labels), labels


def _report(client: TestClient, vm_uuid: str, state: str, server_uuid: str,
            last_modified: str) -> None:
    """An agent's ``PUT /vms/{uuid}``: the VM as its compute node has it."""
    response = client.put(f"/vms/{vm_uuid}", json={
        "uuid": vm_uuid, "owner_uuid": OWNER, "brand": "bhyve", "ram": 128, "state": state,
        "server_uuid": server_uuid, "last_modified": last_modified})
    assert response.status_code == 200, response.text


def test_a_discovered_vm_starts_in_the_state_it_was_found_in(services: Services,
                                                             client: TestClient) -> None:
    # a VM found by its agent (Discovered) was counted as entering provisioning: a VM found
    # running drew "provisioning: 1", and its later stop "running: -1"
    server_uuid = client.get("/servers").json()[0]["uuid"]
    create_running_vm(client)
    found = {state: str(uuid.uuid4()) for state in ("running", "stopped", "failed")}
    for state, vm_uuid in found.items():
        _report(client, vm_uuid, state, server_uuid, "2026-01-01T00:00:01.000Z")
    _report(client, found["running"], "stopped", server_uuid, "2026-01-01T00:00:02.000Z")
    _report(client, found["stopped"], "running", server_uuid, "2026-01-01T00:00:02.000Z")
    states = client.get("/stats/states").json()
    assert (states["running"], states["stopped"], states["failed"]) == (2, 1, 1), states
    points = ConsoleQueries(services.db).states_over_time().points
    assert points[-1][1] == states
    assert all(n >= 0 for _, counts in points for n in counts.values()), points
    owners = ConsoleQueries(services.db).states_over_time(OWNER).points
    assert owners[-1][1] == client.get("/stats/states", params={"owner_uuid": OWNER}).json()
    html = client.get("/console/fragments/fleet/chart").text
    shown = {s: int(n) for s, n in re.findall(r'data-state="(\w+)" data-last="(-?\d+)"', html)}
    assert shown == {s: n for s, n in states.items() if s in shown}
    assert shown["running"] == 2 and shown.get("provisioning", 0) == 0
