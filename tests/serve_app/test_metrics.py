"""Local metric aggregates and their flush: what reaches Ray equals what was recorded."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from serve_app import metrics as m
from serve_app.retrieval.cache import HotCache
from serve_app.testing.metrics_sink import Recorder


def test_every_metric_is_defined_once_with_the_exported_names() -> None:
    specs = [v for v in vars(m).values() if isinstance(v, m.MetricSpec)]
    specs += list(m.DB_POOL.values())
    names = [s.name for s in specs]
    assert len(names) == len(set(names))
    for name in (
        "memserve_http_request_ms",
        "memserve_http_requests",
        "memserve_db_pool_size",
        "memserve_embed_batch_size",
        "memserve_embed_queue_wait_ms",
        "memserve_embed_encode_ms",
        "memserve_embed_texts",
        "memserve_retriever_cache_lookups",
        "memserve_retriever_cache_hit_rate",
        "memserve_retriever_cache_bytes",
        "memserve_extract_errors",
        "memserve_extract_latency_ms",
    ):
        assert name in names
    assert all(s.boundaries for s in specs if s.kind == "histogram")


def test_histogram_flush_keeps_bucket_counts_count_and_sum_exact() -> None:
    spec = m.MetricSpec("histogram", "h", "", ("route",), (1, 2, 5))
    hist = m.LocalHistogram(spec)
    values = [0.2, 1.0, 1.0000001, 1.5, 2.0, 4.9, 7.0, 1e6]
    for v in values:
        hist.observe(v, ("/a",))
    hist.observe(3.0, ("/b",), n=4)
    sink = Recorder()
    hist.flush(sink)
    by_tags: dict[tuple, list[tuple[float, int]]] = {}
    for _, tags, value, count in sink.observations:
        by_tags.setdefault(tags, []).append((value, count))
    # Buckets are "value <= le": 1.0 is in the first, 2.0 in the second.
    bounds = [-math.inf, 1, 2, 5, math.inf]

    def bucket(v: float) -> int:
        return next(i for i in range(1, 5) if v <= bounds[i])

    got = {bucket(v): n for v, n in by_tags[("/a",)]}
    want: dict[int, int] = {}
    for v in values:
        want[bucket(v)] = want.get(bucket(v), 0) + 1
    assert got == want == {1: 2, 2: 3, 3: 1, 4: 2}
    assert sum(v * n for v, n in by_tags[("/a",)]) == pytest.approx(sum(values))
    assert by_tags[("/b",)] == [(3.0, 4)]
    sink.observations.clear()
    hist.flush(sink)  # drained: nothing twice
    assert sink.observations == []


def test_representative_value_stays_inside_its_bucket() -> None:
    hist = m.LocalHistogram(m.MetricSpec("histogram", "h", "", (), (1, 2)))
    assert hist.representative(1, 1.0) > 1.0  # rounding put the mean on the lower bound
    assert hist.representative(1, 2.0000001) == 2.0
    assert hist.representative(2, 9.0) == 9.0  # +Inf bucket


def test_counter_sends_deltas_and_retries_after_a_failed_flush() -> None:
    counter = m.LocalCounter(m.MetricSpec("counter", "c", "", ("outcome",)))
    counter.inc(("hot",))
    counter.inc(("hot",), 2)
    sink = Recorder()
    counter.flush(sink)
    counter.flush(sink)
    assert sink.counters == {("c", ("hot",)): 3}

    class Failing(Recorder):
        def counter(self, spec: m.MetricSpec, tags: tuple, value: float) -> None:
            raise RuntimeError("exporter down")

    counter.inc(("cold",))
    with pytest.raises(RuntimeError):
        counter.flush(Failing())
    counter.flush(sink)
    assert sink.counters == {("c", ("hot",)): 3, ("c", ("cold",)): 1}
    assert counter.totals == {("hot",): 3, ("cold",): 1}  # cumulative, for status pages


async def test_flusher_sends_periodically_and_once_more_on_stop() -> None:
    embed = m.EmbedMetrics("mini")
    flusher = m.Flusher([embed], interval_s=0.02)
    sink = Recorder()
    flusher.sink = sink
    assert flusher.start() is flusher and flusher.start() is flusher  # idempotent
    embed.batch(3, started=10.0, ended=10.004, waits=[9.999, 9.998, 9.998])
    await asyncio.sleep(0.1)
    assert sink.counters == {("memserve_embed_texts", ("mini",)): 3}
    waits = [o for o in sink.observations if o[0] == "memserve_embed_queue_wait_ms"]
    assert sum(n for *_, n in waits) == 3
    embed.batch(5, started=11.0, ended=11.01, waits=[11.0] * 5)
    await flusher.stop()  # the shutdown flush, without waiting for the interval
    assert sink.counters[("memserve_embed_texts", ("mini",))] == 8
    sizes = [(v, n) for name, _, v, n in sink.observations if name.endswith("batch_size")]
    assert sorted(sizes) == [(3.0, 1), (5.0, 1)]


def test_flusher_without_a_running_loop_waits_to_be_started() -> None:
    flusher = m.Flusher([m.MetricSet()])
    assert not flusher.start().running


def test_ray_sink_feeds_real_ray_metric_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through ray.serve.metrics' own tag checks down to the Cython record call."""
    recorded: list[tuple[str, float, dict]] = []

    class Record:
        def __init__(self, name: str) -> None:
            self.name = name

        def record(self, value: float, tags: dict) -> None:
            recorded.append((self.name, value, dict(tags)))

    sink = m.RaySink()
    extraction = m.ExtractionMetrics()
    extraction.error("timeout")
    extraction.success(120.0)
    extraction.success(130.0)
    for spec in (m.EXTRACT_ERRORS, m.EXTRACT_SUCCESSES, m.EXTRACT_LATENCY_MS):
        ray_metric = sink._metric(spec)
        assert type(ray_metric).__module__ == "ray.serve.metrics"
        monkeypatch.setattr(ray_metric, "_metric", Record(spec.name))
    extraction.flush(sink)
    assert ("memserve_extract_errors", 1, {"kind": "timeout"}) in recorded
    assert ("memserve_extract_successes", 2, {}) in recorded
    latency = [v for name, v, _ in recorded if name == "memserve_extract_latency_ms"]
    assert latency == [125.0, 125.0]  # both in the (100, 250] bucket; the sum is kept
    assert extraction.counts == {"errors": 1, "error:timeout": 1, "successes": 2}


def test_retriever_metrics_read_the_cache_at_flush() -> None:
    cache = HotCache(1024 * 1024)
    retriever = m.RetrieverMetrics(cache)
    retriever.lookup("hot")
    retriever.lookup("cold")
    retriever.lookup("hot")
    cache.hits, cache.misses = 3, 1
    sink = Recorder()
    retriever.flush(sink)
    assert sink.counters == {
        ("memserve_retriever_cache_lookups", ("hot",)): 2,
        ("memserve_retriever_cache_lookups", ("cold",)): 1,
    }
    assert sink.gauges == {
        ("memserve_retriever_cache_hit_rate", ()): 0.75,
        ("memserve_retriever_cache_bytes", ()): 0,
    }


def test_request_middleware_records_locally_and_flushes_at_shutdown() -> None:
    sink = Recorder()
    made: list[m.RequestMetrics] = []

    class Recorded(m.RequestMetrics):
        def __init__(self, app: Any) -> None:
            super().__init__(app)
            self.flusher.sink = sink
            made.append(self)

    app = FastAPI()

    @app.get("/items/{item_id}")
    async def item(item_id: str) -> dict:
        return {"id": item_id}

    app.add_middleware(Recorded)
    with TestClient(app) as c:
        for i in range(3):
            assert c.get(f"/items/{i}").status_code == 200
        assert c.get("/nope").status_code == 404
        assert made and made[0].flusher.running  # started by the first request
    ok, missing = ("/items/{item_id}", "GET", "2xx"), (m.UNMATCHED, "GET", "4xx")
    assert sink.counters == {
        ("memserve_http_requests", ok): 3,
        ("memserve_http_requests", missing): 1,
    }
    latency = [(t, n) for name, t, _, n in sink.observations if name.endswith("request_ms")]
    assert sum(n for t, n in latency if t == ok) == 3
