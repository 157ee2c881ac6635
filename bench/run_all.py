"""Run the five figure scripts one after the other and collect their last lines.

    python bench/run_all.py [--quick] [--out results.jsonl] [--p3-events N]
                            [--p4-max-jobs N | --p4-whole-shard]

Each script's output goes to stdout as it runs; its final JSON line is also appended to
``--out`` (one object per line). A script that fails is reported and the others still run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = ("p1_commands", "p2_getvm", "p3_rebuild", "p4_replay", "p5_projection_lag")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="pass --quick to every script")
    p.add_argument("--out", help="append each script's JSON line to this file")
    p.add_argument("--p3-events", type=int, help="bench/p3_rebuild.py --events")
    p.add_argument("--p4-max-jobs", type=int, help="bench/p4_replay.py --max-jobs")
    p.add_argument("--p4-whole-shard", action="store_true")
    p.add_argument("--only", nargs="*", choices=SCRIPTS, help="run only these")
    args = p.parse_args()
    extra = {name: [] for name in SCRIPTS}
    if args.p3_events:
        extra["p3_rebuild"] += ["--events", str(args.p3_events)]
    if args.p4_max_jobs:
        extra["p4_replay"] += ["--max-jobs", str(args.p4_max_jobs)]
    if args.p4_whole_shard:
        extra["p4_replay"].append("--whole-shard")
    failed = []
    for name in args.only or SCRIPTS:
        command = [sys.executable, str(HERE / f"{name}.py"), *extra[name]]
        if args.quick:
            command.append("--quick")
        print(f"== {' '.join(command[1:])}", flush=True)
        done = subprocess.run(command, stdout=subprocess.PIPE, text=True)
        print(done.stdout, end="", flush=True)
        last = done.stdout.strip().splitlines()[-1:] or [""]
        try:
            result = json.loads(last[0])
        except json.JSONDecodeError:
            failed.append(name)
            continue
        if done.returncode != 0:
            failed.append(name)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(result) + "\n")
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
