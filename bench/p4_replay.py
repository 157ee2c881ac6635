"""P4: the trace replay on SQLite, commands per second, divided by a plain eventsourcing
get + command + save loop on the same SQLite in the same run. Goal: >= 3.0 (the replay
group-commits many VMs' commands a transaction; the reference pays one commit a command).

The replay is what ``vmledger replay TRACE --max-jobs N`` runs (``service.replay.replay``, then
``catch_up`` of the read models), called in this process so that its commands can be counted:
a command is one load-decide-save of the command handlers (``Commands._save``, whether the API,
the worker or the replay called it), the same unit as one turn of the reference loop. The
catch-up of the read models is timed apart and not in the figure.

The reference loop is the library alone: the service's ``VmLedger`` application with the same
settings (same SQLite, same aggregate cache, fast-forwarded on each get as the library does
it, as in every earlier run), ``repository.get`` of a VM, one ``Vm`` command
(``update_metadata``, one event), ``app.save``; over 1,000 VMs in turn, so their streams grow
from 2 to about 20 events. It runs on a sibling SQLite file in the same directory, in bursts of
200 turns after every 1,000 commands of the replay (and once before and after), so that both
see the machine at the same moments; the bursts' time is taken out of the replay's.

The default replays the shard's first 90 jobs (16,211 rows, about 60,000 commands: a run of
15 to 20 s), so that a run takes well under a few minutes; ``--whole-shard`` replays all
450,146 rows. It was 80 jobs (1,511 rows, 6,021 commands) until session 21: that slice's rows
lie among the file's first 295,296 lines, which the trace's reader (``service.replay.ahead``)
must parse to pick them out, and that scan, with the reader's start, took about as long as the
replay's 6,021 commands (a one-job replay takes 0.6 s), so the figure measured the reading
more than the replay's commands (docs/performance.md, "Session 21").

With ``--whole-shard`` the run also judges P4′: the wall time of the replay and the read
models' catch-up together (the reference's bursts taken out, as for P4), goal <= 10 minutes
(a line of its own, and ``p4_prime`` in the JSON).

The trace is ``--trace PATH``, else ``$VMLEDGER_TRACE``, else the shard on the shared volume.

    python bench/p4_replay.py [--quick] [--max-jobs 90] [--whole-shard] [--trace PATH]
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time
import uuid
from pathlib import Path

from _common import emit, parser, say, size_defaults

GOAL = 3.0
GOAL_PRIME_MINUTES = 10.0
DEFAULT_TRACE = Path("/work/shared/data/google2011_task_events_part-00000-of-00500.csv.gz")
TRACE_ENV = "VMLEDGER_TRACE"


def trace_path(given: str | None) -> Path:
    """The trace to replay: ``given`` (``--trace``), else ``$VMLEDGER_TRACE``, else
    ``DEFAULT_TRACE``. Raises ``SystemExit(2)`` with a one-line message naming both when the
    file is not there."""
    path = Path(given or os.environ.get(TRACE_ENV) or DEFAULT_TRACE)
    if not path.is_file():
        print(f"p4_replay: no trace file at {path} (give --trace PATH or set ${TRACE_ENV})",
              file=sys.stderr)
        raise SystemExit(2)
    return path


def prime_figure(replay_s: float, catch_up_s: float) -> dict[str, float | bool | str]:
    """P4′ of a whole-shard run: replay plus catch-up wall time in minutes against its goal."""
    minutes = (replay_s + catch_up_s) / 60
    return {"minutes": round(minutes, 2), "replay_s": round(replay_s, 1),
            "catch_up_s": round(catch_up_s, 1), "goal": f"<= {GOAL_PRIME_MINUTES:.0f} min",
            "met": minutes <= GOAL_PRIME_MINUTES}


class ReferenceLoop:
    """get + command + save with the library alone, on ``database_url``."""

    def __init__(self, database_url: str, vms: int = 1000):
        from domain.vm import Vm, make_cause
        from service.commands.application import VmLedger
        from service.settings import Settings

        # The library's own loop, safe beside other writers as the service is: its cache
        # fast-forwarded on every get (the service turns the library's fast-forward off
        # because its own loader does it: service/commands/aggregate_cache.py)
        self.app = VmLedger(env={**Settings(database_url=database_url).eventsourcing_env(),
                                 "AGGREGATE_CACHE_FASTFORWARD": "y"})
        self.cause = make_cause("bench")
        self.ids = []
        for n in range(vms):
            vm = Vm.create(vm_uuid=uuid.uuid4(), owner_uuid=str(uuid.uuid4()), brand="bhyve",
                           ram=1024, provision_job_uuid=str(uuid.uuid4()), cause=self.cause,
                           alias=f"ref-{n}")
            self.app.save(vm)
            self.ids.append(vm.id)
        self.turns = 0
        self.seconds = 0.0
        self.cpu_seconds = 0.0

    def run(self, turns: int) -> None:
        """``turns`` more commands, timed (wall and CPU)."""
        started, cpu = time.perf_counter(), time.process_time()
        for _ in range(turns):
            vm = self.app.repository.get(self.ids[self.turns % len(self.ids)])
            vm.update_metadata({"alias": f"ref-{self.turns}"}, cause=self.cause)
            self.app.save(vm)
            self.turns += 1
        self.seconds += time.perf_counter() - started
        self.cpu_seconds += time.process_time() - cpu

    @property
    def per_s(self) -> float:
        return self.turns / self.seconds

    def close(self) -> None:
        self.app.close()


def cpu_time() -> float:
    """CPU seconds of this process and of its children that have ended (the replay's reader
    ahead, ``service.replay.ahead``, is one: its CPU counts as the replay's)."""
    own, children = (resource.getrusage(w) for w in (resource.RUSAGE_SELF,
                                                    resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_replay(database_url: str, trace: Path, max_jobs: int | None, reference: ReferenceLoop,
               every: int, burst: int) -> dict[str, float]:
    """The replay, with a burst of the reference loop after every ``every`` commands (its
    time is taken out of the replay's), so both see the same machine at the same moments."""
    from service.container import Services
    from service.replay import run as replay_module
    from service.settings import Settings

    services = Services.build(Settings(database_url=database_url))
    saves = [0]

    def after_save(_position: int) -> None:
        saves[0] += 1
        if saves[0] % every == 0:
            reference.run(burst)

    services.commands.after_save.append(after_save)
    try:
        head_before = services.projections.head()
        ref_seconds, ref_cpu = reference.seconds, reference.cpu_seconds
        started, cpu = time.perf_counter(), cpu_time()
        summary = replay_module.replay(services, trace, max_jobs=max_jobs)
        seconds = time.perf_counter() - started - (reference.seconds - ref_seconds)
        cpu_seconds = cpu_time() - cpu - (reference.cpu_seconds - ref_cpu)
        commands = saves[0]
        events = services.projections.head() - head_before
        catch_up_started = time.perf_counter()  # wall clock, for P4′
        replay_module.catch_up(services, summary)
        catch_up_wall_s = time.perf_counter() - catch_up_started
    finally:
        services.close()
    return {"commands": commands, "seconds": seconds, "commands_per_s": commands / seconds,
            "cpu_ms_per_command": 1000 * cpu_seconds / max(commands, 1),
            "events": events, "rows_read": summary.rows_read,
            "rows_applied": summary.rows_applied, "vms_created": summary.vms_created,
            "rows_per_s": summary.rows_read / seconds, "catch_up_s": summary.catch_up_s,
            "catch_up_wall_s": catch_up_wall_s}


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--max-jobs", type=int,
                   help="replay the first N job_ids of the shard (vmledger replay --max-jobs; "
                   "default 90; --quick: 20)")
    p.add_argument("--trace", metavar="PATH",
                   help=f"the trace shard (default: ${TRACE_ENV} if set, else {DEFAULT_TRACE})")
    p.add_argument("--whole-shard", action="store_true", help="replay every row (long)")
    p.add_argument("--every", type=int,
                   help="run a burst of the reference loop after every N replay commands "
                   "(default 1,000; --quick: 100)")
    p.add_argument("--burst", type=int,
                   help="reference turns per burst (default 200; --quick: 50)")
    p.add_argument("--profile", metavar="DIR", help="pyinstrument the replay (slower)")
    args = p.parse_args()
    size_defaults(args, {"max_jobs": 90, "every": 1000, "burst": 200},
                  {"max_jobs": 20, "every": 100, "burst": 50})
    trace = trace_path(args.trace)
    max_jobs = None if args.whole_shard else args.max_jobs
    with tempfile.TemporaryDirectory() as tmp:
        reference = ReferenceLoop(f"sqlite:///{tmp}/reference.db")
        reference.run(args.burst)
        say(f"reference loop before: {reference.per_s:,.0f} commands/s")
        if args.profile:
            from pyinstrument import Profiler

            profiler = Profiler(interval=0.002)
            profiler.start()
        done = run_replay(f"sqlite:///{tmp}/replay.db", trace, max_jobs, reference,
                          args.every, args.burst)
        if args.profile:
            profiler.stop()
            Path(args.profile).mkdir(parents=True, exist_ok=True)
            out = Path(args.profile) / "p4-replay.txt"
            out.write_text(profiler.output_text(unicode=False, show_all=False))
            say(f"profile written to {out}")
        reference.run(args.burst)
        reference.close()
    say(f"replay ({'whole shard' if max_jobs is None else f'--max-jobs {max_jobs}'}): "
        f"{done['rows_read']:,} rows, {done['vms_created']:,} VMs, {done['commands']:,} "
        f"commands, {done['events']:,} events in {done['seconds']:.1f} s = "
        f"{done['commands_per_s']:,.0f} commands/s ({done['rows_per_s']:,.0f} rows/s), "
        f"{done['cpu_ms_per_command']:.2f} CPU ms per command; read models caught up in "
        f"{done['catch_up_s']:.1f} s")
    ref_cpu_ms = 1000 * reference.cpu_seconds / reference.turns
    say(f"reference loop, {reference.turns:,} turns in bursts of {args.burst} between the "
        f"replay's commands: {reference.per_s:,.0f} commands/s, {ref_cpu_ms:.2f} CPU ms each")
    ratio = done["commands_per_s"] / reference.per_s
    say(f"P4 = {done['commands_per_s']:,.0f} / {reference.per_s:,.0f} = {ratio:.3f} "
        f"(goal >= {GOAL}); by CPU time: {ref_cpu_ms / done['cpu_ms_per_command']:.3f}")
    prime = None
    if max_jobs is None:
        prime = prime_figure(done["seconds"], done["catch_up_wall_s"])
        say(f"P4′ = {prime['replay_s']:.1f} s replay + {prime['catch_up_s']:.1f} s catch-up = "
            f"{prime['minutes']:.2f} min (goal {prime['goal']}; met: "
            f"{'not judged, --quick' if args.quick else str(prime['met']).lower()})")
    emit("P4", "trace replay commands/s on SQLite / plain eventsourcing get+command+save loop",
         raw={"replay": {k: round(v, 2) for k, v in done.items()},
              "reference_commands_per_s": round(reference.per_s, 1),
              "reference_turns": reference.turns,
              "reference_cpu_ms_per_command": round(ref_cpu_ms, 3),
              "ratio_by_cpu_time": round(ref_cpu_ms / done["cpu_ms_per_command"], 4),
              "max_jobs": max_jobs, "events_per_command": round(done["events"] /
                                                                max(done["commands"], 1), 2)},
         ratio=ratio, goal=f">= {GOAL}", met=ratio >= GOAL, profiled=bool(args.profile),
         **({} if prime is None else {"p4_prime": prime}))


if __name__ == "__main__":
    main()
