"""GET /changes from a browser's EventSource, which cannot send headers: the token goes in
``?token=``, each change arrives as an event named by its type, and an owner gets only its
own VMs (docs/api.md, "Changes")."""

from __future__ import annotations

from typing import Any

from tests.browser.conftest import Console

COLLECT = """
([query, wanted]) => new Promise((resolve, reject) => {
    const source = new EventSource('/changes?' + query);
    const got = [];
    source.addEventListener('Created', (event) => {
        got.push({id: event.lastEventId, data: JSON.parse(event.data)});
        if (got.length === wanted) { source.close(); resolve(got); }
    });
    source.onerror = () => { source.close(); reject(new Error('EventSource failed')); };
})
"""


def test_an_event_source_with_a_token_parameter_gets_its_owners_changes(
        page: Any, console: Console) -> None:
    page.goto(f"{console.url}/console")  # any page of the service: same origin
    token, owner = console.tokens["owner_a"], console.owners["owner_a"]
    first = page.evaluate(COLLECT, [f"after=0&token={token}", 5])
    assert [c["data"]["owner_uuid"] for c in first] == [owner] * 5
    ids = [int(c["id"]) for c in first]
    assert ids == sorted(set(ids)) and [c["data"]["position"] for c in first] == ids
    resumed = page.evaluate(COLLECT, [f"after={ids[2]}&token={token}", 2])
    assert [int(c["id"]) for c in resumed] == ids[3:5]
