"""P5: projection lag under the P1 load: from a command's acknowledgement (the client has the
202 and its ``x-log-position``) to the moment ``vm_view`` has applied that position, p99.
Goal: <= 50 ms.

The same deployment and load as P1 (``bench/_load.py``; 16 clients, production mode with
``vmledger project`` as its own process, every setting at its default). A poller process reads
``vm_view``'s tracking position every 2 ms and notes when each new position was first seen
(``time.monotonic``, which all processes on the machine share). A command's lag is the first
moment its position was seen minus its acknowledgement, so it is exact to the poll interval
plus one query (about 3 ms); a command already visible when acknowledged counts 0.

``--passes`` also times every pass of the runner in the ``project`` process
(``bench/pass_probe``): how many waits for the database it made, its wall and CPU time, and
how long after a wake-up it started; less noisy than the lag on a shared machine.

    python bench/p5_projection_lag.py [--quick] [--seconds 30] [--clients 16] [--passes [FILE]]
        [--env NAME=VALUE ...]
"""

from __future__ import annotations

import bisect
import json
import os
import subprocess
import sys
import tempfile
import time

from _common import (
    Deployment, emit, parser, percentile, say, scratch_postgres, size_defaults,
)
from _signals import ended_on_exit

GOAL_MS = 50.0
POLL_S = 0.002
PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pass_probe")


def poller(url: str, out: str, seconds: float) -> None:
    """Child process: note (monotonic time, position) whenever vm_view's position moves."""
    import signal

    import psycopg

    # The parent ends it (SIGTERM) when it stops, interrupted or not: no clean-up of its own
    # to run, so it neither catches a Ctrl-C nor turns SIGTERM into an exit mid-query.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    samples: list[tuple[float, int]] = []
    last = -1
    deadline = time.monotonic() + seconds
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT position FROM projection_tracking WHERE name = 'vm_view'").fetchone()
            seen = time.monotonic()
            position = row[0] if row else 0
            if position != last:
                samples.append((seen, position))
                last = position
            time.sleep(POLL_S)
    with open(out, "w") as f:
        json.dump(samples, f)


def lags_ms(acks: list[tuple[float, int, float, str]], samples: list[tuple[float, int]]
            ) -> tuple[list[float], int]:
    """Each command's lag (ms), and how many were never seen applied."""
    found, unseen = [], 0
    for lag in _lags(acks, samples):
        if lag is None:
            unseen += 1
        else:
            found.append(lag)
    return found, unseen


def _lags(acks: list[tuple[float, int, float, str]], samples: list[tuple[float, int]]
          ) -> list[float | None]:
    times = [t for t, _ in samples]
    positions = [p for _, p in samples]
    # positions only move forward: the first sample at or past a position
    lags: list[float | None] = []
    for acked, position, _latency, _command in acks:
        index = bisect.bisect_left(positions, position)
        lags.append(None if index == len(positions)
                    else max(0.0, (times[index] - acked) * 1000))
    return lags


def window_p99s(acks: list[tuple[float, int, float, str]], samples: list[tuple[float, int]],
                start: float, seconds: float = 5.0) -> list[float]:
    """p99 lag (ms) of each ``seconds`` slice of the window: how steady the figure was."""
    slices: dict[int, list[float]] = {}
    for ack, lag in zip(acks, _lags(acks, samples), strict=True):
        if lag is not None:
            slices.setdefault(int((ack[0] - start) // seconds), []).append(lag)
    return [round(percentile(v, 99), 1) for _, v in sorted(slices.items())]


def pass_summary(path: str, start: float, end: float) -> dict[str, float]:
    """Per-pass figures of the passes that began in the measured window and decoded events
    (``bench/pass_probe``): medians and p99s of waits, wall, CPU and wait time (ms), events
    a pass, and the delay from a wake-up to the pass it started (passes begun after an idle
    wait)."""
    with open(path) as f:
        every = [json.loads(line) for line in f]
    window = [p for p in every if start <= p["start"] <= end]
    passes = [p for p in window if p["events"]]
    summary: dict[str, float] = {"passes": len(passes), "empty_passes": len(window) - len(passes)}
    for key in ("waits", "sleeps", "wall_ms", "cpu_ms", "wait_ms", "events"):
        values = [p[key] for p in passes]
        summary[f"{key}_p50"] = round(percentile(values, 50), 2)
        summary[f"{key}_p99"] = round(percentile(values, 99), 2)
        summary[f"{key}_mean"] = round(sum(values) / len(values), 2) if values else float("nan")
    delays = [(p["start"] - p["woken"]) * 1000 for p in passes if p["woken"] is not None]
    summary["wake_delay_ms_p50"] = round(percentile(delays, 50), 2)
    summary["wake_delay_ms_p99"] = round(percentile(delays, 99), 2)
    return summary


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--poller":
        poller(sys.argv[2], sys.argv[3], float(sys.argv[4]))
        return
    from _load import run_load

    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--api-workers", type=int, default=2)
    p.add_argument("--seconds", type=float, help="measured window (default 30; --quick: 3)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="extra environment for the service processes")
    p.add_argument("--passes", nargs="?", const="", default=None, metavar="FILE",
                   help="time every pass of the runner (bench/pass_probe); FILE keeps the "
                   "raw lines")
    args = p.parse_args()
    size_defaults(args, {"seconds": 30.0}, {"seconds": 3.0})
    warmup = 1.0 if args.quick else 4.0
    env = dict(item.split("=", 1) for item in args.env)
    passes: dict[str, float] | None = None

    with scratch_postgres("p5") as url, tempfile.TemporaryDirectory() as tmp:
        if args.passes is not None:
            env["VMLEDGER_PASS_PROBE"] = os.path.abspath(args.passes or f"{tmp}/passes.jsonl")
            env["PYTHONPATH"] = os.pathsep.join([os.environ["PYTHONPATH"], PROBE])
        with Deployment(url, tmp, api_workers=args.api_workers, env=env) as deployment:
            out = f"{tmp}/samples.json"
            watcher = subprocess.Popen([sys.executable, __file__, "--poller", url, out,
                                        str(warmup + args.seconds + 5)])
            say(f"load: {args.clients} clients, {args.api_workers} API processes, "
                f"{warmup:.0f} s warm-up + {args.seconds:.0f} s; vm_view polled every "
                f"{POLL_S * 1000:.0f} ms")
            with ended_on_exit(watcher):  # interrupted: the poller does not outlive the run
                outcome = run_load(deployment.base_url, clients=args.clients,
                                   warmup_s=warmup, seconds=args.seconds)
                watcher.wait()
        with open(out) as f:
            samples = [tuple(s) for s in json.load(f)]
        if args.passes is not None:  # written as the project process exited
            passes = pass_summary(env["VMLEDGER_PASS_PROBE"], outcome.started, outcome.ended)

    found, unseen = lags_ms(outcome.acks, samples)
    p50, p95, p99 = (percentile(found, q) for q in (50, 95, 99))
    slices = window_p99s(outcome.acks, samples, outcome.started)
    rate = len(outcome.acks) / outcome.seconds
    say(f"{len(outcome.acks):,} commands ({rate:,.1f}/s); lag to vm_view: p50 {p50:.1f} ms, "
        f"p95 {p95:.1f} ms, p99 {p99:.1f} ms, max {max(found, default=float('nan')):.1f} ms; "
        f"never seen: {unseen}")
    say(f"p99 of each 5 s of the window: {slices} ms")
    if passes is not None:
        say(f"passes that applied events: {passes}")
    say(f"P5 = p99 {p99:.1f} ms (goal <= {GOAL_MS:.0f} ms)")
    emit("P5", "projection lag, command acknowledged -> visible in vm_view, p99 under the P1 load",
         raw={"lag_ms_p50": round(p50, 2), "lag_ms_p95": round(p95, 2),
              "lag_ms_p99": round(p99, 2), "lag_ms_max": round(max(found, default=0), 2),
              "commands": len(outcome.acks), "commands_per_s": round(rate, 1),
              "never_seen": unseen, "poll_ms": POLL_S * 1000, "p99_ms_per_5s": slices,
              "passes": passes,
              "command_latency_ms_p50": round(percentile([a[2] * 1000 for a in outcome.acks],
                                                         50), 2)},
         ratio=None, goal=f"p99 <= {GOAL_MS:.0f} ms", met=p99 <= GOAL_MS and not unseen,
         p99_ms=round(p99, 2), setup={"clients": args.clients, "api_workers": args.api_workers,
                                      "env": env})


if __name__ == "__main__":
    main()
