"""Per-test timeouts by kind of test, so a hang is one quick failure, not ten minutes.

pytest-timeout runs with ``timeout_method = "thread"`` (pyproject.toml): the ``signal``
method raises inside whatever Python code runs at that moment, and when that is a task
spinning on the session's loop (issue 28's hang) the exception ends that task and the
hung test goes on. The thread method dumps every thread's stack and ends the run, which
is what a hang deserves. The figures are about ten times what the slowest test of each
kind takes on a busy 2-core machine, so a slow machine is not a hang; a test that needs
more says so with its own ``@pytest.mark.timeout(...)``. The timeout covers the test's
setup too, so the first test of a kind pays for starting the shared servers.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import pytest_timeout

UNIT_S = 30
DB_S = 60  # tests on the session's embedded Postgres (its start-up included)
SLOW_S = 300  # marked slow: model exports, Ray deployments started in-process
PROCESS_S = 300  # starts Python processes of its own (an interpreter start and imports each)
SERVICE_S = 420  # a whole Serve app over HTTP (tests/e2e, tests/security)
OPS_S = 600  # services of their own, restarts, load (tests/ops, tests/loadtests)

_BY_DIRECTORY = {
    "ops": OPS_S,
    "loadtests": OPS_S,
    "e2e": SERVICE_S,
    "security": SERVICE_S,
    "deployments": SLOW_S,
}
_DB_FIXTURES = {"pg_server", "pg_admin_dsn"}
_MODEL_FIXTURES = {"torch_weights", "exported_minilm", "requantized_cache"}  # build a model


def timeout_for(item: pytest.Item) -> int:
    """Seconds ``item`` may take: by its directory under tests/, its marks, its fixtures."""
    try:
        parts = item.path.relative_to(item.config.rootpath).parts
    except ValueError:  # outside the repository (a pytester run)
        parts = ()
    top = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
    if top in _BY_DIRECTORY:
        return _BY_DIRECTORY[top]
    fixtures = set(getattr(item, "fixturenames", ()))
    if item.get_closest_marker("slow") is not None or _MODEL_FIXTURES & fixtures:
        return SLOW_S
    if hasattr(getattr(item, "module", None), "subprocess"):  # the module imports it
        return PROCESS_S
    if _DB_FIXTURES & fixtures:
        return DB_S
    return UNIT_S


def start_timer(item: pytest.Item, settings: Any) -> bool | None:
    """pytest-timeout's thread timer, which first names the test that ran out of time
    (its own dump shows only stacks: under ``-q`` nothing else says which test hung)."""
    if settings.method != "thread" or not settings.timeout:
        return None  # pytest-timeout's own handling

    def fire() -> None:
        item.config.get_terminal_writer().sep(
            "+", f"Timeout: {item.nodeid} ran past {settings.timeout:g} s (tests/timeouts.py)"
        )
        pytest_timeout.timeout_timer(item, settings)  # stacks of every thread, then exit 1

    timer = threading.Timer(settings.timeout, fire)
    timer.name = f"pytest_timeout {item.nodeid}"

    def cancel() -> None:
        timer.cancel()
        timer.join()

    item.cancel_timeout = cancel  # type: ignore[attr-defined]  # read by pytest-timeout
    timer.start()
    return True
