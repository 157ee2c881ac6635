"""After a replay of the Google 2011 trace, ``/stats`` agrees with the replay and with the log:
the counts by state are the replay summary's final states, the transitions add up to the
state-changing events in the log, and the failures by reason are the trace's EVICT and FAIL
rows the replay applied."""

from __future__ import annotations

from collections import Counter

from fastapi.testclient import TestClient

from domain.transitions import STATE_EVENTS
from service.api.app import create_app
from service.container import Services
from service.replay.run import catch_up, replay
from tests.trace import TRACE, needs_trace

# Jobs 3,941..3,945 in order of first appearance: 127 rows holding every event type the shard
# has (43 SUBMIT, 43 SCHEDULE, 1 EVICT, 3 FAIL, 32 FINISH, 5 KILL).
SKIP_JOBS, MAX_JOBS = 3940, 5


def state_events_in_the_log(services: Services) -> Counter[str]:
    """The log's state-changing events (``STATE_EVENTS``), counted by type."""
    found: Counter[str] = Counter()
    position = 0
    while batch := services.app.recorder.select_notifications(
            position, 1000, inclusive_of_start=False):
        for notification in batch:
            kind = type(services.app.mapper.to_domain_event(notification)).__name__
            if kind in STATE_EVENTS:
                found[kind] += 1
        position = batch[-1].id
    return found


@needs_trace
def test_stats_after_a_replay_agree_with_its_summary_and_with_the_log(services: Services):
    summary = replay(services, TRACE, skip_jobs=SKIP_JOBS, max_jobs=MAX_JOBS)
    catch_up(services, summary)
    assert summary.rows_read == 127

    with TestClient(create_app(services=services, background=False)) as http:
        states = http.get("/stats/states").json()
        transitions = http.get("/stats/transitions").json()
        failures = http.get("/stats/failures").json()
        provisioning = http.get("/stats/durations",
                                params={"from": "provisioning", "to": "running"}).json()

    assert {state: n for state, n in states.items() if n} == summary.final_states
    assert sum(states.values()) == summary.vms_created
    in_the_log = state_events_in_the_log(services)
    assert sum(pair["count"] for pair in transitions) == sum(in_the_log.values())
    assert provisioning["count"] == in_the_log["Provisioned"]
    # every EVICT and FAIL row the replay did not refuse made one failure
    refused = Counter({name: sum(n for why, n in summary.refused.items() if why.startswith(name))
                       for name in ("EVICT", "FAIL")})
    assert {f["reason"]: f["count"] for f in failures} == {
        reason: count for reason, count in
        (("evicted", 1 - refused["EVICT"]), ("crashed", 3 - refused["FAIL"])) if count}
