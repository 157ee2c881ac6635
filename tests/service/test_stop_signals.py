"""A stop signal (``stop_on_signals``) that arrives while the database libraries run waits for
their call to return: raised inside it, between the ``BEGIN`` sent and its transaction's
context entered, it left a pooled SQLite connection inside a transaction, and the stopped
replay's count of the log failed with "cannot start a transaction within a transaction" (CI,
a replay stopped by SIGINT)."""

from __future__ import annotations

import os
import signal
import threading

import pytest
from eventsourcing.sqlite import SQLiteCursor

from service.cli.stop_signals import CommandStopped, restore_signals, stop_on_signals


@pytest.fixture
def stopping():
    handlers = stop_on_signals()
    try:
        yield
    finally:
        restore_signals(handlers)


def _signal_after_begin(monkeypatch, signum: int) -> list[int]:
    """Send ``signum`` to this process right after the next ``BEGIN`` has run, inside the
    library's own frames (where its handler runs: at the next instruction there)."""
    sent: list[int] = []
    execute = SQLiteCursor.execute

    def executing(self, *args, **kwargs):
        execute(self, *args, **kwargs)
        if args and args[0] == "BEGIN" and not sent:
            sent.append(signum)
            os.kill(os.getpid(), signum)

    monkeypatch.setattr(SQLiteCursor, "execute", executing)
    return sent


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_during_a_database_call_is_raised_after_it_and_the_database_still_reads(
        services, monkeypatch, stopping, signum) -> None:
    head = services.commands.head_position()
    sent = _signal_after_begin(monkeypatch, signum)
    with pytest.raises(CommandStopped) as stopped:
        assert services.commands.head_position() == head  # the call ends whole
        threading.Event().wait(10)  # where the stop arrives, once out of the library
    assert sent == [signum] and stopped.value.signum == signum
    assert services.commands.head_position() == head  # no connection left inside a transaction


def test_a_stop_outside_the_database_libraries_is_raised_at_once(stopping) -> None:
    with pytest.raises(CommandStopped):
        os.kill(os.getpid(), signal.SIGTERM)
        threading.Event().wait(10)
