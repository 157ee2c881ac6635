"""``vmledger replay`` as a user runs it: the command's output, and what it says of a trace
it cannot read or of a bad option (tests/integration/test_replay.py tests the replay
itself)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.cli.app import cli
from tests.trace import KILL, SCHEDULE, SUBMIT, row, write_trace


def test_cli_replays_into_the_configured_database_and_prints_json(
    settings, tmp_path, monkeypatch
):
    trace = write_trace(tmp_path / "t.csv.gz", [
        row(SUBMIT), row(SCHEDULE, machine="1"), row(SUBMIT, index="1"), row(KILL, index="1"),
        row(SUBMIT, job="8"), row(SCHEDULE, job="8", machine="2")])
    monkeypatch.setenv("VMLEDGER_DATABASE_URL", settings.database_url)
    # --no-follow: replay, then catch up (the follower is in the slice's test)
    result = CliRunner().invoke(cli, ["replay", str(trace), "--max-jobs", "1", "--json",
                                      "--no-follow"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["rows_read"] == 4 and summary["rows_refused"] == 0
    assert summary["final_states"] == {"destroyed": 1, "running": 1}


def test_cli_summary_names_the_vms_one_way(settings, tmp_path, monkeypatch) -> None:
    """The table's labels: "VMs created", then "VMs running", "VMs destroyed" under it (it
    said "vms created" above "VMs running": a tester)."""
    trace = write_trace(tmp_path / "t.csv.gz", [
        row(SUBMIT), row(SCHEDULE, machine="1"), row(SUBMIT, index="1"), row(KILL, index="1")])
    monkeypatch.setenv("VMLEDGER_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("COLUMNS", "120")  # one row a line
    result = CliRunner().invoke(cli, ["replay", str(trace), "--no-follow"])
    assert result.exit_code == 0, result.output
    labels = [line.strip("│ ").split("│")[0].strip() for line in result.stdout.splitlines()
              if "│" in line]
    assert labels[:5] == ["rows read", "rows applied", "rows refused", "rows ignored",
                          "VMs created"], labels
    assert sorted(labels[5:7]) == ["VMs destroyed", "VMs running"], labels


@pytest.mark.parametrize("content, told", [
    (b"plain text, not gzip\n", "Not a gzipped file"),
    (gzip.compress(b"0,,1,0,,0,u,0,1,0.1,0.1,0.1,0\n" * 50)[:40], "ended before"),
], ids=["not gzip", "truncated"])
def test_cli_names_a_trace_it_cannot_read_instead_of_a_traceback(
    settings, tmp_path, monkeypatch, content, told
):
    # found by a new user: a file that is not gzip printed a traceback, a truncated one only
    # "Aborted." (click's word for EOFError)
    trace = tmp_path / "t.csv.gz"
    trace.write_bytes(content)
    monkeypatch.setenv("VMLEDGER_DATABASE_URL", settings.database_url)
    result = CliRunner().invoke(cli, ["replay", str(trace)])
    assert result.exit_code == 2, result.output
    assert "cannot read the trace" in result.output and told in result.output


def _directory(tmp_path: Path) -> Path:
    (tmp_path / "clusterdata").mkdir()
    return tmp_path / "clusterdata"


def _link_to_a_directory(tmp_path: Path) -> Path:
    (tmp_path / "latest.csv.gz").symlink_to(_directory(tmp_path))
    return tmp_path / "latest.csv.gz"


def _link_to_nowhere(tmp_path: Path) -> Path:
    (tmp_path / "latest.csv.gz").symlink_to(tmp_path / "gone.csv.gz")
    return tmp_path / "latest.csv.gz"


def _under_a_file(tmp_path: Path) -> Path:
    (tmp_path / "t.csv").write_text("")
    return tmp_path / "t.csv" / "part-00000-of-00500.csv.gz"


def _not_utf8(tmp_path: Path) -> Path:
    (tmp_path / "t.csv.gz").write_bytes(gzip.compress(b"\xff\xfe 0,,1,0,,0,u\n"))
    return tmp_path / "t.csv.gz"


@pytest.mark.parametrize("make, told", [
    # found by a tester: a directory was "no such file"
    (_directory, "is a directory; the trace is a file in it (.csv.gz or .csv)"),
    (_link_to_a_directory, "is a directory; the trace is a file in it (.csv.gz or .csv)"),
    (lambda tmp_path: tmp_path / "missing.csv.gz", "no such file"),
    (_link_to_nowhere, "is a symbolic link to a file that does not exist"),
    (_under_a_file, "is not a directory"),
    (lambda tmp_path: Path("/dev/null"), "is not a regular file"),
    (_not_utf8, "cannot read the trace: it is not UTF-8 text"),
], ids=["directory", "link to a directory", "missing", "link to nowhere", "under a file",
        "device", "not UTF-8"])
def test_cli_says_what_is_wrong_with_a_trace_path(settings, tmp_path, monkeypatch, make, told):
    trace = make(tmp_path)
    monkeypatch.setenv("VMLEDGER_DATABASE_URL", settings.database_url)
    result = CliRunner().invoke(cli, ["replay", str(trace)], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert "Invalid value for TRACE" in result.output and told in result.output, result.output


@pytest.mark.parametrize("option", ["--max-jobs", "--skip-jobs", "--max-rows"])
def test_cli_refuses_a_negative_count(settings, tmp_path, monkeypatch, option):
    trace = write_trace(tmp_path / "t.csv", [row(SUBMIT)])
    monkeypatch.setenv("VMLEDGER_DATABASE_URL", settings.database_url)
    result = CliRunner().invoke(cli, ["replay", str(trace), option, "-1"])
    assert result.exit_code == 2 and option in result.output, result.output
