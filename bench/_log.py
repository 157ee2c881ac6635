"""A realistic event log of any size, fast: P3's 1,000,000 events.

A few template VMs live their lives through the real service (``Commands`` and the real job
worker on the simulated fleet, so every event, including the servers' capacity claims, is
what the service writes). Their streams are then cloned: each clone gets a new VM uuid and new
job uuids, and the servers' events it caused are appended to the servers' streams at the next
versions. Clones are interleaved the way a busy fleet interleaves them: a pool of ``active``
VMs, each emitting one *burst* at a time (a command and the job that follows it), chosen at
random (seeded), so a batch of 500 log events touches about a hundred different VMs.

Clones are inserted with the event store's own batched insert (``recorder.insert_events``,
``batch`` events per transaction). Their hash chains are not recomputed (``vmledger audit
verify`` would flag them); nothing on the rebuild path reads the chain.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from uuid import UUID

from eventsourcing.persistence import StoredEvent

# (actions after the provision) of each template VM; lives of 14 to 19 events plus the
# servers' claims: the "10 to 20 events" of a typical VM.
LIVES = (("stop",), ("reboot",), ("stop", "start"), ("destroy",), ("reboot", "stop"),
         ("update",), ("stop", "destroy"))


@dataclass
class Template:
    """One template VM's bursts: lists of (stream, version, topic, state); ``stream`` is
    ``None`` for the VM's own events, else a server uuid."""

    vm_id: UUID
    job_ids: list[str]
    bursts: list[list[tuple[UUID | None, int, str, bytes]]]

    @property
    def events(self) -> int:
        return sum(len(b) for b in self.bursts)


def make_templates(services, copies_per_life: int = 3) -> list[Template]:
    """Live the template VMs through the real command handlers and worker."""
    from domain.states import Action
    from domain.vm import make_cause
    from service.commands.application import VmSpec
    from service.commands.versioning import NEWEST

    cause = make_cause("bench")
    made: list[str] = []
    for number in range(copies_per_life):
        for life in LIVES:
            accepted = services.commands.create_vm(VmSpec(
                owner_uuid=str(uuid.uuid5(uuid.NAMESPACE_URL, f"bench-owner-{number % 3}")),
                brand="bhyve", ram=1024 * (1 + number % 4), alias=f"template-{len(made)}",
                tags={"role": "bench", "n": number}), cause=cause)
            vm = accepted.vm_uuid
            while services.worker.run_vm(vm):
                pass
            for action in life:
                if action == "update":
                    services.commands.request_action(
                        vm, Action.UPDATE, behaviour=NEWEST, cause=cause,
                        args={"alias": f"renamed-{len(made)}"})
                else:
                    services.commands.request_action(vm, Action(action), behaviour=NEWEST,
                                                     cause=cause)
                while services.worker.run_vm(vm):
                    pass
            made.append(vm)
    return _split(services, {UUID(v) for v in made})


def _split(services, vm_ids: set[UUID]) -> list[Template]:
    templates: dict[UUID, Template] = {}
    current: UUID | None = None
    position = 0
    while batch := services.app.recorder.select_notifications(
            position, 1000, inclusive_of_start=False):
        for n in batch:
            position = n.id
            if n.originator_id in vm_ids:
                current = n.originator_id
                template = templates.setdefault(current, Template(current, [], []))
                if n.topic in ("vm.created", "vm.job_queued") or not template.bursts:
                    template.bursts.append([])
                if n.topic == "vm.job_queued":
                    template.job_ids += [j for j in _job_ids(n.state) if j not in
                                         template.job_ids]
                template.bursts[-1].append((None, n.originator_version, n.topic, n.state))
            elif current is not None and n.topic.startswith("server."):
                templates[current].bursts[-1].append(
                    (n.originator_id, n.originator_version, n.topic, n.state))
    return list(templates.values())


def _job_ids(state: bytes) -> list[str]:
    import json

    data = json.loads(state)
    return [data["job_uuid"]] if "job_uuid" in data else []


def clone_log(templates: list[Template], server_versions: dict[UUID, int], events: int, *,
              active: int = 1000, seed: int = 7) -> Iterator[StoredEvent]:
    """Stored events of clones of ``templates``, interleaved by burst, ``events`` of them
    (the last clones may be cut short). ``server_versions``: each server's last version."""
    rng = random.Random(seed)
    versions = dict(server_versions)
    pool: list[tuple[Template, list[tuple[bytes, bytes]], UUID, int]] = []
    emitted = 0
    clones = 0

    def new_clone() -> tuple[Template, list[tuple[bytes, bytes]], UUID, int]:
        nonlocal clones
        template = templates[clones % len(templates)]
        clones += 1
        vm_id = uuid.uuid4()
        swaps = [(str(template.vm_id).encode(), str(vm_id).encode()),
                 (template.vm_id.hex.encode(), vm_id.hex.encode())]
        swaps += [(j.encode(), str(uuid.uuid4()).encode()) for j in template.job_ids]
        return template, swaps, vm_id, 0

    while emitted < events:
        while len(pool) < active:
            pool.append(new_clone())
        index = rng.randrange(len(pool))
        template, swaps, vm_id, burst = pool[index]
        for stream, version, topic, state in template.bursts[burst]:
            for old, new in swaps:
                state = state.replace(old, new)
            if stream is None:
                yield StoredEvent(vm_id, version, topic, state)
            else:
                versions[stream] += 1
                yield StoredEvent(stream, versions[stream], topic, state)
            emitted += 1
            if emitted >= events:
                return
        if burst + 1 < len(template.bursts):
            pool[index] = (template, swaps, vm_id, burst + 1)
        else:
            pool[index] = pool[-1]
            pool.pop()


def build_log(services, events: int, *, batch: int = 5000) -> dict[str, float]:
    """Fill ``services``' empty log with about ``events`` events; what was made."""
    import time

    started = time.perf_counter()
    templates = make_templates(services)
    server_versions: dict[UUID, int] = {}
    position = 0
    while page := services.app.recorder.select_notifications(
            position, 1000, inclusive_of_start=False):
        for n in page:
            position = n.id
            if n.topic.startswith("server."):
                server_versions[n.originator_id] = max(server_versions.get(n.originator_id, 0),
                                                       n.originator_version)
    remaining = events - services.projections.head()
    pending: list[StoredEvent] = []
    for stored in clone_log(templates, server_versions, max(0, remaining)):
        pending.append(stored)
        if len(pending) >= batch:
            services.app.recorder.insert_events(pending)
            pending = []
    if pending:
        services.app.recorder.insert_events(pending)
    mean = sum(t.events for t in templates) / len(templates)
    return {"templates": len(templates), "mean_events_per_vm": round(mean, 1),
            "build_s": round(time.perf_counter() - started, 1),
            "head": services.projections.head()}
