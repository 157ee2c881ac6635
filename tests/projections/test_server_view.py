"""``server_view`` folds a batch's claims and releases in memory and writes them with one
statement of each kind: the rows are those event-by-event application gives."""

from __future__ import annotations

from tests.builders import cause, rows


def claims(services) -> list[dict]:
    return rows(services, "server_view_claims", order_by="server_uuid, vm_uuid")


def test_claims_and_releases_batched_give_the_rows_of_one_event_a_batch(services):
    app = services.app
    first, second = (server.uuid for server in list(services.fleet.servers())[:2])
    held_before = services.commands.load_server(first)
    held_before.claim("vm-released-later", ram_mib=1024, cpus=1, cause=cause())
    held_before.claim("vm-kept", ram_mib=2048, cpus=2, cause=cause())
    app.save(held_before)
    services.projections.catch_up()  # these two claims are rows before the next batch
    server, other = services.commands.load_server(first), services.commands.load_server(second)
    server.release("vm-released-later", cause=cause())  # a row of an earlier batch
    server.claim("vm-released-later", ram_mib=512, cpus=1, cause=cause())  # ... claimed again
    server.claim("vm-in-and-out", ram_mib=256, cpus=1, cause=cause())
    server.release("vm-in-and-out", cause=cause())  # claimed and released in the batch
    other.claim("vm-moved", ram_mib=128, cpus=1, cause=cause())
    other.release("vm-moved", cause=cause())
    other.claim("vm-moved", ram_mib=4096, cpus=4, cause=cause())  # claimed, released, again
    app.save(server, other)
    services.projections.catch_up()
    batched = claims(services)
    assert [(r["server_uuid"], r["vm_uuid"], r["ram_mib"]) for r in batched] == sorted([
        (first, "vm-kept", 2048), (first, "vm-released-later", 512),
        (second, "vm-moved", 4096)])
    services.projections.reset(["server_view"])
    services.projections.batch_size = 1  # one event a batch: a statement an event
    services.projections.catch_up(["server_view"])
    assert claims(services) == batched
    services.projections.rebuild_batch_size = 10_000  # the whole log in one batch
    services.projections.rebuild(["server_view"])
    assert claims(services) == batched
