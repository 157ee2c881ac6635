"""Logs: one set-up for ``vmledger serve``, ``work`` and ``project`` (``setup_logging``), and
the fields every line carries from where it was logged (docs/operations.md, "Logs").

Each line is one JSON object (``JsonFormatter``), or, with ``VMLEDGER_LOG_FORMAT=text``, one
line of text for people at a terminal (``TextFormatter``). Beside the time, level, logger and
message, a line carries the fields of the scope it was logged in: ``request_id`` and ``actor``
inside an HTTP request, ``vm_uuid`` and ``job_uuid`` where a command or a job is handled.
Scopes are ``contextvars``, so they follow a request into the thread pool that runs its route,
and stay apart between threads (each worker's job is its own scope).
"""

from __future__ import annotations

import json
import logging
import logging.config
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from domain.compact_json import reused_encoder
from service.access_errors import explain_refusal, refusal
from service.schema_errors import explain, missing_schema
from service.settings import Settings

# The fields a scope may carry, in the order lines show them.
FIELDS = ("request_id", "actor", "vm_uuid", "job_uuid")

_SCOPE: ContextVar[dict[str, str] | None] = ContextVar("vmledger_log_scope", default=None)

# Attributes every LogRecord has: anything else on a record came from ``extra=``, except
# uvicorn's ``color_message`` (its message again, with terminal colour codes).
_RECORD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {
    "message", "asctime", "color_message"}


@contextmanager
def log_context(**fields: object) -> Iterator[None]:
    """Open a scope: every line logged inside (in this context, and in contexts copied from
    it, such as a route's thread) carries the enclosing scope's fields and ``fields``. A
    ``None`` value is left out."""
    scope = {**(_SCOPE.get() or {}), **_strings(fields)}
    token = _SCOPE.set(scope)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def bind(**fields: object) -> None:
    """Add ``fields`` to the current scope, for the rest of it: also to lines its opener logs
    afterwards (a request's closing line learns the VM and job its route handled). Outside
    any scope, starts one for the rest of the current context. ``None`` values are ignored."""
    scope = _SCOPE.get()
    if scope is None:
        _SCOPE.set(_strings(fields))
    else:
        scope.update(_strings(fields))


def _strings(fields: dict[str, object]) -> dict[str, str]:
    return {name: str(value) for name, value in fields.items() if value is not None}


# The last second formatted, and its text: lines come many a second (one per request).
_second: tuple[int, str] = (-1, "")


def _timestamp(record: logging.LogRecord) -> str:
    """RFC 3339 UTC with milliseconds, as the API's timestamps: ``record.created`` rounded to
    the microsecond (half to even, as ``datetime.fromtimestamp``), then truncated to the ms."""
    global _second
    seconds = int(record.created)
    micros = round((record.created - seconds) * 1e6)
    if micros >= 1_000_000:
        seconds, micros = seconds + 1, micros - 1_000_000
    cached_seconds, text = _second
    if seconds != cached_seconds:
        text = time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(seconds))
        _second = (seconds, text)
    return f"{text}{micros // 1000:03d}Z"


def _fields(record: logging.LogRecord, entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` with the scope's fields, then the record's ``extra=`` fields, each name not
    already there: a name both have is where the scope puts it, with the record's value."""
    attributes = vars(record)
    extras = attributes.keys() - _RECORD_ATTRIBUTES
    for name, value in (_SCOPE.get() or {}).items():
        if name not in entry:
            entry[name] = attributes[name] if name in extras else value
    if extras:
        for name, value in attributes.items():
            if name in extras and name not in entry:
                entry[name] = value
    return entry


# ``json.dumps`` (and ``JSONEncoder.encode``) builds a C encoder per call; one, made once and
# shared (it keeps no state between calls), writes the same text.
_encode = reused_encoder(str, ensure_ascii=False, sort_keys=False,
                         separators=(", ", ": ")) or json.JSONEncoder(
                             default=str, ensure_ascii=False).encode


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (RFC 3339 UTC, ms), ``level``, ``logger``,
    ``message``, the scope's fields (``FIELDS``), anything passed with ``extra=``, and
    ``exc_info`` (the traceback text) when an exception is logged. Values JSON cannot hold
    are written as their ``str``."""

    def format(self, record: logging.LogRecord) -> str:
        entry = _fields(record, {
            "time": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        })
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return _encode(entry)


# What a text line may not hold as itself: C0 and C1 controls and DEL (line breaks, NUL,
# terminal escapes), and the line and paragraph separators that str.splitlines and some
# viewers also break lines at.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(found: re.Match[str]) -> str:
    char = found.group()
    code = ord(char)
    return _SHORT.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def one_line(text: str) -> str:
    """``text`` with every control character (C0, DEL, C1) and U+2028/U+2029 escaped as
    ``\\n``, ``\\r``, ``\\t``, ``\\xNN`` or ``\\uNNNN``; anything else, a backslash included,
    as itself. So the escapes cannot be told from the same text typed, but no value can end
    a line or start another (docs/operations.md, "Logs")."""
    # isprintable is one C pass and true for nearly every line: the regex only when needed
    return text if text.isprintable() else _CONTROL.sub(_escape, text)


# A field's value that would not read back as one value: a space (or any white space), a
# quote, an '=' (a client's path "/a b request_id=x" would look like a field of its own), or
# nothing at all.
_NEEDS_QUOTES = re.compile(r'[\s"=]|^$')


def _value(value: object) -> str:
    """A field's value as the text line shows it: as itself, or in double quotes (a quote or
    backslash in it escaped) when ``_NEEDS_QUOTES``, as logfmt writes it."""
    text = str(value)
    if _NEEDS_QUOTES.search(text) is None:
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class TextFormatter(logging.Formatter):
    """``TIME LEVEL logger: message key=value ...`` (the scope's fields, then extras, then
    ``exc_info=`` and the traceback; a value quoted as ``_value`` quotes it): for a terminal,
    not for log collectors. One line per
    record whatever its fields hold (``one_line``): a value that came from a client, a path
    with ``%0A`` in it, cannot write a line that looks like a record of its own."""

    def format(self, record: logging.LogRecord) -> str:
        pairs = _fields(record, {})
        line = f"{_timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        if pairs:
            line += " " + " ".join(f"{k}={_value(v)}" for k, v in pairs.items())
        if record.exc_info:
            line += " exc_info=" + self.formatException(record.exc_info)
        return one_line(line)


def logging_config(settings: Settings) -> dict[str, Any]:
    """The ``logging.config.dictConfig`` of a vmledger process: one handler on stderr with
    the formatter ``settings.log_format`` names, at ``settings.log_level``, which
    ``OUTAGE_NOISE``'s loggers follow too (their warnings included; psycopg's from WARNING
    up whatever the level, its INFO being a line per connection lent); uvicorn's loggers
    pass their lines to it, but for their lines of each WebSocket connection and with no
    URL's query or credential in any (``service.uvicorn_lines``; ``serve`` also gives this to
    uvicorn, which applies it in each of its worker processes). The lines of psycopg and its
    pool that repeat (a reconnection attempt a second during an outage), and of
    ``REPEATING`` (connections found closed at each cut), are throttled
    (``service.log_repeats``)."""
    formatter = {"json": JsonFormatter, "text": TextFormatter}[settings.log_format]
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"vmledger": {"()": f"{formatter.__module__}.{formatter.__qualname__}"}},
        "filters": {"repeats": {"()": "service.log_repeats.process_repeats"},
                    "connections": {"()": "service.uvicorn_lines.process_connection_lines"}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "vmledger",
                                "stream": "ext://sys.stderr"}},
        "root": {"level": settings.log_level, "handlers": ["stderr"]},
        "loggers": {
            # without their lines of each WebSocket connection, whose URL holds a
            # listener's token (service.uvicorn_lines): the envelope logs each upgrade
            **{name: {"handlers": [], "propagate": True, "filters": ["connections"]}
               for name in ("uvicorn", "uvicorn.error", "uvicorn.access")},
            # their warnings are this process's to log (docs/operations.md, "Logs"): set
            # back what ``setup_command_logging`` (which ``main`` runs for every command
            # first) raised to ERROR, as dictConfig leaves alone a logger it is not given;
            # ours to the root's level, psycopg's to WARNING at least (its pool says INFO
            # at every connection lent and returned)
            **{name: {"level": "NOTSET", "filters": ["repeats"] if name in REPEATING else []}
               for name in OUTAGE_NOISE if name != "psycopg"},
            "psycopg": {"level": max(logging.WARNING,
                                     logging.getLevelName(settings.log_level)),
                        "filters": ["repeats"]},
            # its pool's repeated lines throttled too (a logger's filters see only the
            # records logged to it, not to its children), at psycopg's level (the event
            # store raises it to ERROR when imported)
            "psycopg.pool": {"level": "NOTSET", "filters": ["repeats"]},
        },
    }


def setup_logging(settings: Settings) -> dict[str, Any]:
    """Configure this process's logging from ``settings`` (``VMLEDGER_LOG_LEVEL``,
    ``VMLEDGER_LOG_FORMAT``); returns the configuration applied."""
    config = logging_config(settings)
    logging.config.dictConfig(config)
    gather_only_what_lines_show()
    return config


# What a command that prints its result logs (every command but ``serve``, ``work`` and
# ``project``): its own warnings (a snapshot refused, a damaged stream: an edited log an
# operator must hear of) and errors, but of the loggers below, which an outage makes
# reconnect and retry, only errors: the command says itself, in one line, what an outage
# did to it.
COMMAND_LOG_LEVEL = logging.WARNING
OUTAGE_NOISE = ("psycopg",  # the pool's reconnects, psycopg.pool
                "vmledger.service.append_wakeups",  # the LISTEN connection's
                "vmledger.service.db_retry",  # a retry given up
                "vmledger.service.db_limits")  # "connections found closed by the server"
# Those of them whose lines are throttled by the ``repeats`` filter, as psycopg's: the ones
# that do not throttle their own (``Throttled``), each cut of the connections logging one
# (37 lines of db_limits in serve for 10 cuts in 6.5 s: a tester).
REPEATING = ("vmledger.service.db_limits",)


def setup_command_logging() -> None:
    """Configure the logging of a command that prints its result on stdout (``changes``,
    ``rebuild``, ``audit verify``, ...; ``serve``, ``work`` and ``project`` replace it with
    ``setup_logging``), and of its child processes: records at ``COMMAND_LOG_LEVEL`` and
    above, each one text line on stderr (``TextFormatter``), but only errors of
    ``OUTAGE_NOISE``: the warnings of an outage (the pool and the ``LISTEN`` connection
    reconnecting, a retry given up: 4 to 6 lines, one over 3 lines, under
    ``changes --follow``) are the long-running processes' to log (docs/operations.md,
    "Logs"). Reads no settings: bad ones are the command's to report."""
    logging.config.dictConfig({
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"vmledger": {"()": f"{__name__}.TextFormatter"}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "vmledger",
                                "stream": "ext://sys.stderr"}},
        "root": {"level": COMMAND_LOG_LEVEL, "handlers": ["stderr"]},
        "loggers": {name: {"level": logging.ERROR} for name in OUTAGE_NOISE},
    })


def gather_only_what_lines_show() -> None:
    """Stop this process's log records gathering what no formatter here writes: the caller's
    file and line, the thread, the process and its name (the logging HOWTO's "Optimization").
    For ``setup_logging``, and for each ``serve`` process, whose logging uvicorn configures.
    Under the P1 load a request's closing line was about 5 % of an API process's CPU, a
    third of that in gathering them (docs/performance.md)."""
    logging._srcfile = None  # type: ignore[attr-defined] - the documented switch
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False


class Throttled:
    """Logs a repeating error at most once every ``interval_s`` (the first at once), saying
    how many were left out since the last line: a loop that fails every few milliseconds
    during a database outage, or every request while a table is missing, writes one line per
    interval, not thousands. ``error`` is an exception or a message. With ``traceback``, a
    line that follows no left-out error (the first of an outage, or an error on its own)
    carries the error's traceback; the repeats' lines do not, nor does an error saying a table
    the service built is missing (``schema_errors``: its one line says what to do; operator
    tester: the stuck check logged a traceback for a dropped ``vm_view``), nor one saying
    the database refused the service's role (``access_errors``). Logged at
    ``level`` (ERROR by default). Thread-safe (the API's requests run in many threads)."""

    def __init__(self, logger: logging.Logger, what: str, interval_s: float = 10.0,
                 clock: Any = None, *, traceback: bool = False, level: int = logging.ERROR):
        self.logger = logger
        self.level = level
        self.what = what
        self.interval_s = interval_s
        self.clock = clock or time.monotonic
        self.traceback = traceback
        self._lock = threading.Lock()
        self._last: float | None = None
        self._left_out = 0

    def __call__(self, error: BaseException | str) -> None:
        """Log ``error`` unless a line was logged less than ``interval_s`` ago."""
        with self._lock:
            now = self.clock()
            if self._last is not None and now - self._last < self.interval_s:
                self._left_out += 1
                return
            more = f" ({self._left_out} more like it in the last {now - self._last:.0f} s)" \
                if self._last is not None and self._left_out else ""
            shown = error if self.traceback and not self._left_out else None
            self._last, self._left_out = now, 0
        missing = missing_schema(error) if isinstance(error, BaseException) else None
        refused = refusal(error) if isinstance(error, BaseException) else None
        if missing is not None:  # an expected condition, said in one line: no traceback
            error, shown = explain(missing), None
        elif refused is not None:  # the database's setup, not a bug: the same
            error, shown = explain_refusal(refused, None), None
        self.logger.log(self.level, "%s: %s%s", self.what, error, more,
                        exc_info=shown if isinstance(shown, BaseException) else None)


def database_shown(settings: Settings) -> str:
    """The configured database for a log line: its URL without the password."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(settings.database_url)
    if parts.password is None:
        return settings.database_url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))
