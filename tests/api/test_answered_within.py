"""``deps.answered_within``: how a route awaits a command's future, set on the committer's
thread, within its bound, without cancelling or changing it."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future

from service.api.deps import answered_within


def test_a_future_already_done_is_answered():
    future: Future[int] = Future()
    future.set_result(1)
    assert asyncio.run(answered_within(future, 0.0)) is True


def test_a_future_set_on_another_thread_wakes_the_wait():
    future: Future[int] = Future()

    async def wait() -> bool:
        setter = threading.Timer(0.05, future.set_result, (7,))
        setter.start()
        try:
            return await answered_within(future, 10.0)
        finally:
            setter.join()

    assert asyncio.run(wait()) is True
    assert future.result() == 7


def test_a_wait_that_runs_out_leaves_the_future_as_it_was_and_can_wait_again():
    future: Future[int] = Future()

    async def wait_twice() -> tuple[bool, bool, bool]:
        first = await answered_within(future, 0.01)
        still_pending = not future.done()
        threading.Thread(target=future.set_result, args=(3,)).start()
        return first, still_pending, await answered_within(future, 10.0)

    assert asyncio.run(wait_twice()) == (False, True, True)
    assert future.result() == 3


def test_no_bound_waits_until_the_future_is_done():
    future: Future[int] = Future()

    async def wait() -> bool:
        threading.Timer(0.05, future.set_exception, (ValueError("refused"),)).start()
        return await answered_within(future, None)

    assert asyncio.run(wait()) is True
    assert isinstance(future.exception(), ValueError)
