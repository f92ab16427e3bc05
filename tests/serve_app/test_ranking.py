from datetime import UTC, datetime, timedelta

from serve_app.ranking import rank, recency
from serve_app.settings import RankSettings

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def cand(i, sim, imp=0.5, age_days=0):
    return {"id": i, "similarity": sim, "importance": imp, "updated_at": NOW - timedelta(age_days)}


def test_recency_halves_each_half_life():
    assert recency(NOW - timedelta(days=30), NOW, 30) == 0.5
    assert recency(NOW, NOW, 30) == 1.0


def test_threshold_applies_to_similarity():
    out = rank([cand(1, 0.9), cand(2, 0.2)], RankSettings(), top_k=10, threshold=0.5, now=NOW)
    assert [c["id"] for c in out] == [1]


def test_importance_and_recency_break_near_ties():
    w = RankSettings(w_similarity=0.8, w_importance=0.1, w_recency=0.1)
    old = cand("old", 0.80, imp=0.5, age_days=365)
    fresh = cand("fresh", 0.79, imp=0.9, age_days=0)
    out = rank([old, fresh], w, top_k=2, threshold=None, now=NOW)
    assert [c["id"] for c in out] == ["fresh", "old"]


def test_similarity_dominates_with_default_weights():
    out = rank(
        [cand(1, 0.3, imp=1.0), cand(2, 0.9, imp=0.0)],
        RankSettings(),
        top_k=1,
        threshold=None,
        now=NOW,
    )
    assert out[0]["id"] == 2


def test_top_k_limits():
    out = rank([cand(i, 0.5) for i in range(10)], RankSettings(), top_k=3, threshold=None, now=NOW)
    assert len(out) == 3


def test_cap_per_group_moves_a_groups_excess_behind_the_others():
    from serve_app.ranking import cap_per_group

    ranked = [{"id": i} for i in range(5)]
    groups = ["a", "a", "a", "b", None]
    got = [c["id"] for c in cap_per_group(ranked, groups, 2, 4)]
    assert got == [0, 1, 3, 4]
    assert [c["id"] for c in cap_per_group(ranked, groups, 0, 3)] == [0, 1, 2]
