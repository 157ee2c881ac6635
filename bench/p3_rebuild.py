"""P3: rebuild of every read model from a 1,000,000-event log, in log events per second,
divided by the raw notification-log read rate (``recorder.select_notifications``, no
decoding) in the same run; and the rebuild's peak RSS. Goals: >= 0.3; <= 300 MB.

The log is made by ``bench/_log.py`` (template VMs lived through the real service, cloned and
interleaved; 14 to 19 events per VM plus the servers' claims). The rebuild is what
``vmledger rebuild`` runs (``services.projections.rebuild()``: every read model, built beside
its live tables and switched), in a child process of its own, so its peak RSS
(``resource.getrusage``) is the rebuild's alone. The raw read runs in child processes too,
before and after the rebuild, in pages of 500 (the runner's batch) and of 5,000; the
reference is the fastest of them. A last child reads and decodes the log as the runner does,
with no read model: the most a rebuild in one process could reach, printed beside P3.

The default log has 100,000 events so that a run takes a few minutes; the figure in
docs/performance.md is from ``--events 1000000``.

With ``--processes 2`` (or ``VMLEDGER_REBUILD_PROCESSES``) the rebuild's read models are built
in two processes, the rebuild's and a child of it (``projections.parallel_rebuild``); the
peak RSS is then reported for the rebuild's process, for its child, and for both together.

    python bench/p3_rebuild.py [--quick] [--backend postgres|sqlite|both] [--events 1000000]
        [--processes 2]
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from _common import emit, parser, say, scratch_postgres, size_defaults

GOAL_RATIO = 0.3
GOAL_RSS_MB = 300


def _rss_now_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def child(mode: str, url: str, page: int, processes: int = 0) -> None:
    """Run in a child process; print one JSON line. For the rebuild, ``page`` other than 0
    replaces the runner's rebuild batch size (a what-if: ``--batch-size``), and
    ``processes`` other than 0 the processes it builds in (``--processes``)."""
    from service.container import Services
    from service.settings import Settings

    services = Services.build(Settings(database_url=url))
    if mode == "rebuild" and page:
        services.projections.rebuild_batch_size = page
    if mode == "rebuild" and processes:
        services.projections.rebuild_processes = processes
    rss_built = _rss_now_mib()
    try:
        started = time.perf_counter()
        if mode in ("read", "decode"):
            count, position = 0, 0
            while page_ := services.app.recorder.select_notifications(
                    position, page, inclusive_of_start=False):
                if mode == "decode":  # and no read model: the most one process could reach
                    services.projections.decode(page_)
                count += len(page_)
                position = page_[-1].id
            result = {"events": count}
        else:
            result = {"applied": services.projections.rebuild(),
                      "read_models": list(services.projections.read_models),
                      "batch_size": services.projections.rebuild_batch_size,
                      "processes": getattr(services.projections, "rebuild_processes", 1)}
        result["seconds"] = time.perf_counter() - started
        result["head"] = services.projections.head()
    finally:
        services.close()
    result["rss_after_build_mib"] = round(rss_built, 1)
    # CPU of this process and of its children (a parallel rebuild's), start-up included
    result["cpu_s"] = round(sum(
        usage.ru_utime + usage.ru_stime for usage in (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN))), 2)
    result["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    # a parallel rebuild's processes: the largest one's peak (what getrusage keeps)
    result["peak_rss_children_mib"] = round(
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)
    print(json.dumps(result), flush=True)


def run_child(mode: str, url: str, page: int = 0, profile: str | None = None,
              processes: int = 0) -> dict:
    command = [sys.executable, __file__, "--child", mode, url, str(page), str(processes)]
    if profile:
        from _profile import py_spy

        out = os.path.join(profile, f"p3-{mode}-{url.split(':', 1)[0]}.txt")
        os.makedirs(profile, exist_ok=True)
        command = [py_spy(), "record", "--rate", "100", "--format", "raw", "--subprocesses",
                   "-o", out, "--",
                   *command]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} child failed:\n{done.stderr[-3000:]}")
    return json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])


def measure(backend: str, url: str, args) -> dict:
    from service.container import Services
    from service.settings import Settings

    from _log import build_log

    services = Services.build(Settings(database_url=url))
    try:
        made = build_log(services, args.events)
    finally:
        services.close()
    head = made["head"]
    say(f"[{backend}] log: {head:,} events ({made['templates']} template VMs of "
        f"{made['mean_events_per_vm']} events each on average, cloned) built in "
        f"{made['build_s']} s")
    reads = []
    for page in (500, 5000):
        reads.append(run_child("read", url, page))
        say(f"[{backend}] raw read, pages of {page}: "
            f"{reads[-1]['events'] / reads[-1]['seconds']:,.0f} events/s")
    rebuild = run_child("rebuild", url, args.batch_size, profile=args.profile,
                        processes=args.processes)
    rate = head / rebuild["seconds"]
    say(f"[{backend}] rebuild of {', '.join(rebuild['read_models'])} in "
        f"{rebuild.get('processes', 1)} process(es): {rebuild['seconds']:.1f} s, "
        f"{rebuild['cpu_s']:.1f} s of CPU"
        f" = {rate:,.0f} log events/s ({rebuild['applied']:,} events applied in all); "
        f"peak RSS {rebuild['peak_rss_mib']:.0f} MiB (after start-up "
        f"{rebuild['rss_after_build_mib']:.0f} MiB"
        + (f"; the largest child's {rebuild['peak_rss_children_mib']:.0f} MiB)"
           if rebuild.get("processes", 1) > 1 else ")"))
    for page in (500, 5000):
        reads.append(run_child("read", url, page))
        say(f"[{backend}] raw read, pages of {page} (after): "
            f"{reads[-1]['events'] / reads[-1]['seconds']:,.0f} events/s")
    reference = max(r["events"] / r["seconds"] for r in reads)
    ratio = rate / reference
    decoded = run_child("decode", url, 5000)
    decode_rate = decoded["events"] / decoded["seconds"]
    say(f"[{backend}] read and decoded, no read model (one process's ceiling): "
        f"{decode_rate:,.0f} events/s = {decode_rate / reference:.3f} of the raw read")
    processes = rebuild.get("processes", 1)
    # at most, all processes together: the rebuild's (which builds one group itself) and
    # each of its children at the largest one's peak
    peak_all = rebuild["peak_rss_mib"] + (processes - 1) * rebuild["peak_rss_children_mib"]
    say(f"[{backend}] P3 = {rate:,.0f} / {reference:,.0f} = {ratio:.3f} (goal >= {GOAL_RATIO}); "
        f"peak RSS {peak_all:.0f} MiB in all (goal <= {GOAL_RSS_MB} MB)")
    return {
        "log_events": head, "log_build_s": made["build_s"],
        "rebuild_s": round(rebuild["seconds"], 2), "rebuild_cpu_s": rebuild["cpu_s"],
        "rebuild_events_per_s": round(rate, 1),
        "events_applied": rebuild["applied"], "read_models": rebuild["read_models"],
        "batch_size": rebuild["batch_size"],
        "raw_read_events_per_s": {f"page_{r_page}_{when}": round(r["events"] / r["seconds"], 1)
                                  for r, (when, r_page) in zip(reads, [
                                      ("before", 500), ("before", 5000),
                                      ("after", 500), ("after", 5000)], strict=True)},
        "reference_events_per_s": round(reference, 1),
        "read_and_decode_events_per_s": round(decode_rate, 1),
        "read_and_decode_ratio": round(decode_rate / reference, 4),
        "peak_rss_rebuild_process_mib": rebuild["peak_rss_mib"],
        "peak_rss_children_mib": rebuild["peak_rss_children_mib"],
        "processes": processes,
        "peak_rss_all_mib": round(peak_all, 1),
        "rss_after_start_mib": rebuild["rss_after_build_mib"],
        "ratio": round(ratio, 4),
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("postgres", "sqlite", "both"), default="both")
    p.add_argument("--events", type=int,
                   help="log size (default 100,000; --quick: 20,000; the figure is defined "
                   "at 1,000,000: about 20 minutes for both backends on 2 cores)")
    p.add_argument("--profile", metavar="DIR", help="py-spy the rebuild child")
    p.add_argument("--batch-size", type=int, default=0,
                   help="what-if: the runner's batch size for the rebuild (default: the "
                   "service's own rebuild_batch_size, 25,000)")
    p.add_argument("--processes", type=int, default=0,
                   help="processes the rebuild builds the read models in (default: the "
                   "service's VMLEDGER_REBUILD_PROCESSES)")
    args = p.parse_args()
    size_defaults(args, {"events": 100_000}, {"events": 20_000})
    if args.profile:
        from _profile import py_spy

        py_spy()  # refuses now, before any work, when py-spy is missing
    results = {}
    for backend in (("postgres", "sqlite") if args.backend == "both" else (args.backend,)):
        if backend == "postgres":
            with scratch_postgres("p3") as url:
                results[backend] = measure(backend, url, args)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                results[backend] = measure(backend, f"sqlite:///{tmp}/p3.db", args)
    main_result = results.get("postgres", results.get("sqlite"))
    met = all(r["ratio"] >= GOAL_RATIO and r["peak_rss_all_mib"] * 1.048576 <= GOAL_RSS_MB
              for r in results.values())
    emit("P3", "rebuild of all read models, log events/s / raw notification-log read rate; "
         "peak RSS", raw=results, ratio=main_result["ratio"],
         goal=f">= {GOAL_RATIO}; peak RSS <= {GOAL_RSS_MB} MB", met=met,
         # the judged figure: every process of the rebuild together (the per-process
         # peaks are under raw)
         peak_rss_mib=main_result["peak_rss_all_mib"], profiled=bool(args.profile))


if __name__ == "__main__":
    main()
