"""Times every pass of the projection runner's background loop, in the process that runs it
(``bench/p5_projection_lag.py --passes``; docs/performance.md, P5).

Python imports ``sitecustomize`` at start-up from ``PYTHONPATH``: with this directory on it and
``VMLEDGER_PASS_PROBE`` naming a file, the first import of ``projections.runner`` wraps one
pass of ``run_forever`` (``ProjectionRunner.catch_up(live=...)``, or ``_live_pass`` in older
commits), ``ProjectionRunner.wake``, ``BatchApplier.decode`` (``ProjectionRunner.decode``
in older commits) and psycopg's waits for the server (each ``wait`` call: a round trip, or a
statement sent in a pipeline; a poll that had to sleep is counted apart). At exit the process writes one JSON line a pass: its start (``time.monotonic``, which every
process on the machine shares), wall and thread-CPU time (ms), its waits, sleeps and their
time (ms), how many log events it decoded, where in the project's code each wait was made
(how many, ms, sleeps), and when the loop was asked to wake before it (None when it woke on
its poll).
Measurement only: not part of the service, and never on in production.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import json
import os
import select
import sys
import threading
import time

_OUT = os.environ.get("VMLEDGER_PASS_PROBE")
_passes: list[dict] = []
_current = threading.local()
_MASKS = {1: select.POLLIN, 2: select.POLLOUT, 3: select.POLLIN | select.POLLOUT}


def _counting_wait(gen, fileno, interval=0.0, timeout=None):
    """psycopg's ``wait_poll`` without its timeout handling, counting the polls that had to
    sleep (the socket not ready at once: a real round trip's wait, or a full send buffer)."""
    counts = _current.counts
    poll = select.poll()
    try:
        state = next(gen)
        poll.register(fileno, _MASKS[state])
        while True:
            events = poll.poll(0)
            if not events:
                started = time.perf_counter()
                events = poll.poll(max(1, int(interval * 1000)))
                counts[4] += 1
                counts[5] += time.perf_counter() - started
            if not events:
                gen.send(0)
                continue
            event = events[0][1]
            ready = (1 if event & select.POLLIN else 0) | (2 if event & select.POLLOUT else 0)
            state = gen.send(ready)
            poll.modify(fileno, _MASKS[state])
    except StopIteration as stop:
        return stop.value


def _wrap_wait(original):
    def wait(*args, **kwargs):
        counts = getattr(_current, "counts", None)
        if counts is None:
            return original(*args, **kwargs)
        started, sleeps = time.perf_counter(), counts[4]
        try:
            return _counting_wait(*args, **kwargs)
        finally:
            took = time.perf_counter() - started
            counts[0] += 1
            counts[1] += took
            site = counts[3].setdefault(_site(sys._getframe(1)), [0, 0.0, 0])
            site[0] += 1
            site[1] += took * 1000
            site[2] += counts[4] - sleeps
    return wait


def _site(frame) -> str:
    """The two innermost callers in the project's own code (``file:function:line``), the
    wrapper of the connection's waits left out."""
    found: list[str] = []
    while frame is not None and len(found) < 2:
        path = frame.f_code.co_filename
        if ("/projections/" in path or "/service/" in path) and "db_limits" not in path:
            found.append(f"{os.path.basename(path)}:{frame.f_code.co_name}:{frame.f_lineno}")
        frame = frame.f_back
    return " < ".join(found) or "?"


def _install(runner_module) -> None:
    from psycopg import waiting

    waiting.wait = _wrap_wait(waiting.wait)
    runner = runner_module.ProjectionRunner
    # One pass of the loop: _live_pass before the loop kept a LiveState, catch_up(live=...)
    # since (a catch_up without it is not the loop's).
    folded = not hasattr(runner, "_live_pass")
    live_pass = runner.catch_up if folded else runner._live_pass
    # Batches decode through BatchApplier.decode; older commits decoded in the runner itself.
    batches = sys.modules.get("projections.batches")
    decoder = getattr(batches, "BatchApplier", runner)
    wake, decode = runner.wake, decoder.decode

    def probed_wake(self):
        if not self._wake.is_set() and getattr(self, "_probe_woken", None) is None:
            self._probe_woken = time.monotonic()
        wake(self)

    def probed_pass(self, *args, **kwargs):
        if folded and kwargs.get("live") is None:
            return live_pass(self, *args, **kwargs)
        woken, self._probe_woken = getattr(self, "_probe_woken", None), None
        _current.counts = counts = [0, 0.0, 0, {}, 0, 0.0]
        start, cpu = time.monotonic(), time.thread_time()
        try:
            return live_pass(self, *args, **kwargs)
        finally:
            _current.counts = None
            _passes.append({
                "start": start, "woken": woken,
                "wall_ms": (time.monotonic() - start) * 1000,
                "cpu_ms": (time.thread_time() - cpu) * 1000,
                "waits": counts[0], "wait_ms": counts[1] * 1000,
                "events": counts[2], "sites": counts[3],
                "sleeps": counts[4], "sleep_ms": counts[5] * 1000,
            })

    def probed_decode(self, notifications):
        counts = getattr(_current, "counts", None)
        if counts is not None:
            counts[2] += len(notifications)
        return decode(self, notifications)

    setattr(runner, "catch_up" if folded else "_live_pass", probed_pass)
    runner.wake, decoder.decode = probed_wake, probed_decode


def _dump() -> None:
    if _passes:
        with open(_OUT, "a") as f:
            f.writelines(json.dumps(p) + "\n" for p in _passes)


class _Finder(importlib.abc.MetaPathFinder):
    """Runs ``_install`` once ``projections.runner`` has been executed."""

    def find_spec(self, name, path, target=None):
        if name != "projections.runner":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            _install(module)
        spec.loader.exec_module = exec_module
        return spec


if _OUT:
    sys.meta_path.insert(0, _Finder())
    atexit.register(_dump)
