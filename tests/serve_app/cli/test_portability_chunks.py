"""The import CLI's chunks: under the byte and record limits, a memory travels with its
history events and a fact with its other versions (an import maps history to new ids
within one request)."""

from __future__ import annotations

import json

from serve_app.cli.portability import chunks, groups


def line(**record) -> str:
    return json.dumps(record)


EXPORT = [
    line(kind="header", format="memserve-export", version=1),
    line(kind="memory", id="m1", content="one"),
    line(kind="memory", id="m2", content="two"),
    line(kind="fact", id="f1", category="p", key="city", value="York", active=False),
    line(kind="fact", id="f2", category="p", key="city", value="Leeds"),
    line(kind="history", memory_id="m1", event="ADD", new_content="one"),
    line(kind="history", memory_id="m2", event="ADD", new_content="two"),
    line(kind="history", memory_id="m1", event="UPDATE", new_content="one!"),
    line(kind="history", memory_id="gone", event="DELETE"),
    line(kind="end", memories=2, facts=2, history=4),
]


def test_groups_keep_a_memory_with_its_history_and_a_fact_with_its_versions():
    got = [
        [
            json.loads(x).get("id") or json.loads(x).get("memory_id") or json.loads(x)["kind"]
            for x in g
        ]
        for g in groups(EXPORT)
    ]
    assert got == [["header"], ["m1", "m1", "m1"], ["m2", "m2"], ["f1", "f2"], ["gone"], ["end"]]


def test_chunks_never_split_a_group_and_respect_the_record_limit():
    out = list(chunks(EXPORT, limit=10_000, max_records=3))
    sizes = [len(c.splitlines()) for c in out]
    assert all(n <= 3 for n in sizes) and sum(sizes) == len(EXPORT)
    for chunk in out:
        ids = [json.loads(x).get("memory_id") for x in chunk.splitlines()]
        if "m1" in ids:
            assert '"id": "m1"' in chunk  # the memory is in the chunk of its events
