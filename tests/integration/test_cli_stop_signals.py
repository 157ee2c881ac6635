"""The commands that end, stopped by a signal, through the real ``vmledger`` entry point
(docs/operations.md, "Stopping processes"):

- ``changes`` without ``--follow`` stopped part-way ends as a stopped command: one line naming
  the last position it printed, status 128 + the signal (it exited 0, a dump cut short and
  nothing said; operator tester);
- a signal that comes once a command has printed its result, while it cleans up, does not
  kill it: it says so in one line and ends with its own status (a rebuild that printed
  ``rebuilt …`` exited 143 with nothing said, 3 of 3; so did ``replay --json`` and ``audit
  verify``).

Each signal is sent once the output it follows has been read from the process's stdout, and
the process cannot have ended before it (``_GATED``)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli import environment, vmledger
from tests.trace import SCHEDULE, SUBMIT, row, write_trace

# real processes, each signalled as it ends: CI runs them with the slow tests
pytestmark = pytest.mark.slow


def _trace(path: Path, tasks: int) -> Path:
    """``tasks`` tasks of one job, each submitted and placed."""
    return write_trace(path, [row(event, index=str(index), machine="42" if event else "",
                                  cpu="0.01", mem="0.01")
                              for index in range(tasks) for event in (SUBMIT, SCHEDULE)])


# The console script's entry point, with one step added to the process's exit (an atexit
# step registered first, so run last): a read of a line from stdin. The process cannot end
# before the test has sent its signal and then written that line, so the signal comes while
# the process cleans up, never after it has gone.
_GATED = ("import atexit, sys\n"
          "atexit.register(sys.stdin.readline)\n"
          "from service.cli import main\n"
          "sys.argv[0] = 'vmledger'\n"
          "main()\n")


def _signalled_after(args: list[str], url: str, last: str, signum: int, stderr: Path
                     ) -> tuple[int, list[str], str]:
    """Run ``vmledger ARGS`` (``_GATED``), send it ``signum`` as soon as it has printed the
    line ``last`` (its stdout read line by line; its stderr into the file ``stderr``, which no
    reader can hold back), then let it end; return its status, every line it printed and
    its stderr."""
    with open(stderr, "w") as err:
        process = subprocess.Popen([sys.executable, "-c", _GATED, *args],
                                   env=environment(None, url), stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        printed = []
        for printed_line in process.stdout:
            printed.append(printed_line.rstrip("\n"))
            if printed[-1] == last:
                process.send_signal(signum)
                break
        process.stdin.write("\n")  # let it end (a read of stdout's pipe must not hold it)
        process.stdin.close()
        rest = process.stdout.read()  # after the lines the iteration has read ahead
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, printed + rest.splitlines(), stderr.read_text()


@pytest.fixture(scope="module")
def replayed(tmp_path_factory) -> str:
    """A SQLite database a replay of 400 tasks made (some 4,000 events)."""
    folder = tmp_path_factory.mktemp("replayed")
    url = f"sqlite:///{folder / 'vmledger.db'}"
    done = vmledger("replay", str(_trace(folder / "t.csv.gz", 400)), "--json",
                    database_url=url)
    assert done.returncode == 0, done.stderr
    return url


def test_a_dump_of_the_changes_stopped_part_way_names_the_last_position_printed(
        replayed, tmp_path) -> None:
    # the signal is sent at the first line, while the rest (some 600 kB) cannot fit the
    # pipe nobody reads until then: the dump cannot have ended
    dump = vmledger("changes", database_url=replayed).stdout.splitlines()
    assert len(dump) > 2_000
    status, printed, said = _signalled_after(
        ["changes"], replayed, dump[0], signal.SIGINT, tmp_path / "err")
    assert status == 130, said
    assert 0 < len(printed) < len(dump) and printed == dump[:len(printed)]
    last = printed[-1].split()[0]
    assert said == (f"vmledger changes: stopped by SIGINT after position {last}, the last "
                    f"it printed; go on with --after {last}\n")


@pytest.mark.parametrize("command, signum", [
    (["rebuild"], signal.SIGTERM),
    (["audit", "verify"], signal.SIGTERM),
    (["history", "{vm}"], signal.SIGINT),
    (["changes"], signal.SIGHUP),
], ids=["rebuild", "audit verify", "history", "changes"])
def test_a_signal_once_the_result_is_printed_leaves_it_standing(
        replayed, tmp_path, command, signum) -> None:
    vm = json.loads(vmledger("changes", "--json", "--type", "Created",
                             database_url=replayed).stdout.splitlines()[0])["vm_uuid"]
    args = [part.format(vm=vm) for part in command]
    whole = vmledger(*args, database_url=replayed)
    assert whole.returncode == 0, whole.stderr
    status, printed, said = _signalled_after(
        args, replayed, whole.stdout.splitlines()[-1], signum, tmp_path / "err")
    name = " ".join(command[:2] if command[0] == "audit" else command[:1])
    assert status == 0, said
    # the progress bars (rebuild, audit verify) write their lines on stderr too
    assert [said_line for said_line in said.splitlines() if said_line.startswith("vmledger")
            ] == [(f"vmledger {name}: {signal.Signals(signum).name} came after the work was "
                  "done: the result stands")], said
    assert "Traceback" not in said
    assert printed == whole.stdout.splitlines()  # every line, none cut short or doubled


def test_a_replay_signalled_once_its_summary_is_printed_leaves_it_standing(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'vmledger.db'}"
    status, printed, said = _signalled_after(
        ["replay", str(_trace(tmp_path / "t.csv.gz", 25)), "--max-rows", "50", "--json"],
        url, "}", signal.SIGTERM, tmp_path / "err")
    assert json.loads("\n".join(printed))["rows_read"] == 50
    assert status == 0, said
    assert said.endswith("vmledger replay: SIGTERM came after the work was done: the result "
                         "stands\n"), said  # after the progress bars' lines
    assert said.count("came after") == 1 and "Traceback" not in said
