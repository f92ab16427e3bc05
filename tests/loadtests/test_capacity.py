"""The capacity model turns CPU ms per request per role into cores, replicas and targets."""

from __future__ import annotations

from loadtests.capacity import markdown, model


def medians() -> dict:
    return {
        "search_c8": {"cpu_ms_per_req_by_role": {"Ingress": 2.0, "Retriever": 3.0, "proxy": 0.5}},
        "batch100": {"cpu_ms_per_req_by_role": {"Embedder": 150.0, "Ingress": 20.0}},
        "search_c1": {"p50_ms": 10.0},
    }


def test_cores_replicas_and_little_law() -> None:
    cap = model(medians(), utilisation=0.5)
    # 3 ms a search x 1,000/s = 3 cores; a replica at half of one core: 6 of them
    assert cap["Retriever"]["search_cores"] == 3.0
    assert cap["Retriever"]["search_replicas"] == 6
    # 150 ms per batch of 100 = 1.5 ms a memory = 1.5 cores per 1k/s; 2-CPU replicas at 50%
    assert cap["Embedder"]["ingest_cores"] == 1.5
    assert cap["Embedder"]["ingest_replicas"] == 2
    # Ingress: 0.5 / 2 ms = 250/s per replica, 10 ms inside: 2.5 ongoing
    assert cap["Ingress"]["target_ongoing_requests"] == 2.5
    # Retriever: 0.5 / 3 ms = 166.7/s, 10 ms x 3/5 of the path = 6 ms inside: 1.0
    assert cap["Retriever"]["target_ongoing_requests"] == 1.0
    assert cap["total"] == {"search_cores": 5.5, "ingest_cores": 1.7}
    table = markdown(cap)
    assert "| Retriever | 3.0 | 6 | 0.0 | 0 | 1.0 |" in table
