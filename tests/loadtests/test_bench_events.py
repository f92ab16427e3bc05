"""The event benchmarks' bookkeeping: arm order and the lag/duplicate count."""

from __future__ import annotations

from datetime import UTC, datetime

from loadtests.bench_events import ARMS, lag_ms, rotated


def test_rotation_puts_every_arm_in_every_position_equally() -> None:
    orders = [rotated(ARMS, r) for r in range(2 * len(ARMS))]
    assert all(sorted(o) == sorted(ARMS) for o in orders)
    for pos in range(len(ARMS)):
        firsts = [o[pos] for o in orders]
        assert all(firsts.count(a) == 2 for a in ARMS)


def test_lag_counts_first_arrivals_and_duplicates() -> None:
    t0 = datetime(2026, 11, 27, 12, 0, 0, tzinfo=UTC)

    def body(eid: str) -> dict:
        return {"timestamp": t0.isoformat(), "data": {"id": eid}}

    at = t0.timestamp()
    got = [[(at + 0.1, body("a")), (at + 0.3, body("b")), (at + 5.0, body("a"))], []]
    out = lag_ms(got)
    assert out["deliveries_received"] == [2, 0]
    assert out["duplicates"] == 1
    assert out["lag_ms_p50"] == 200.0  # between 100 and 300; the duplicate's 5 s does not count
