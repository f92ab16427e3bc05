"""bench_vs_mem0 A/Bs the query routes (issue 23) on one commit and records the settings."""

from __future__ import annotations

import argparse

import pytest

from loadtests.bench_vs_mem0 import (
    HOT,
    memserve_names,
    memserve_settings,
    parse_variant,
    print_table,
    workloads,
)


def args(query_embed: str, *sets: str) -> argparse.Namespace:
    return argparse.Namespace(query_embed=query_embed, set=list(sets))


def test_both_runs_memserve_once_per_route_with_its_setting() -> None:
    a = args("both", "MEMSERVE_CACHE_BUDGET_MB=0", "MEMSERVE_QUERY_EMBED=ignored")
    names = memserve_names("both")
    assert names == ["memserve:retriever", "memserve:embedder"]
    assert [memserve_settings(n, a) for n in names] == [
        {"MEMSERVE_CACHE_BUDGET_MB": "0", "MEMSERVE_QUERY_EMBED": "retriever"},
        {"MEMSERVE_CACHE_BUDGET_MB": "0", "MEMSERVE_QUERY_EMBED": "embedder"},
    ]  # the run's route wins over a --set of the same variable


def test_one_route_keeps_the_memserve_name() -> None:
    assert memserve_names("embedder") == ["memserve"]
    assert memserve_settings("memserve", args("embedder")) == {"MEMSERVE_QUERY_EMBED": "embedder"}


def test_the_table_shows_every_run_and_ratios_over_the_first(capsys) -> None:
    plan = workloads(quick=True)

    def med(scale: float) -> dict:
        row = {
            "req_per_s": 100.0 * scale,
            "memories_per_s": 1000.0 * scale,
            "p50_ms": 10.0 / scale,
            "p95_ms": 20.0 / scale,
            "cpu_ms_per_req": 8.0 / scale,
            "cpu_ms_per_req_by_role": {"ray": 8.0 / scale},
            "errors": 0,
        }
        return {w.name: dict(row) for w in plan}

    print_table({"memserve:retriever": med(1.0), "memserve:embedder": med(2.0)}, plan)
    out = capsys.readouterr().out
    assert "memserve:retriever" in out and "memserve:embedder" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("search, 8 clients, req/s"))
    assert line.split()[-1] == "2.00x"  # embedder over retriever
    assert f"by process role, {HOT}" in out


def test_a_variant_is_one_more_run_with_its_own_variables() -> None:
    a = args("both", "MEMSERVE_CACHE_BUDGET_MB=0")
    a.variant = ["lean:RAY_enable_metrics_collection=0,MEMSERVE_RAY_DASHBOARD=false"]
    names = memserve_names("both", a.variant)
    assert names == ["memserve:retriever", "memserve:embedder", "memserve:lean"]
    assert memserve_settings("memserve:lean", a) == {
        "MEMSERVE_CACHE_BUDGET_MB": "0",
        "MEMSERVE_QUERY_EMBED": "retriever",  # the default route, not "both"
        "RAY_enable_metrics_collection": "0",
        "MEMSERVE_RAY_DASHBOARD": "false",
    }
    assert memserve_settings("memserve:embedder", a)["MEMSERVE_QUERY_EMBED"] == "embedder"


def test_a_variant_names_only_memserve_or_ray_variables() -> None:
    for bad in ("lean", "lean:", "lean:PATH=/x", ":RAY_x=1", "embedder:RAY_x=1"):
        with pytest.raises(ValueError):
            parse_variant(bad)
    assert parse_variant("x:RAY_a=1,MEMSERVE_B=c=d") == ("x", {"RAY_a": "1", "MEMSERVE_B": "c=d"})


def test_a_table_of_some_workloads_leaves_the_hot_profile_out(capsys) -> None:
    plan = [w for w in workloads(quick=True) if w.name == "search_c1"]
    row = {"req_per_s": 50.0, "p50_ms": 20.0, "p95_ms": 30.0, "cpu_ms_per_req": 9.0}
    med = {"search_c1": row | {"cpu_ms_per_req_by_role": {"ray": 9.0}, "errors": 0}}
    print_table({"memserve": med, "memserve:lean": med}, plan)
    out = capsys.readouterr().out
    assert "search, 1 client, req/s" in out and "1.00x" in out
    assert "by process role" not in out


def test_a_search_only_plan_prefills_what_the_writes_would_have_written() -> None:
    from loadtests.bench_vs_mem0 import prefill_for

    full = workloads(quick=False)
    assert prefill_for(full, quick=False) == 0
    searches = [w for w in full if w.kind == "search"]
    assert prefill_for(searches, quick=False) == 200 + 10 * 100
    assert prefill_for([w for w in full if w.name != "add_c8"], quick=False) == 200
