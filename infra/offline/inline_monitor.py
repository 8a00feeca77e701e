"""The monitor's calls made on the event loop's thread (``monitor_calls_inline``).

The SDK sends each registration, invoke and output registration to the monitor through the event loop's
default executor (``loop.run_in_executor(None, ...)``): against the Pulumi engine that is a blocking gRPC
call, kept off the loop's thread. Against the offline engine the monitor is the SDK's mock monitor, in
this process, and each call is a hop to a worker thread and back (a thread switch, a wake-up of the loop
through its self-pipe, the GIL handed over), and the mock monitor serializes its answer by starting an
event loop of its own on that thread (``_sync_await``). That was about a seventh of a plan.

While the offline engine runs, the loop's default executor runs what it is given at once, on the loop's
thread, and hands back a finished future; and the mock monitor's ``_sync_await`` runs the serialization
it is given to its end at once (``await_now``): the mock monitor serializes plain values (its mocks'
answers), which never wait for anything. A serialization that did wait (an Output or a resource among
the values) is handed to the SDK's own ``_sync_await``, which runs the loop until it is done, as the
SDK does for a synchronous invoke. The calls, their answers and their order per resource are the same;
only the thread they run on differs. `pulumi up` never runs any of this.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime.sync_await import _ensure_event_loop, _sync_await

T = TypeVar("T")


class InlineExecutor(concurrent.futures.ThreadPoolExecutor):
    """An executor that runs each call at once, on the caller's thread, and returns its finished future.
    (A ThreadPoolExecutor only because asyncio's ``set_default_executor`` takes nothing else; it starts
    no thread.)"""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - handed to the awaiting coroutine, as a worker thread would
            future.set_exception(exc)
        return future


class _Resumed:
    """A coroutine that was started and suspended on ``waiting_on``, as an awaitable that goes on from there."""

    def __init__(self, coroutine: Coroutine[Any, Any, Any], waiting_on: Any):
        self.coroutine, self.waiting_on = coroutine, waiting_on

    def __await__(self) -> Generator[Any, Any, Any]:
        yield self.waiting_on  # (the task running this waits on it, as it would have for the coroutine)
        return (yield from self.coroutine.__await__())


def await_now(awaitable: Awaitable[T]) -> T:
    """``_sync_await`` for the mock monitor: a coroutine runs to its end at once; one that suspends (it waits
    on something the loop must finish) is handed on to the SDK's ``_sync_await`` from where it stopped."""
    if not isinstance(awaitable, Coroutine):
        return _sync_await(awaitable)
    try:
        waiting_on = awaitable.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    return _sync_await(_Resumed(awaitable, waiting_on))


@contextmanager
def monitor_calls_inline() -> Iterator[None]:
    """While inside, the event loop's default executor runs calls at once on the loop's thread, and the mock
    monitor's ``_sync_await`` is ``await_now``."""
    loop = _ensure_event_loop()
    # (asyncio has no public getter for it; the attribute is BaseEventLoop's since Python 3.4)
    previous: concurrent.futures.ThreadPoolExecutor | None = getattr(loop, "_default_executor", None)
    sync_await = pulumi_mocks._sync_await
    loop.set_default_executor(InlineExecutor())
    pulumi_mocks._sync_await = await_now
    try:
        yield
    finally:
        pulumi_mocks._sync_await = sync_await
        _restore_default_executor(loop, previous)


def _restore_default_executor(
    loop: asyncio.AbstractEventLoop, previous: concurrent.futures.ThreadPoolExecutor | None
) -> None:
    if previous is not None:
        loop.set_default_executor(previous)
    else:  # none yet: the loop makes one when it is first asked for it
        setattr(loop, "_default_executor", None)  # noqa: B010 - no public way to unset it
