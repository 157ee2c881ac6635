"""The lifecycle load of P1 and P5: ``clients`` concurrent HTTP clients, each on its own
keep-alive connection, driving many VMs through create, reboot, stop, start and delete.

Each VM goes through exactly that sequence (API version 2). Every one of the five commands is
admitted and appends in any state the VM can be in when it arrives, whether or not a job worker
has run the VM's earlier jobs: in ``provisioning`` version 2 queues every action, a running VM
admits all four, a stopped one admits start and delete, and no two jobs of a VM's queue have
the same name, so none is answered as a repeat without an append. A client keeps ``depth`` VMs
in flight and takes them in turn, so consecutive commands of a client touch different VMs.

The HTTP client is a minimal HTTP/1.1 one over asyncio streams, so the load generator spends
little of the machine's two cores (its CPU time is reported).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field
from urllib.parse import urlsplit

SEQUENCE = ("create", "reboot", "stop", "start", "delete")


@dataclass
class Outcome:
    """What one run of the load did."""

    started: float = 0.0  # time.monotonic() of the measured window's start
    ended: float = 0.0
    # (ack time, log position, latency s, command) of each appended command in the window
    acks: list[tuple[float, int, float, str]] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    warmup_commands: int = 0

    @property
    def seconds(self) -> float:
        return self.ended - self.started


class Connection:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: dict | None = None
                      ) -> tuple[int, dict[str, str], bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        payload = b"" if body is None else json.dumps(body).encode()
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nAccept-Version: ~2\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n")
        self.writer.write(head.encode() + payload)
        assert self.reader is not None
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection")
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        data = await self.reader.readexactly(length) if length else b""
        return status, headers, data

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def _client(number: int, base_url: str, depth: int, outcome: Outcome,
                  measure_from: float, stop_at: float) -> None:
    parts = urlsplit(base_url)
    conn = Connection(parts.hostname or "127.0.0.1", parts.port or 80)
    owner = str(uuid.uuid5(uuid.NAMESPACE_URL, f"bench-owner-{number}"))
    in_flight: deque[tuple[str | None, int]] = deque()  # (vm uuid, next step)
    made = 0
    try:
        while time.monotonic() < stop_at:
            if len(in_flight) < depth:
                in_flight.append((None, 0))
            vm, step = in_flight.popleft()
            command = SEQUENCE[step]
            if command == "create":
                made += 1
                request = ("POST", "/vms", {"owner_uuid": owner, "brand": "bhyve", "ram": 1024,
                                            "alias": f"bench-{number}-{made}"})
            elif command == "delete":
                request = ("DELETE", f"/vms/{vm}", None)
            else:
                request = ("POST", f"/vms/{vm}?action={command}", None)
            sent = time.monotonic()
            status, headers, data = await conn.request(*request)
            acked = time.monotonic()
            position = headers.get("x-log-position")
            appended = status in (202, 204) and position is not None
            if acked >= measure_from and sent < stop_at:
                outcome.statuses[f"{command} {status}"] += 1
                if appended:
                    outcome.acks.append((acked, int(position), acked - sent, command))
            elif appended:
                outcome.warmup_commands += 1
            if command == "create":
                if status != 202:
                    continue
                vm = json.loads(data)["vm_uuid"]
            if status in (202, 204) and step + 1 < len(SEQUENCE):
                in_flight.append((vm, step + 1))
    finally:
        conn.close()


async def _run(base_url: str, clients: int, depth: int, warmup_s: float, seconds: float
               ) -> Outcome:
    outcome = Outcome()
    now = time.monotonic()
    outcome.started = now + warmup_s
    outcome.ended = outcome.started + seconds
    await asyncio.gather(*(
        _client(n, base_url, depth, outcome, outcome.started, outcome.ended)
        for n in range(clients)
    ))
    return outcome


def run_load(base_url: str, *, clients: int = 16, depth: int = 4, warmup_s: float = 3.0,
             seconds: float = 30.0, on_window_start=None, on_window_end=None) -> Outcome:
    """Drive the load; commands are counted when acknowledged inside the measured window
    (after ``warmup_s``). ``on_window_start``/``on_window_end`` run at the window's edges (from
    a timer thread), e.g. to read CPU counters."""
    import threading

    timers = []
    if on_window_start is not None:
        timers.append(threading.Timer(warmup_s, on_window_start))
    if on_window_end is not None:
        timers.append(threading.Timer(warmup_s + seconds, on_window_end))
    for timer in timers:
        timer.start()
    try:
        return asyncio.run(_run(base_url, clients, depth, warmup_s, seconds))
    except BaseException:  # interrupted: a timer not yet fired must not hold the exit up
        for timer in timers:
            timer.cancel()
        raise
    finally:
        for timer in timers:
            timer.join()
