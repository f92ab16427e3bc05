"""Length-sorted, token-capped splitting of a batch of texts.

A transformer batch is padded to its longest member, so one long text in a
batch of short ones multiplies the work of all of them. Sorting by length and
capping each sub-batch by padded tokens (rows x longest) keeps padding small
and bounds memory per run.
"""

from __future__ import annotations

from collections.abc import Sequence


def plan_batches(
    lengths: Sequence[int], *, max_batch_tokens: int, max_batch_size: int | None = None
) -> list[list[int]]:
    """Split indices of ``lengths`` into sub-batches, shortest texts first.

    Each sub-batch holds indices of texts of similar length, with
    ``len(batch) * max(lengths in batch) <= max_batch_tokens`` (a single text
    longer than the cap still gets a batch of its own) and at most
    ``max_batch_size`` rows.
    """
    if max_batch_tokens <= 0:
        raise ValueError("max_batch_tokens must be positive")
    if max_batch_size is not None and max_batch_size <= 0:
        raise ValueError("max_batch_size must be positive")
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        n = max(int(lengths[i]), 1)
        grown = max(longest, n)
        full = max_batch_size is not None and len(current) >= max_batch_size
        if current and (full or grown * (len(current) + 1) > max_batch_tokens):
            batches.append(current)
            current, grown = [], n
        current.append(i)
        longest = grown
    if current:
        batches.append(current)
    return batches


def padded_tokens(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> int:
    """Tokens actually computed (with padding) for a plan: for tests and metrics."""
    return sum(len(b) * max(lengths[i] for i in b) for b in batches if b)


def spread_batches(
    batches: Sequence[Sequence[int]],
    lengths: Sequence[int],
    workers: int,
    *,
    min_split_tokens: int = 128,
) -> list[list[int]]:
    """Halve the costliest sub-batches so ``workers`` parallel runners finish together;
    the result is costliest first, so the runs left for last are short.

    Cost is padded tokens (rows x longest). The costliest sub-batch is halved
    while there are fewer sub-batches than workers, or while it is more than
    half a worker's fair share; never when it is under ``min_split_tokens``.
    Small runs cost more per text than they gain in time: on 2 cores three short
    texts (60 tokens) split over two runners took 3.5 instead of 3.7 ms but 45%
    more CPU, which a loaded replica pays in throughput; eight (160 tokens) took
    5.7 instead of 9.3 ms for 11% more. Halves keep their length order, so
    padding does not grow; single rows are never split.
    """
    out = [list(b) for b in batches if b]
    if workers <= 1 or not out:
        return out

    def cost(rows: list[int]) -> int:
        return len(rows) * max(max(int(lengths[i]), 1) for i in rows)

    fair_half = sum(cost(b) for b in out) / (2 * workers)
    while True:
        k = max(range(len(out)), key=lambda j: cost(out[j]))
        rows = out[k]
        if len(rows) < 2 or cost(rows) < min_split_tokens:
            break
        if len(out) >= workers and cost(rows) <= fair_half:
            break
        half = len(rows) // 2
        out[k : k + 1] = [rows[:half], rows[half:]]
    out.sort(key=cost, reverse=True)  # stable: equal costs keep their order
    return out
