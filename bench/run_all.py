"""Run the five figure scripts one after the other and collect their last lines.

    python bench/run_all.py [--quick] [--out results.jsonl] [--p3-events N]
                            [--p4-max-jobs N | --p4-whole-shard] [--p4-trace PATH]

Each script's output goes to stdout line by line as it runs; its final JSON line is also
appended to ``--out`` (one object per line). A script that fails is reported and the others
still run. SIGINT (Ctrl-C) or SIGTERM is passed on to the running script, which stops its
deployment and drops its scratch database; run_all waits for that, runs no further script and
exits with 128 + the signal's number.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = ("p1_commands", "p2_getvm", "p3_rebuild", "p4_replay", "p5_projection_lag")


def last_json(lines: Iterable[str]) -> dict | None:
    """The last line of ``lines`` if it is a JSON object, else ``None``."""
    last = ""
    for line in lines:
        if line.strip():
            last = line.strip()
    try:
        found = json.loads(last)
    except json.JSONDecodeError:
        return None
    return found if isinstance(found, dict) else None


def run_script(command: list[str], received: list[int]) -> tuple[int, list[str]]:
    """Run ``command``, echoing its stdout line by line as it comes; its exit status and
    lines. A SIGINT or SIGTERM sent to run_all meanwhile is forwarded to it (and noted in
    ``received``), and run_all keeps reading until the script has finished its clean-up."""
    started: list[subprocess.Popen[str]] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        if started and started[0].poll() is None:
            started[0].send_signal(signum)

    # installed first: a signal from the moment the script exists on reaches it
    previous = {each: signal.signal(each, forward) for each in (signal.SIGINT, signal.SIGTERM)}
    lines: list[str] = []
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, bufsize=1)
        started.append(process)
        if received:  # it came while the script was being started
            process.send_signal(received[0])
        assert process.stdout is not None
        for line in process.stdout:
            print(line, end="", flush=True)
            lines.append(line)
        return process.wait(), lines
    finally:
        for each, handler in previous.items():
            signal.signal(each, handler)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="pass --quick to every script (a size option given here still wins)")
    p.add_argument("--out", help="append each script's JSON line to this file")
    p.add_argument("--p3-events", type=int, help="bench/p3_rebuild.py --events")
    p.add_argument("--p4-max-jobs", type=int, help="bench/p4_replay.py --max-jobs")
    p.add_argument("--p4-whole-shard", action="store_true")
    p.add_argument("--p4-trace", metavar="PATH",
                   help="bench/p4_replay.py --trace (default: $VMLEDGER_TRACE, else its own)")
    p.add_argument("--only", nargs="*", choices=SCRIPTS, help="run only these")
    args = p.parse_args()
    extra: dict[str, list[str]] = {name: [] for name in SCRIPTS}
    if args.p3_events:
        extra["p3_rebuild"] += ["--events", str(args.p3_events)]
    if args.p4_max_jobs:
        extra["p4_replay"] += ["--max-jobs", str(args.p4_max_jobs)]
    if args.p4_whole_shard:
        extra["p4_replay"].append("--whole-shard")
    if args.p4_trace:
        extra["p4_replay"] += ["--trace", args.p4_trace]
    failed = []
    received: list[int] = []
    for name in args.only or SCRIPTS:
        command = [sys.executable, str(HERE / f"{name}.py"), *extra[name]]
        if args.quick:
            command.append("--quick")
        print(f"== {' '.join(command[1:])}", flush=True)
        returncode, lines = run_script(command, received)
        result = last_json(lines)
        if result is None or returncode != 0:
            failed.append(name)
        if result is not None and args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(result) + "\n")
        if received:
            print(f"run_all: {signal.Signals(received[0]).name}: {name} stopped; "
                  "no further script run", file=sys.stderr, flush=True)
            raise SystemExit(128 + received[0])
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
