"""Running the synchronous command handlers on the event loop's own thread, so that an async
route hands its command to the group committer and awaits the commit without a thread-pool
hop (docs/performance.md, "A lean HTTP edge").

The command handlers (load, decide, save, with the change loop's retries) stay one synchronous
code path for the API, the worker, the agents and the replay. ``run_on_loop`` runs one in a
greenlet on the loop's thread; when it reaches a wait (``wait_result``: the committer's
future; ``pause``: a read-your-writes poll), the greenlet switches back to the event loop,
which awaits it while serving other requests, and resumes the handler with the result. Called
anywhere else (a worker thread, the CLI), the same functions simply block.

What does block the loop is what the handlers do between waits: CPU, and the short
queries of a load (an aggregate cache hit still reads the stream's newer events).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import greenlet

T = TypeVar("T")


class _OnLoop(greenlet.greenlet):
    """A handler running on the event loop's thread; its parent is the awaiting coroutine's
    greenlet."""


def _suspend(awaitable: Awaitable[Any]) -> Any:
    current = greenlet.getcurrent()
    assert isinstance(current, _OnLoop)
    return current.parent.switch(awaitable)  # resumed by run_on_loop with the result


def on_loop() -> bool:
    """True inside ``run_on_loop`` (a wait there must suspend, never block)."""
    return isinstance(greenlet.getcurrent(), _OnLoop)


def wait_result(future: Future[T]) -> T:
    """The result of ``future`` (raising its exception): awaited by the event loop when
    called inside ``run_on_loop``, else waited for."""
    if on_loop():
        return _suspend(asyncio.wrap_future(future))
    return future.result()


def pause(seconds: float) -> None:
    """Sleep: ``asyncio.sleep`` inside ``run_on_loop`` (the loop serves others meanwhile),
    ``time.sleep`` elsewhere."""
    if on_loop():
        _suspend(asyncio.sleep(seconds))
    else:
        time.sleep(seconds)


async def run_on_loop(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn(*args, **kwargs)`` on this thread, awaiting whatever it waits for through
    ``wait_result`` and ``pause``; its result, or what it raised. It sees (and may add to) the
    caller's context variables, e.g. the request's log scope."""
    child = _OnLoop(lambda: fn(*args, **kwargs), parent=greenlet.getcurrent())
    child.gr_context = contextvars.copy_context()
    request = child.switch()
    while not child.dead:
        try:
            value = await request
        except BaseException as error:  # noqa: BLE001 - raised inside the handler
            request = child.throw(error)
        else:
            request = child.switch(value)
    return request


def async_route(route: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """A synchronous route function served as an ``async def`` one through ``run_on_loop``:
    FastAPI sees the same signature (parameters, docstring: the OpenAPI schema is unchanged)
    and calls it on the event loop instead of in its thread pool."""

    @functools.wraps(route)
    async def served(*args: Any, **kwargs: Any) -> T:
        return await run_on_loop(route, *args, **kwargs)

    return served
