"""``VMLEDGER_POSTGRES_CONNECT_TIMEOUT_S`` bounds every connection vmledger opens
(docs/operations.md): a peer that accepts TCP but never answers (a hung server, a wrong port
behind a proxy) fails a command after it, not after the 5 s the first connection, the
rebuild's lock and the LISTEN connection had written in (operator tester: 6.1 s for a
setting of 2)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from service.cli.preflight import check_database
from service.rebuild_lock import one_rebuild_at_a_time
from service.settings import Settings

# long runs of real processes: .ci/slow.sh runs them, the default run leaves them out
pytestmark = pytest.mark.slow


@pytest.fixture
def silent_peer() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never says a word."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


def _timed(call) -> float:
    started = time.monotonic()
    with pytest.raises((SystemExit, Exception)):
        call()
    return time.monotonic() - started


def test_the_first_connection_gives_up_after_the_connect_timeout(silent_peer) -> None:
    settings = Settings(database_url=f"postgresql://postgres@127.0.0.1:{silent_peer}/x",
                        postgres_connect_timeout_s=2)
    elapsed = _timed(lambda: check_database(settings))
    assert 1.9 <= elapsed < 3.5, elapsed


def test_the_rebuilds_lock_gives_up_after_the_connect_timeout(silent_peer) -> None:
    settings = Settings(database_url=f"postgresql://postgres@127.0.0.1:{silent_peer}/x",
                        postgres_connect_timeout_s=2)

    def lock() -> None:
        with one_rebuild_at_a_time(settings):
            pass

    elapsed = _timed(lock)
    assert 1.9 <= elapsed < 3.5, elapsed


def test_the_event_stores_environment_carries_the_setting() -> None:
    settings = Settings(database_url="postgresql://postgres@127.0.0.1/x",
                        postgres_connect_timeout_s=7)
    assert settings.eventsourcing_env()["POSTGRES_CONNECT_TIMEOUT"] == "7"
