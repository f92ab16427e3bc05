"""The suite's groups for two workers: shared services stay whole, modules stay whole,
and the shared groups are queued first."""

from __future__ import annotations

from types import SimpleNamespace

from tests import scheduling


def test_shared_directories_form_one_group_and_modules_their_own():
    assert scheduling.group_of("tests/e2e/test_admin.py::test_x") == "service"
    assert scheduling.group_of("tests/security/test_abuse.py::test_y[a::b]") == "service"
    assert scheduling.group_of("tests/ops/test_faults.py::test_z") == "ops"
    assert scheduling.group_of("tests/deployments/test_embedder.py::t") == "ray-deployments"
    module = "tests/serve_app/api/test_gate.py"
    assert scheduling.group_of(f"{module}::test_a[x@y]") == module
    assert scheduling.group_of("tests/test_task_leaks.py::test_b") == "tests/test_task_leaks.py"


def test_the_shared_groups_are_queued_first_and_the_rest_keep_their_order():
    ids = [
        "tests/deployments/test_embedder.py::a",
        "tests/e2e/test_api.py::b",
        "tests/models/test_export.py::c",
        "tests/ops/test_faults.py::d",
        "tests/security/test_abuse.py::e",
        "tests/serve_app/test_text.py::f",
    ]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    scheduling.order(items)  # type: ignore[arg-type]
    assert [i.nodeid[-1] for i in items] == ["b", "e", "d", "a", "c", "f"]
