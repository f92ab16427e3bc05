"""Tasks a test leaves running on the session's event loop, named so the failure says who.

Every async test and fixture shares one session-scoped loop (pyproject.toml). A task a
test starts and never stops (a ``Periodic`` a fixture forgot, a metrics ``Flusher`` of an
app whose lifespan never ran) keeps running under every later test; when one of those
later tests is slow or swaps a function the task awaits, the task can spin the loop for
ever (issue 28: ``make test`` hung at 57 %). The root conftest uses these helpers in an
autouse fixture per test and one for the session: a leak fails the test that leaked, at
its teardown, with the task's name, its coroutine and, for a ``Periodic``, its tick.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

SETTLE_S = 1.0  # a task that ends this soon after the test (a cancelled one unwinding) is no leak


def describe(task: asyncio.Task) -> str:
    """``name: Coroutine.qualname`` and, for a ``Periodic`` loop, which tick it runs."""
    coro = task.get_coro()
    what = getattr(coro, "__qualname__", repr(coro))
    frame = getattr(coro, "cr_frame", None)
    owner = frame.f_locals.get("self") if frame is not None else None
    tick = getattr(owner, "tick", None)
    if tick is not None:
        tick_name = getattr(tick, "__qualname__", repr(tick))
        sets = getattr(getattr(tick, "__self__", None), "sets", None)  # a metrics Flusher's
        if sets:
            tick_name += f" of {', '.join(type(s).__name__ for s in sets)}"
        what += f" (Periodic every {getattr(owner, 'interval_s', '?')} s, tick {tick_name})"
    where = ""
    if frame is not None:
        where = f" at {frame.f_code.co_filename}:{frame.f_lineno}"
    return f"{task.get_name()}: {what}{where}"


def _alive(before: Iterable[asyncio.Task]) -> set[asyncio.Task]:
    known, me = set(before), asyncio.current_task()
    return {t for t in asyncio.all_tasks() if t not in known and t is not me and not t.done()}


async def leaked_since(
    before: Iterable[asyncio.Task], settle_s: float = SETTLE_S
) -> list[asyncio.Task]:
    """Tasks started after ``before`` that are still running ``settle_s`` later."""
    deadline = asyncio.get_running_loop().time() + settle_s
    alive = _alive(before)
    while alive and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
        alive = _alive(before)
    return sorted(alive, key=lambda t: t.get_name())


async def cancel(tasks: Iterable[asyncio.Task]) -> None:
    """Stop the leaked tasks so the next test starts on a quiet loop."""
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    await asyncio.wait(tasks, timeout=5)


def report(who: str, tasks: Iterable[asyncio.Task]) -> str:
    lines = "\n".join(f"  - {describe(t)}" for t in tasks)
    return (
        f"{who} left asyncio tasks running on the session's event loop (stop what you start: "
        f"a fixture stops its Periodic/Flusher, an app's lifespan must run):\n{lines}"
    )
