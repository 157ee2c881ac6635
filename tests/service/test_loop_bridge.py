"""The command handlers on the event loop (service/commands/loop_bridge.py): a synchronous
handler run by ``run_on_loop`` runs on the loop's own thread, and its waits suspend it while
the loop serves others, instead of blocking the loop."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from concurrent.futures import Future

import pytest

from service.commands.loop_bridge import on_loop, pause, run_on_loop, wait_result

SCOPE: contextvars.ContextVar[dict] = contextvars.ContextVar("scope")


def test_a_wait_suspends_the_handler_and_the_loop_serves_others_meanwhile():
    future: Future[int] = Future()
    seen: list[str] = []

    def handler() -> tuple[int, int]:
        seen.append("handler waits")
        value = wait_result(future)  # completed by another coroutine, on the same loop
        return value, threading.get_ident()

    async def main() -> tuple[int, int]:
        async def complete_later() -> None:
            seen.append("other coroutine ran")
            await asyncio.sleep(0.01)
            threading.Thread(target=future.set_result, args=(42,)).start()

        task = asyncio.create_task(complete_later())
        result = await run_on_loop(handler)
        await task
        return result

    value, thread = asyncio.run(main())
    assert value == 42
    assert thread == threading.get_ident()  # no thread-pool hop
    assert seen == ["handler waits", "other coroutine ran"]


def test_errors_reach_the_awaiting_route_both_ways():
    future: Future[int] = Future()
    future.set_exception(LookupError("from the committer"))

    def waits_for_a_failed_future() -> int:
        return wait_result(future)

    def raises() -> None:
        raise ValueError("from the handler")

    with pytest.raises(LookupError):
        asyncio.run(run_on_loop(waits_for_a_failed_future))
    with pytest.raises(ValueError):
        asyncio.run(run_on_loop(raises))


def test_the_handler_sees_and_extends_the_callers_context():
    def handler() -> bool:
        pause(0.001)
        SCOPE.get()["vm_uuid"] = "bound in the handler"  # as logs.bind does
        return on_loop()

    async def main() -> tuple[bool, dict]:
        scope = {"request_id": "r1"}
        SCOPE.set(scope)
        inside = await run_on_loop(handler)
        return inside, scope

    inside, scope = asyncio.run(main())
    assert inside is True
    assert scope == {"request_id": "r1", "vm_uuid": "bound in the handler"}


def test_outside_the_loop_the_same_calls_simply_block():
    future: Future[str] = Future()
    threading.Timer(0.01, future.set_result, args=("done",)).start()
    assert on_loop() is False
    assert wait_result(future) == "done"
    pause(0.001)
