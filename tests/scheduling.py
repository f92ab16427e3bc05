"""How the suite runs on two workers (``pytest -n 2 --dist loadscope --no-loadscope-reorder``).

``make test`` (and CI) runs it so: ~18 instead of ~30 minutes on two cores. Plain
``pytest`` runs one process, tests/ops last.

Most of the suite's time is start-ups and waits of whole services (Ray, Serve,
PostgreSQL), not CPU, so two workers overlap them. Each test belongs to one group, and a
group runs whole on one worker, in collection order:

- ``service``: tests/e2e and tests/security share one service (a session fixture);
- ``ops``: tests/ops start services of their own, one at a time (in a run without
  ``-n`` they follow the shared service's tests and stop it first);
- ``ray-deployments``: tests/deployments share one in-process Ray;
- every other module is its own group, so a module's fixtures are set up once.

The groups are queued with the shared ones first (``QUEUE``), so the two service groups
start at once, one per worker, and the modules fill in around them. xdist's own
``loadgroup`` reads ``xdist_group`` marks by rewriting node ids, which pytest 9 no longer
allows, so the grouping is a scheduler of its own: ``loadscope`` with these groups as
scopes (``pytest_xdist_make_scheduler`` in tests/conftest.py).
"""

from __future__ import annotations

from typing import Any

import pytest

# Directory under tests/ -> the group its modules run in together.
SHARED_GROUPS = {
    "e2e": "service",
    "security": "service",
    "ops": "ops",
    "deployments": "ray-deployments",
}
QUEUE = ("service", "ops", "ray-deployments")  # first in the queue; modules after them


def group_of(nodeid: str) -> str:
    """The group of a test: its directory's shared group, else its module."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    shared = SHARED_GROUPS.get(parts[1]) if len(parts) > 2 and parts[0] == "tests" else None
    return shared or path


def ops_rank(item: pytest.Item) -> int:
    """Where a test runs within tests/ops: the users of the shared ops service first, then
    the one test that ends it (``ops_service_ended``), then those that start services of
    their own, so no idle service is left running beside their start-ups."""
    names = getattr(item, "fixturenames", ())
    if "ops_service_ended" in names:
        return 1
    return 0 if "ops_service" in names else 2


def order(items: list[pytest.Item]) -> None:
    """Queue the groups: the shared ones first (``QUEUE``), each in collection order,
    then the modules (a stable sort: everything else keeps its order); within tests/ops,
    :func:`ops_rank`."""
    rank = {name: i for i, name in enumerate(QUEUE)}
    items.sort(key=lambda item: (rank.get(group_of(item.nodeid), len(QUEUE)), ops_rank(item)))


def order_one_process(items: list[pytest.Item]) -> None:
    """Without workers: tests/ops last (they stop the shared service first), in
    :func:`ops_rank` order."""
    items.sort(key=lambda item: (group_of(item.nodeid) == "ops", ops_rank(item)))


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``loadscope`` whose scopes are :func:`group_of`'s groups; the queue keeps the
    collection order (``--no-loadscope-reorder``: largest first would put modules of
    many small tests before the ops tests)."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)
