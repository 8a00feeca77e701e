"""The offline engine's monitor calls on the event loop's thread (infra/offline/inline_monitor.py): the same
plan as through the SDK's worker threads, and the pieces (executor, ``await_now``) as their contracts say."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from typing import Any

import pytest
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime.sync_await import _ensure_event_loop

from infra.offline import engine, inline_monitor
from infra.offline.monitor import Record
from tests.helpers import dev_values


@pytest.fixture
def loop():
    """A new event loop, set as this thread's for the test; the one before is put back after it."""
    previous = _ensure_event_loop()
    new = asyncio.new_event_loop()
    asyncio.set_event_loop(new)
    try:
        yield new
    finally:
        asyncio.set_event_loop(previous)
        new.close()


def _plan_threads() -> tuple[list[dict[str, Any]], dict[str, Any], set[int]]:
    threads: set[int] = set()

    def seen(_: Record) -> None:
        threads.add(threading.get_ident())

    from infra import program

    # (the engine itself, not tests/plan_memo.py's kept runs)
    result = engine.run(program.main, dev_values(), project="gpu-training", stack="dev", on_record=seen)
    return [r.as_json() for r in result.records], result.outputs, threads


def test_a_plan_on_the_loops_thread_is_the_plan_through_worker_threads(monkeypatch):
    loop = _ensure_event_loop()
    before = getattr(loop, "_default_executor", None)
    inline = _plan_threads()
    assert getattr(loop, "_default_executor", None) is before  # (the loop and the mock monitor put back)
    assert pulumi_mocks._sync_await is not inline_monitor.await_now
    monkeypatch.setattr(engine, "monitor_calls_inline", contextlib.nullcontext)
    threaded = _plan_threads()
    assert inline[0] == threaded[0] and inline[1] == threaded[1]
    assert inline[2] == {threading.get_ident()}
    assert threading.get_ident() not in threaded[2]  # (through the SDK's executor: its worker threads)


def test_the_executor_restored_is_the_one_there_before(loop):
    mine = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    loop.set_default_executor(mine)
    with inline_monitor.monitor_calls_inline():
        assert isinstance(getattr(loop, "_default_executor"), inline_monitor.InlineExecutor)
    assert getattr(loop, "_default_executor") is mine
    mine.shutdown()


def test_the_inline_executor_runs_on_the_callers_thread_and_keeps_errors_in_the_future():
    executor = inline_monitor.InlineExecutor()
    done = executor.submit(threading.get_ident)
    assert done.done() and done.result() == threading.get_ident()

    def refuse() -> None:
        raise ValueError("refused")

    failed = executor.submit(refuse)
    with pytest.raises(ValueError, match="refused"):
        failed.result()


async def _plain(value: int) -> int:
    async def inner() -> int:
        return value * 2

    return await inner()


def test_await_now_runs_a_coroutine_that_never_waits_without_the_loop(loop):
    ran: list[str] = []
    loop.call_soon(ran.append, "loop")
    assert inline_monitor.await_now(_plain(21)) == 42
    assert ran == []  # (the loop did not run)


def test_await_now_hands_a_coroutine_that_waits_to_the_loop_and_gets_its_result(loop):
    later: asyncio.Future[int] = loop.create_future()
    loop.call_soon(later.set_result, 5)

    async def waits() -> int:
        first = await _plain(1)
        return first + await later + await _plain(10)

    assert inline_monitor.await_now(waits()) == 27


def test_await_now_raises_what_the_coroutine_raises():
    async def fails() -> None:
        await _plain(1)
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        inline_monitor.await_now(fails())
