"""The benchmark scripts' cheap parts (bench/): their JSON line, their options, their clean-up
on a signal and run_all's streaming and forwarding. No benchmark runs here."""

from __future__ import annotations

import argparse
import json
import math
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(scope="module")
def bench():
    """The bench directory importable; importing ``_common`` installs its SIGINT/SIGTERM
    handlers, so pytest's own are put back afterwards."""
    before = {each: signal.getsignal(each) for each in (signal.SIGINT, signal.SIGTERM)}
    sys.path.insert(0, str(BENCH))
    try:
        import _common
        import console_pages
        import p4_replay
        import run_all
    finally:
        for each, handler in before.items():
            signal.signal(each, handler)
    yield argparse.Namespace(common=_common, console_pages=console_pages,
                             p4_replay=p4_replay, run_all=run_all)
    sys.path.remove(str(BENCH))


def _line(bench, *, quick: bool, raw: dict, met: bool | None = True, **extra) -> dict:
    text = bench.common.result_line("P9", "a figure", raw=raw, ratio=1.5, goal=">= 1",
                                    met=met, quick=quick, **extra)
    return json.loads(text)  # strict JSON: json.loads would accept NaN, so check the text too


def test_non_finite_numbers_become_null_at_every_depth(bench):
    text = bench.common.result_line(
        "P9", "a figure", raw={"p99": math.nan, "nested": {"rate": math.inf},
                               "listed": [1.0, -math.inf]},
        ratio=math.nan, goal="", met=None, quick=False, p99_ms=math.nan)
    assert "NaN" not in text and "Infinity" not in text
    line = json.loads(text)
    assert line["raw"] == {"p99": None, "nested": {"rate": None}, "listed": [1.0, None]}
    assert line["ratio"] is None and line["p99_ms"] is None


def test_a_quick_run_judges_nothing_not_even_the_verdicts_in_raw(bench):
    line = _line(bench, quick=True, raw={"p1_prime_met": True, "rate": 3.0,
                                         "inner": {"api_cpu_ms_per_command_met": False}},
                 p4_prime={"minutes": 3.0, "met": True})
    assert line["met"] is None
    assert line["raw"] == {"p1_prime_met": None, "rate": 3.0,
                           "inner": {"api_cpu_ms_per_command_met": None}}
    assert line["p4_prime"] == {"minutes": 3.0, "met": None}


def test_a_full_run_keeps_its_verdicts(bench):
    line = _line(bench, quick=False, raw={"p1_prime_met": False}, met=True)
    assert line["met"] is True and line["raw"] == {"p1_prime_met": False}


@pytest.mark.parametrize(("argv", "expected"), [
    ([], {"seconds": 30.0, "events": 100}),
    (["--quick"], {"seconds": 3.0, "events": 100}),  # events has no quick default
    (["--quick", "--seconds", "7"], {"seconds": 7.0, "events": 100}),
    (["--seconds", "7", "--events", "5"], {"seconds": 7.0, "events": 5}),
])
def test_an_explicit_size_wins_over_quick(bench, argv, expected):
    p = bench.common.parser("test")
    p.add_argument("--seconds", type=float)
    p.add_argument("--events", type=int)
    args = p.parse_args(argv)
    bench.common.size_defaults(args, {"seconds": 30.0, "events": 100}, {"seconds": 3.0})
    assert {"seconds": args.seconds, "events": args.events} == expected


def test_a_missing_trace_is_one_line_naming_the_option_and_variable(bench, tmp_path,
                                                                     monkeypatch, capsys):
    monkeypatch.delenv("VMLEDGER_TRACE", raising=False)
    with pytest.raises(SystemExit) as raised:
        bench.p4_replay.trace_path(str(tmp_path / "absent.csv.gz"))
    assert raised.value.code == 2
    message = capsys.readouterr().err.strip()
    assert "\n" not in message and "--trace" in message and "$VMLEDGER_TRACE" in message
    present = tmp_path / "trace.csv.gz"
    present.write_bytes(b"")
    monkeypatch.setenv("VMLEDGER_TRACE", str(present))
    assert bench.p4_replay.trace_path(None) == present  # the variable, when no option
    assert bench.p4_replay.trace_path(str(present)) == present


def test_p4_prime_is_replay_plus_catch_up_against_ten_minutes(bench):
    assert bench.p4_replay.prime_figure(540.0, 30.0) == {
        "minutes": 9.5, "replay_s": 540.0, "catch_up_s": 30.0, "goal": "<= 10 min",
        "met": True}
    assert bench.p4_replay.prime_figure(590.0, 30.0)["met"] is False


def test_the_console_bench_writes_rows_the_read_models_accept(bench, tmp_path):
    from service.container import Services
    from service.settings import Settings

    services = Services.build(Settings(database_url=f"sqlite:///{tmp_path / 'c.db'}",
                                       sim_servers=1))
    try:
        services.projections.catch_up()
        owner = bench.console_pages.populate(services, 60)
        counted = services.db.one("SELECT count(*) AS n FROM vm_view WHERE owner_uuid = ?",
                                  (owner,))
        assert counted == {"n": 1}
    finally:
        services.close()


def test_run_all_takes_the_last_json_line(bench):
    assert bench.run_all.last_json(["text\n", '{"figure": "P1"}\n', "\n"]) == {"figure": "P1"}
    assert bench.run_all.last_json(["text\n", "Traceback ...\n"]) is None
    assert bench.run_all.last_json([]) is None


def _start(code: str, tmp_path: Path) -> subprocess.Popen[str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=BENCH)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_a_script_runs_its_clean_up(tmp_path, sig):
    marker = tmp_path / "cleaned"
    process = _start(f"""
        import sys, time
        sys.path.insert(0, {str(BENCH)!r})
        import _common
        try:
            print("ready", flush=True)
            time.sleep(60)
        finally:
            open({str(marker)!r}, "w").write("yes")
    """, tmp_path)
    assert process.stdout.readline() == "ready\n"
    process.send_signal(sig)
    assert process.wait(timeout=20) == 128 + sig
    assert marker.read_text() == "yes"
    assert "Traceback" not in process.stderr.read()


def test_run_all_streams_and_forwards_a_signal_and_waits_for_the_clean_up(tmp_path):
    """run_all's ``run_script``, in a process of its own, runs a child that prints at once
    and cleans up slowly on SIGTERM: the first line arrives while the child runs, and the
    clean-up's line arrives before run_all's status."""
    child = tmp_path / "child.py"
    child.write_text(textwrap.dedent("""
        import signal, sys, time
        def stop(signum, frame):
            time.sleep(0.5)  # a clean-up that takes a while
            print("cleaned up", flush=True)
            sys.exit(128 + signum)
        signal.signal(signal.SIGTERM, stop)
        print("started", flush=True)
        time.sleep(60)
    """))
    process = _start(f"""
        import sys
        sys.path.insert(0, {str(BENCH)!r})
        import run_all
        received = []
        code, lines = run_all.run_script([sys.executable, {str(child)!r}], received)
        print("status", code, received, flush=True)
    """, tmp_path)
    assert process.stdout.readline() == "started\n"  # streamed: the child still runs
    process.send_signal(signal.SIGTERM)
    rest = process.stdout.read().splitlines()
    assert process.wait(timeout=20) == 0
    assert rest == ["cleaned up", f"status {128 + signal.SIGTERM} [{int(signal.SIGTERM)}]"]

