"""An HTTP process of ``serve --workers N`` whose parent is gone ends quietly, whatever it was
doing: one JSON ``WARNING`` line saying so, no traceback, none of multiprocessing's plain-text
dump (operator tester: a parent killed outright while its processes started made each log an
``ERROR`` with a traceback, ``BrokenPipeError`` from its report of being ready, then ~35
plain-text lines on stderr). Here the report of being ready finds no reader, deterministically:
the process is started with the pipe's other end already closed. tests/integration/
test_serve_processes.py kills a parent whose processes serve."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.cli import environment
from tests.integration.processes import free_port

# The parent's part of service.api.processes.serve_processes, with the reading end of the
# readiness pipe closed before the process starts: its report of being ready finds no reader.
PARENT = """
import multiprocessing, os, sys
from service.api.processes import _serve_one
from service.logs import logging_config
from service.settings import Settings

settings = Settings()
options = {"log_config": logging_config(settings), "log_level": settings.log_level.lower()}
context = multiprocessing.get_context("spawn")
receiving, sending = context.Pipe(duplex=False)
receiving.close()
child = context.Process(target=_serve_one, name="vmledger-http-0",
                        args=(os.getpid(), "127.0.0.1", int(sys.argv[1]), options, sending))
child.start()
sending.close()
child.join(60)
if child.exitcode is None:
    child.kill()
sys.exit(99 if child.exitcode is None else child.exitcode)
"""


def test_a_process_whose_report_of_being_ready_finds_no_parent_ends_in_one_json_line(
        tmp_path):
    ended = subprocess.run(
        [sys.executable, "-c", PARENT, str(free_port())], capture_output=True, text=True,
        timeout=120, check=False,
        env=environment({"VMLEDGER_LOG_FORMAT": "json"},
                        database_url=f"sqlite:///{tmp_path / 'vmledger.db'}"))
    assert ended.returncode == 0, ended.stderr
    lines = ended.stderr.splitlines()
    records = []
    for line in lines:  # no plain-text line: no traceback, no "Process vmledger-http-0:"
        assert line.startswith("{"), ended.stderr
        records.append(json.loads(line))
    assert {record["level"] for record in records} <= {"INFO", "WARNING"}, ended.stderr
    gone = [r for r in records if "is gone" in r["message"]]
    assert len(gone) == 1 and gone[0] is records[-1], ended.stderr  # nothing after it
    assert gone[0]["level"] == "WARNING" and "vmledger-http-0" in gone[0]["message"]
    assert "Traceback" not in ended.stderr
