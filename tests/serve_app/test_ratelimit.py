"""Token bucket per API key (plain Python, with a controllable clock)."""

from __future__ import annotations

import pytest

from serve_app.ratelimit import (
    MAX_RETRY_AFTER_S,
    RateLimiter,
    end_user,
    retry_after_header,
    work_units,
)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_burst_then_refill():
    clock = Clock()
    rl = RateLimiter(rate_per_s=2.0, burst=3, clock=clock)
    assert [rl.acquire("k") for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = rl.acquire("k")
    assert 0.4 < wait <= 0.5
    clock.t += 0.5
    assert rl.acquire("k") == 0.0
    assert rl.acquire("k") > 0


def test_keys_are_independent_and_override_applies():
    clock = Clock()
    rl = RateLimiter(rate_per_s=100.0, burst=100, clock=clock)
    assert rl.acquire("slow", override=1.0) == 0.0
    assert rl.acquire("slow", override=1.0) > 0.9  # burst of an override keeps the ratio: 1
    assert rl.acquire("other") == 0.0


def test_zero_rate_disables():
    rl = RateLimiter(rate_per_s=0, burst=0)
    assert all(rl.acquire("k") == 0.0 for _ in range(1000))


def test_lru_bound():
    rl = RateLimiter(rate_per_s=1.0, burst=1, max_keys=2, clock=Clock())
    for k in ("a", "b", "c"):
        rl.acquire(k)
    assert len(rl._buckets) == 2 and "a" not in rl._buckets


def test_retry_after_is_whole_seconds_at_least_one():
    assert retry_after_header(0.01) == "1"
    assert retry_after_header(2.2) == "3"


def test_retry_after_is_clamped_to_an_hour_even_for_an_infinite_wait():
    """A rate of 5e-324 made the wait inf, and math.ceil(inf) a 500 on every request."""
    rl = RateLimiter(rate_per_s=100.0, burst=1)
    assert rl.acquire("k", override=5e-324) == 0.0
    wait = rl.acquire("k", override=5e-324)
    assert wait == float("inf")
    assert retry_after_header(wait) == str(MAX_RETRY_AFTER_S) == "3600"
    assert retry_after_header(float("nan")) == "3600"
    assert retry_after_header(1e300) == "3600"
    assert retry_after_header(3599.2) == "3600"


def test_cost_in_work_units_and_big_requests_pass_on_a_full_bucket():
    clock = Clock()
    rl = RateLimiter(rate_per_s=10.0, burst=20, clock=clock)
    assert rl.acquire("k", cost=15) == 0.0
    assert abs(rl.acquire("k", cost=10) - 0.5) < 1e-9  # 5 left, 10 asked: 0.5 s at 10/s
    clock.t += 10
    assert rl.acquire("k", cost=100) == 0.0  # costlier than the burst: passes when full
    assert rl.acquire("k", cost=1) > 8  # ... and the debt is paid before anything else
    assert rl.wait("other") == 0.0 and rl.wait("other") == 0.0  # wait() spends nothing


def test_work_units_count_items_and_body_size():
    assert work_units(None, 0) == 1
    assert work_units({"user_id": "u", "query": "q"}, 100) < 1.2
    batch = {"items": [{"content": "x" * 8000}] * 100}
    assert 850 < work_units(batch, 800_000) < 900
    assert work_units({"messages": []}, 0) == 1
    assert work_units({"items": "not a list"}, 2048) == 3


@pytest.mark.parametrize(
    ("body", "user"),
    [
        ({"user_id": "ann", "filters": {"user_id": "bob"}}, "ann"),  # the route refuses it
        ({"user": "ann"}, "ann"),  # the chat proxy's field
        ({"filters": {"user_id": "bob"}}, "bob"),  # mem0 v3
        ({"filters": {"AND": [{"agent_id": "a"}, {"AND": [{"user_id": "bob"}]}]}}, "bob"),
        ({"filters": {"user_id": "*"}}, None),  # any user: the key's shared bucket
        ({"filters": {"user_id": 7}}, None),
        ({"filters": {"AND": "bob"}}, None),
        ({"filters": {"AND": [{}] * 500 + [{"user_id": "bob"}]}}, None),  # bounded walk
        (["user_id"], None),
        (None, None),
    ],
)
def test_the_end_user_a_body_names(body, user):
    assert end_user(body) == user
