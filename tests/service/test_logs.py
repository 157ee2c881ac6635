"""Logs of the job worker and the shared set-up (docs/operations.md, "Logs")."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

from service.logs import JsonFormatter, TextFormatter, bind, log_context, setup_logging
from service.settings import Settings
from tests.builders import cause, create


def test_a_worker_job_logs_json_lines_with_its_vm_job_and_worker(
    services, json_logs, monkeypatch
) -> None:
    accepted = create(services)
    services.projections.catch_up()
    ensure_state = services.fleet.ensure_state

    def ensure_state_logging(*args, **kwargs):
        # A line logged by the driver while the job runs, from inside a step.
        logging.getLogger("test.driver").info("booting")
        return ensure_state(*args, **kwargs)

    monkeypatch.setattr(services.fleet, "ensure_state", ensure_state_logging)
    assert services.worker.run_vm(accepted.vm_uuid)

    lines = [line for line in json_logs() if line.get("job_uuid") == accepted.job_uuid]
    assert [(line["logger"], line["message"]) for line in lines] == [
        ("vmledger.service.jobs.worker", "job provision started (attempt 1)"),
        ("test.driver", "booting"),
        ("vmledger.service.jobs.worker", "job provision succeeded"),
    ]
    actor = f"worker:{services.worker.worker_id}"
    for line in lines:
        assert (line["vm_uuid"], line["actor"]) == (accepted.vm_uuid, actor)
        assert "request_id" not in line
    assert lines[-1]["outcome"] == "succeeded" and lines[-1]["attempt"] == 1
    assert lines[0]["worker"] == services.worker.worker_id
    assert lines[0]["job_name"] == "provision"


def test_a_failed_job_logs_a_warning_with_its_error_and_a_canceled_one_stays_info(
    services, json_logs
) -> None:
    # an operator tester's line: {"level":"INFO","message":"job provision failed",
    # "outcome":"failed"} for a job whose error said no server had room
    accepted = create(services, ram=255_000)
    assert services.worker.run_vm(accepted.vm_uuid)
    services.projections.catch_up()
    error = services.jobs.get(accepted.job_uuid)["error"]
    assert "MiB" in error and "free" in error
    [line] = [line for line in json_logs() if line.get("job_uuid") == accepted.job_uuid
              and line.get("outcome")]
    assert (line["level"], line["outcome"], line["error"]) == ("WARNING", "failed", error)
    assert line["message"] == f"job provision failed: {error}"

    # a job a quarantine canceled while it ran is no failure: its worker says so at INFO
    running = create(services)

    def quarantine_then_work(*args, **kwargs):
        services.quarantine.quarantine(running.vm_uuid, "operator", cause=cause())
        return ensure_registered(*args, **kwargs)

    ensure_registered = services.fleet.ensure_registered
    services.fleet.ensure_registered = quarantine_then_work
    try:
        assert services.worker.run_vm(running.vm_uuid)
    finally:
        services.fleet.ensure_registered = ensure_registered
    lines = [line for line in json_logs() if line.get("job_uuid") == running.job_uuid]
    assert lines[-1]["level"] == "INFO" and "was taken from" in lines[-1]["message"], lines
    assert not [line for line in lines if line["level"] == "WARNING"], lines


def test_a_json_line_holds_the_scope_extras_and_the_traceback_on_one_line() -> None:
    def log(logger: logging.Logger) -> None:
        with log_context(request_id="r1", vm_uuid=None):
            bind(actor="alice")
            try:
                raise ValueError("boom")
            except ValueError:
                logger.exception("it failed: %s", "why", extra={"attempt": 2, "odd": {1, 2}})
        logger.warning("outside")

    first, second = [json.loads(line) for line in _lines(JsonFormatter(), "test.json", log)]
    assert {k: first[k] for k in ("level", "logger", "message", "request_id", "actor",
                                  "attempt")} == {
        "level": "ERROR", "logger": "test.json", "message": "it failed: why",
        "request_id": "r1", "actor": "alice", "attempt": 2}
    assert "vm_uuid" not in first and first["odd"] == "{1, 2}"
    assert "Traceback" in first["exc_info"] and "ValueError: boom" in first["exc_info"]
    assert "request_id" not in second and "actor" not in second  # the scope ended


def test_setup_logging_installs_the_chosen_format_and_level(capsys) -> None:
    setup_logging(Settings(log_format="json", log_level="debug"))
    root = logging.getLogger()
    assert root.level == logging.DEBUG
    assert [type(h.formatter) for h in root.handlers] == [JsonFormatter]
    with log_context(job_uuid="j1"):
        logging.getLogger("test.setup").debug("hello")
    [line] = capsys.readouterr().err.splitlines()
    assert json.loads(line)["job_uuid"] == "j1"

    setup_logging(Settings(log_format="TEXT", log_level="warning"))
    assert root.level == logging.WARNING
    assert [type(h.formatter) for h in root.handlers] == [TextFormatter]
    with log_context(job_uuid="j2"):
        logging.getLogger("test.setup").info("not shown")
        logging.getLogger("test.setup").warning("shown")
    [line] = capsys.readouterr().err.splitlines()
    assert line.endswith("WARNING test.setup: shown job_uuid=j2")


def test_setup_logging_stops_gathering_what_no_line_writes(capsys) -> None:
    setup_logging(Settings(log_format="json"))
    logging.getLogger("test.setup").warning("lean", extra={"route": "/ping"})
    [line] = capsys.readouterr().err.splitlines()
    entry = json.loads(line)
    assert {k: entry[k] for k in ("level", "logger", "message", "route")} == {
        "level": "WARNING", "logger": "test.setup", "message": "lean", "route": "/ping"}
    record = logging.getLogger("test.setup").makeRecord("n", logging.INFO, "f", 1, "m", (), None)
    assert (record.threadName, record.processName, record.process) == (None, None, None)
    assert logging._srcfile is None  # type: ignore[attr-defined] - no caller looked up


def test_serve_hands_the_same_logging_configuration_to_uvicorn(monkeypatch,
                                                               database_env) -> None:
    from typer.testing import CliRunner

    from service.api import serving
    from service.cli.app import cli

    called = {}
    monkeypatch.setattr(serving, "run", lambda *args, **kwargs: called.update(kwargs))
    monkeypatch.delenv("VMLEDGER_TOKENS", raising=False)
    monkeypatch.delenv("VMLEDGER_TOKENS_FILE", raising=False)
    monkeypatch.setenv("VMLEDGER_LOG_FORMAT", "json")
    result = CliRunner().invoke(cli, ["serve"])
    assert result.exit_code == 0, result.output
    formatter = called["log_config"]["formatters"]["vmledger"]["()"]
    assert formatter == "service.logs.JsonFormatter"
    assert called["access_log"] is False  # vmledger.access has the request's line



def test_a_repeating_error_is_logged_at_most_once_per_interval_counting_those_left_out(
        caplog) -> None:
    import logging as logging_

    from service.logs import Throttled

    now = [0.0]
    log = logging_.getLogger("vmledger.test.throttled")
    throttled = Throttled(log, "projection runner (retrying)", interval_s=10, clock=lambda: now[0])
    with caplog.at_level(logging_.ERROR, logger="vmledger.test.throttled"):
        for _ in range(200):  # 200 failures, 50 ms apart: 10 s
            throttled(OSError("connection refused"))
            now[0] += 0.05
        throttled(OSError("connection refused"))
    assert [r.getMessage() for r in caplog.records] == [
        "projection runner (retrying): connection refused",
        "projection runner (retrying): connection refused (199 more like it in the last 10 s)"]
    assert {r.name for r in caplog.records} == {"vmledger.test.throttled"}


def test_a_throttled_log_shared_by_threads_logs_one_line_and_counts_every_one_left_out(
        caplog) -> None:
    import threading

    from service.logs import Throttled

    now = [0.0]
    log = logging.getLogger("vmledger.test.throttled")
    throttled = Throttled(log, "unavailable", interval_s=30, clock=lambda: now[0],
                          level=logging.WARNING)
    start = threading.Barrier(8)

    def requests() -> None:
        start.wait()
        for _ in range(500):
            throttled("the database is not as this service built it")

    with caplog.at_level(logging.WARNING, logger="vmledger.test.throttled"):
        threads = [threading.Thread(target=requests) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        now[0] = 30.0
        throttled("the database is not as this service built it")
    assert [r.getMessage() for r in caplog.records] == [
        "unavailable: the database is not as this service built it",
        ("unavailable: the database is not as this service built it "
         "(3999 more like it in the last 30 s)")]


def _text_lines(log) -> list[str]:
    """What ``TextFormatter`` writes for the records ``log(logger)`` logs."""
    return _lines(TextFormatter(), "test.text", log)


def _lines(formatter: logging.Formatter, name: str, log) -> list[str]:
    """The lines ``formatter`` writes for the records ``log(logger)`` logs on logger
    ``name`` (INFO and above, not passed on to the root logger's handlers)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        log(logger)
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
        logger.setLevel(logging.NOTSET)
    return stream.getvalue().split("\n")[:-1]


FORGED = "/vms/abc\n2026-12-05T00:00:00.000Z ERROR forged: injected line"


def test_a_text_record_is_one_line_whatever_its_fields_hold() -> None:
    # found by a tester: a path holding a line break wrote a second line that looked like a
    # record of its own, and GET /vms/%00 a raw NUL
    def log(logger: logging.Logger) -> None:
        with log_context(request_id="r\r1", actor="a\x1b[31mlice"):
            logger.info("GET %s 404", FORGED, extra={"path": "/vms/\x00", "n": "\x7f\x85\x9f"})
            try:
                raise ValueError("bad\n2026-12-05T00:00:00.000Z ERROR forged: too")
            except ValueError:
                logger.exception("failed:\u2028%s", "\t")

    first, second = _text_lines(log)
    assert first.endswith(
        "INFO test.text: GET /vms/abc\\n2026-12-05T00:00:00.000Z ERROR forged: injected line"
        ' 404 request_id="r\\r1" actor=a\\x1b[31mlice path=/vms/\\x00 n="\\x7f\\x85\\x9f"')
    assert second.split(" exc_info=")[0].endswith(
        'ERROR test.text: failed:\\u2028\\t request_id="r\\r1" actor=a\\x1b[31mlice')
    assert "\\nValueError: bad\\n2026-12-05T00:00:00.000Z ERROR forged: too" in second
    assert second.startswith(first[:4]) and "Traceback (most recent call last):\\n" in second


def test_a_printable_text_record_is_written_as_it_was() -> None:
    [line] = _text_lines(lambda logger: logger.warning(
        "Zoë 名前 🚀 \\n stays", extra={"path": "/vms/ab", "alias": "名前"}))
    assert line.endswith("WARNING test.text: Zoë 名前 🚀 \\n stays path=/vms/ab alias=名前")


def test_a_text_value_that_would_not_read_back_as_one_value_is_quoted() -> None:
    # found in review: a client's path "/vms/a b request_id=forged" read as a field of its own
    [line] = _text_lines(lambda logger: logger.warning("GET 404", extra={
        "path": "/vms/a b request_id=forged", "quoted": 'say "hi" \\ bye', "empty": "",
        "eq": "a=b"}))
    assert line.endswith('WARNING test.text: GET 404 path="/vms/a b request_id=forged" '
                         'quoted="say \\"hi\\" \\\\ bye" empty="" eq="a=b"')


def test_a_request_for_a_path_with_a_line_break_logs_one_line(services) -> None:
    from fastapi.testclient import TestClient

    from service.api.app import create_app

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter())
    access = logging.getLogger("vmledger.access")
    level = access.level
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    try:
        with TestClient(create_app(services.settings, services=services)) as client:
            for path in ("/vms/abc%0A2026-12-05T00:00:00.000Z%20ERROR%20forged:%20injected",
                         "/vms/%00"):
                client.get(path)
    finally:
        access.removeHandler(handler)
        access.setLevel(level)
    lines = stream.getvalue().split("\n")[:-1]
    assert len(lines) == 2, lines
    assert "GET /vms/abc\\n2026-12-05T00:00:00.000Z ERROR forged: injected" in lines[0]
    assert "GET /vms/\\x00 " in lines[1] and "\x00" not in stream.getvalue()


def test_a_throttled_error_with_traceback_shows_it_on_the_first_line_not_on_the_repeats(
        caplog) -> None:
    import logging as logging_

    from service.logs import Throttled

    now = [0.0]
    log = logging_.getLogger("vmledger.test.throttled")
    throttled = Throttled(log, "worker pass failed", interval_s=10, clock=lambda: now[0],
                          traceback=True)
    with caplog.at_level(logging_.ERROR, logger="vmledger.test.throttled"):
        for _ in range(26):  # a pass every 0.4 s for 10 s
            try:
                raise OSError("connection refused")
            except OSError as error:
                throttled(error)
            now[0] += 0.4
    assert [r.getMessage() for r in caplog.records] == [
        "worker pass failed: connection refused",
        "worker pass failed: connection refused (24 more like it in the last 10 s)"]
    assert [r.exc_info is not None for r in caplog.records] == [True, False]
    assert caplog.records[0].exc_info[0] is OSError


def _throttled_line(error_of: Any, caplog: Any) -> logging.LogRecord:
    """The one record ``Throttled(..., traceback=True)`` logs for the error ``error_of()``
    raises, caught as a worker pass catches it."""
    from service.logs import Throttled

    throttled = Throttled(logging.getLogger("vmledger.test.throttled"), "worker pass failed",
                          traceback=True)
    with caplog.at_level(logging.ERROR, logger="vmledger.test.throttled"):
        try:
            error_of()
        except Exception as error:  # noqa: BLE001 - whatever the pass met
            throttled(error)
    [record] = caplog.records
    return record


def test_a_throttled_missing_table_is_one_line_saying_what_to_do_with_no_traceback(
        caplog) -> None:
    # operator tester: the stuck check logged "worker pass failed: no such table: vm_view"
    # with a whole traceback for a table dropped by hand, an expected condition
    import sqlite3

    def missing() -> None:
        raise sqlite3.OperationalError("no such table: vm_view")

    record = _throttled_line(missing, caplog)
    assert record.exc_info is None
    assert record.getMessage().startswith(
        "worker pass failed: the database is not as this service built it (no such table: "
        "vm_view); it makes its tables only at start-up: restart it")


def test_setup_logging_gives_back_the_outage_warnings_a_command_left_out() -> None:
    """``main`` sets up every command's logging first (``setup_command_logging``: the outage
    loggers at ERROR); ``serve``, ``work`` and ``project`` then set up their own, whose
    warnings those are (docs/operations.md, "Logs")."""
    from service.logs import OUTAGE_NOISE, setup_command_logging

    levels = {name: logging.getLogger(name).level for name in OUTAGE_NOISE}
    try:
        setup_command_logging()
        assert not logging.getLogger("psycopg.pool").isEnabledFor(logging.WARNING)
        setup_logging(Settings(log_level="warning"))
        for name in (*OUTAGE_NOISE, "psycopg.pool"):
            assert logging.getLogger(name).isEnabledFor(logging.WARNING), name
            assert not logging.getLogger(name).isEnabledFor(logging.INFO), name
        setup_logging(Settings(log_level="info"))
        assert logging.getLogger("vmledger.service.db_retry").isEnabledFor(logging.INFO)
        # its pool's INFO is a line per connection lent and returned (not ours to log)
        assert not logging.getLogger("psycopg.pool").isEnabledFor(logging.INFO)
        assert logging.getLogger("psycopg.pool").isEnabledFor(logging.WARNING)
        setup_command_logging()  # a command after them in the same process: quiet again
        assert not logging.getLogger("vmledger.service.db_retry").isEnabledFor(logging.WARNING)
    finally:  # later tests' caplog sees these loggers as they were
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def test_a_throttled_refusal_of_the_role_is_one_line_saying_what_to_do_with_no_traceback(
        caplog) -> None:
    # operator tester: a work process whose role had lost SELECT on vm_view logged
    # "permission denied for table vm_view"; the database's setup, not a bug
    import psycopg.errors
    from eventsourcing.persistence import ProgrammingError

    def refused() -> None:
        try:
            raise psycopg.errors.InsufficientPrivilege("permission denied for table vm_view")
        except psycopg.Error as error:
            raise ProgrammingError(str(error)) from error  # as the event store wraps it

    record = _throttled_line(refused, caplog)
    assert record.exc_info is None
    assert record.getMessage().startswith(
        "worker pass failed: the database refused access to table vm_view for the service's "
        "role: grant the role the privileges"), record.getMessage()
