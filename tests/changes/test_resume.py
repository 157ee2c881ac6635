"""A client cut at random points that resumes with its last id gets every change after it
exactly once, in log order, while 8 writers append (compared with the log itself). The
writers also race on one shared VM, so on PostgreSQL conflicting appends roll back and leave
gaps in the positions, which the stream must pass without losing anything after them."""

from __future__ import annotations

import random
import threading
import time

import httpx

from domain.errors import InvalidTransitionError
from domain.vm import make_cause
from tests.changes.live import live_server, sse_events
from tests.waiting import wait_until
from tests.changes.scenarios import OWNER_A, OWNER_B, create_vm, log_positions

WRITERS = 8
VMS_PER_WRITER = 4


class ResumingReader(threading.Thread):
    """Reads GET /changes from ``after``, hanging up after a random number of events each
    time and resuming with ``Last-Event-ID``, until it has read up to ``target``."""

    def __init__(self, url: str, after: int, seed: int):
        super().__init__(daemon=True)
        self.url, self.last, self.random = url, after, random.Random(seed)
        self.ids: list[int] = []
        self.connections = 0
        self.target: int | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.Client(base_url=self.url, timeout=30) as client:
                while self.target is None or self.last < self.target:
                    self._one_connection(client, budget=self.random.randint(1, 25))
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error

    def _one_connection(self, client: httpx.Client, budget: int) -> None:
        self.connections += 1
        headers = {"Last-Event-ID": str(self.last)}
        with client.stream("GET", "/changes", headers=headers) as response:
            assert response.status_code == 200
            for event in sse_events(response):
                if event is None:
                    if self.target is not None and self.last >= self.target:
                        return
                    continue
                position = int(event.id)
                assert event.json["position"] == position
                self.ids.append(position)
                self.last = position
                budget -= 1
                if budget == 0 or (self.target is not None and self.last >= self.target):
                    return  # hang up here, mid-stream


def _settled(services, vm_uuids: list[str]) -> bool:
    return all(services.commands.load(v).state != "provisioning" for v in vm_uuids)


def test_a_client_resuming_from_its_last_id_gets_every_change_once_in_order(services):
    services.settings.changes_heartbeat_s = 0.2
    seed = int(time.time())
    start = services.commands.head_position()
    created: list[str] = []
    lock = threading.Lock()

    shared = create_vm(services, OWNER_A, alias="shared")

    def writer(index: int) -> None:
        for _ in range(VMS_PER_WRITER):
            vm_uuid = create_vm(services, OWNER_A if index % 2 else OWNER_B)
            with lock:
                created.append(vm_uuid)
            cause = make_cause(f"writer-{index}")
            try:
                services.quarantine.quarantine(shared, "race", cause=cause)
                services.quarantine.release(shared, cause=cause)
            except InvalidTransitionError:
                pass  # another writer released it first

    with live_server(services) as url:
        reader = ResumingReader(url, start, seed)
        reader.start()
        writers = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
        for thread in writers:
            thread.start()
        for thread in writers:
            thread.join(120)
        wait_until(lambda: _settled(services, created), "every provision job to finish",
                   timeout=120)
        reader.target = services.commands.head_position()
        reader.join(120)
        assert not reader.is_alive(), "the reader never reached the head"
    assert reader.error is None, f"seed {seed}: {reader.error!r}"
    # The worker may append after the target (a job's last event): compare up to it.
    expected = [p for p in log_positions(services, start) if p <= reader.target]
    reader.ids = [p for p in reader.ids if p <= reader.target]
    assert len(created) == WRITERS * VMS_PER_WRITER
    assert len(expected) > WRITERS * VMS_PER_WRITER * 4  # writers' and jobs' events
    assert reader.connections > 5, "never hung up"
    assert reader.ids == expected, f"seed {seed}: differs from the log"
    gaps = reader.ids[-1] - start - len(expected)
    print(f"{len(expected)} changes over {reader.connections} connections, {gaps} gaps passed")
