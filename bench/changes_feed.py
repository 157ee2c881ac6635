"""The changefeed's read rate: a stream catching up over HTTP (``GET /changes?after=0``, SSE,
every event folded and owner-scoped) against the event store's own read of the same log
(``select_notifications`` and decoding, the floor any reader pays), on PostgreSQL.

A log of VMs created and stopped by the service's commands; the reference reads it in
batches of 500 and decodes every event; the stream is read by an httpx client until its
last event. Ratio: stream events/s over reference events/s (goal: >= 0.25, a stream may
cost the reader at most four times the store's own read).

    python bench/changes_feed.py [--quick] [--vms 2000]
"""

from __future__ import annotations

import threading
import time

from _common import emit, parser, say, scratch_postgres, size_defaults

GOAL = 0.25
# the thread service.append_wakeups.wake_on_appends starts for the app's change hub
LISTENER_THREAD = "vmledger-wake-on-appends"


def wait_for_listeners(timeout_s: float = 10.0) -> None:
    """Wait until the change hub's ``LISTEN`` threads have ended. The server's shutdown sets
    their stop event, but one waits up to half a second for a notification before it looks:
    dropping the scratch database under it would cut its connection, which it reports as a
    warning ("listening for appends: ... server closed the connection")."""
    for thread in threading.enumerate():
        if thread.name == LISTENER_THREAD:
            thread.join(timeout_s)


def main() -> None:
    args_parser = parser(__doc__.splitlines()[0])
    args_parser.add_argument("--vms", type=int, help="VMs created (default 2,000; --quick: 100)")
    args = args_parser.parse_args()
    size_defaults(args, {"vms": 2000}, {"vms": 100})
    vms = args.vms

    import httpx

    from domain.vm import make_cause
    from service.commands.application import VmSpec
    from service.container import Services
    from service.settings import Settings
    from tests.changes.live import live_server, sse_events

    with scratch_postgres("changes") as url:
        services = Services.build(Settings(database_url=url, sim_servers=2))
        try:
            for i in range(vms):
                services.commands.create_vm(
                    VmSpec(owner_uuid="930896af-bf8c-48d4-885c-6573a94b1853", brand="joyent",
                           ram=256, alias=f"bench-{i}"), cause=make_cause("bench"))
            head = services.commands.head_position()
            say(f"log of {head} events")
            started, after, read = time.perf_counter(), 0, 0
            while True:
                batch = services.app.recorder.select_notifications(
                    after, 500, inclusive_of_start=False)
                if not batch:
                    break
                for notification in batch:
                    services.app.mapper.to_domain_event(notification)
                read += len(batch)
                after = batch[-1].id
            reference_s = time.perf_counter() - started
            with live_server(services, background=False) as base, \
                    httpx.Client(base_url=base, timeout=60) as client:
                started, seen = time.perf_counter(), 0
                with client.stream("GET", "/changes?after=0") as response:
                    for event in sse_events(response):
                        if event is not None:
                            seen += 1
                            if int(event.id) >= head:
                                break
                stream_s = time.perf_counter() - started
        finally:
            wait_for_listeners()  # the live server has stopped its hub by now
            services.close()
    reference, stream = read / reference_s, seen / stream_s
    say(f"reference: {reference:.0f} events/s; stream: {stream:.0f} events/s")
    ratio = stream / reference
    emit("changes", "changefeed catch-up over SSE vs the store's read",
         raw={"events": head, "reference_events_per_s": round(reference),
              "stream_events_per_s": round(stream)},
         ratio=ratio, goal=f">= {GOAL}", met=ratio >= GOAL)


if __name__ == "__main__":
    main()
