"""P1 A/B: the API processes' CPU per command of this checkout against another checkout's (the
base, with its own environment), in short alternating windows of the P1 load.

The machine's speed drifts by tens of percent within minutes (a run of P1 on unchanged code
went from 0.91 to 1.31 ms of API CPU per command in one hour): two P1 runs minutes apart
cannot tell a 10 % change. Here both deployments stay up, each on its own scratch database,
and the load moves between them every few seconds (base, new, new, base, ...), each window
starting once both sides' read models have caught up, so both sides of each pair see the same
machine; the figure is the median of the pairs' ratios.

Usage: ``python bench/p1_ab.py --base /path/to/other/checkout`` (that checkout's
``.venv/bin/python`` runs it unless ``--base-python`` says otherwise).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from _common import (
    REPO, CpuMeter, Deployment, emit, parser, say, scratch_postgres, size_defaults,
)
from _load import run_load


def _wait_caught_up(url: str, timeout_s: float = 120.0) -> None:
    """Until every read model of ``url``'s deployment has applied the whole log: a window's
    projector catching up after it would otherwise run during the next window, the other
    side's, and take the machine from it."""
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            head, behind = conn.execute(
                "SELECT (SELECT coalesce(max(notification_id), 0) FROM vmledger_events), "
                "(SELECT min(position) FROM projection_tracking)").fetchone()
            if behind is None or behind >= head:
                return
            time.sleep(0.2)  # polling the database, with a deadline
    raise RuntimeError(f"the read models of {url} did not catch up in {timeout_s} s")


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--base", required=True, type=Path, help="the other checkout")
    p.add_argument("--base-python", help="its interpreter (default: BASE/.venv/bin/python)")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--api-workers", type=int, default=2)
    p.add_argument("--rounds", type=int, help="pairs of windows (default 6; --quick: 1)")
    p.add_argument("--seconds", type=float,
                   help="each window's measured part (default 8; --quick: 2)")
    p.add_argument("--warmup", type=float,
                   help="each window's unmeasured start (default 2; --quick: 1)")
    args = p.parse_args()
    size_defaults(args, {"rounds": 6, "seconds": 8.0, "warmup": 2.0},
                  {"rounds": 1, "seconds": 2.0, "warmup": 1.0})
    base_python = args.base_python or str(args.base / ".venv" / "bin" / "python")
    sides = {"base": (args.base.resolve(), base_python), "new": (REPO, sys.executable)}
    per_command: dict[str, list[float]] = {name: [] for name in sides}
    rates: dict[str, list[float]] = {name: [] for name in sides}

    with (scratch_postgres("p1ab_base") as base_url, scratch_postgres("p1ab_new") as new_url,
          tempfile.TemporaryDirectory() as tmp_base, tempfile.TemporaryDirectory() as tmp_new,
          Deployment(base_url, tmp_base, api_workers=args.api_workers,
                     repo=sides["base"][0], python=sides["base"][1]) as base,
          Deployment(new_url, tmp_new, api_workers=args.api_workers) as new):
        deployments = {"base": base, "new": new}
        for round_number in range(args.rounds):
            order = ("base", "new") if round_number % 2 == 0 else ("new", "base")
            for name in order:
                deployment = deployments[name]
                for other in deployments.values():  # no window pays for the last one's
                    _wait_caught_up(other.database_url)
                meter = CpuMeter({"api": deployment.pids("serve")})
                outcome = run_load(deployment.base_url, clients=args.clients,
                                   warmup_s=args.warmup, seconds=args.seconds,
                                   on_window_start=meter.start, on_window_end=meter.stop)
                commands = len(outcome.acks)
                per_command[name].append(meter.used["api"] * 1000 / max(commands, 1))
                rates[name].append(commands / outcome.seconds)
            say(f"round {round_number + 1}: API CPU ms per command base "
                f"{per_command['base'][-1]:.3f}, new {per_command['new'][-1]:.3f}; "
                f"commands/s base {rates['base'][-1]:,.0f}, new {rates['new'][-1]:,.0f}")

    cpu_ratios = [n / b for n, b in zip(per_command["new"], per_command["base"], strict=True)]
    rate_ratios = [n / b for n, b in zip(rates["new"], rates["base"], strict=True)]
    cpu_ratio, rate_ratio = statistics.median(cpu_ratios), statistics.median(rate_ratios)
    say(f"median ratio new/base: API CPU per command {cpu_ratio:.3f} "
        f"(pairs {', '.join(f'{r:.3f}' for r in cpu_ratios)}); "
        f"commands/s {rate_ratio:.3f}")
    emit("P1 A/B", "API CPU per command, this checkout / the base, paired windows",
         raw={"base": str(sides["base"][0]), "api_cpu_ms_per_command": per_command,
              "commands_per_s": rates, "cpu_ratios": cpu_ratios, "rate_ratios": rate_ratios,
              "commands_per_s_ratio": rate_ratio},
         ratio=cpu_ratio, goal="< 1 (less CPU than the base)", met=cpu_ratio < 1)


if __name__ == "__main__":
    main()
