"""A command that streams its result ends quietly with 141 (128 + SIGPIPE) when nobody reads
its stdout any more (``vmledger history VM | head -3``; docs/operations.md, under
"Processes"): it exited 1 with nothing said, whenever its output did not fit in the pipe
before ``head`` left (a tester, 2 runs of 4). Here the pipe's reading end is closed before
the command starts, so its first line already finds nobody."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.builders import create
from tests.cli import VMLEDGER, environment

# real processes, a second and a half of imports each: .ci/slow.sh runs them
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("command", [["history", "{vm}"], ["changes"], ["audit", "verify"]],
                         ids=["history", "changes", "audit verify"])
def test_a_command_whose_reader_is_gone_ends_quietly_with_141(services, settings, command):
    vm = create(services).vm_uuid
    services.projections.catch_up()  # audit verify then finds every read model as the log
    reading, writing = os.pipe()
    os.close(reading)
    try:
        ended = subprocess.run([VMLEDGER, *(arg.format(vm=vm) for arg in command)],
                               env=environment(None, settings.database_url), stdout=writing,
                               stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    finally:
        os.close(writing)
    # nothing said but audit verify's progress bars (stderr is no terminal: drawn once)
    said = [line for line in ended.stderr.splitlines() if "━" not in line]
    assert (ended.returncode, said) == (141, []), ended.stderr
