"""A process's wake-up on other processes' appends (PostgreSQL ``LISTEN``): the projection
runner and the change streams no longer wait for their next poll to see a commit made
elsewhere (docs/performance.md, P5)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg
from psycopg.sql import SQL, Identifier

from service.logs import Throttled
from service.storage import PostgresLedgerRecorder

log = logging.getLogger(f"vmledger.{__name__}")


def own_connection_params(recorder: PostgresLedgerRecorder) -> dict[str, object]:
    """psycopg's parameters for a connection of a thread's own, outside the pool, in
    autocommit: the pool's, ``VMLEDGER_POSTGRES_CONNECT_TIMEOUT_S`` among them
    (``bound_pool``); a connect timeout of 5 s only for a pool that has none."""
    return {"connect_timeout": 5,
            **{k: v for k, v in recorder.datastore.pool.kwargs.items() if k != "row_factory"},
            "autocommit": True}


def wake_on_appends(recorder: object, wake: Callable[[], None], stop: threading.Event,
                    ) -> threading.Thread | None:
    """PostgreSQL: call ``wake`` as soon as any process appends to the log, until ``stop``.

    Every insert transaction of the event store sends ``NOTIFY`` on the events table's
    channel; a thread holding its own connection ``LISTEN``s to it, so a projection runner
    in another process than the command's no longer waits for its next poll
    (docs/performance.md, P5). It reconnects after a connection error; the runner's poll
    stays the fallback. None on SQLite (no notifications there; the runner is woken in
    process).
    """
    if not isinstance(recorder, PostgresLedgerRecorder):
        return None
    params = own_connection_params(recorder)
    channel = SQL("LISTEN {0}").format(Identifier(recorder.channel_name))
    # reconnects every second in an outage: one line when it starts, then one every 10 s
    failed = Throttled(log, "listening for appends", level=logging.WARNING)

    def listen() -> None:
        while not stop.is_set():
            try:
                with psycopg.connect(**params) as conn:
                    conn.execute(channel)
                    wake()  # whatever was appended while not listening
                    while not stop.is_set():
                        for _notify in conn.notifies(timeout=0.5):
                            wake()
            except psycopg.Error as error:
                failed(error)
                stop.wait(1.0)

    thread = threading.Thread(target=listen, name="vmledger-wake-on-appends", daemon=True)
    thread.start()
    return thread
