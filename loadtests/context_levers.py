"""Context levers on the foreign implicit-needs set, in process: seconds per setting.

bench_context.py measures blocks through the service (Ray, HTTP, a fresh service per
variant: minutes). Choosing a lever's setting needs many tries, so this runs the same
composition root in process (real PostgreSQL, the real int8 encoder) over
``../shared/data/implicit_needs`` (loadtests/implicit_needs.py): each try is a set of
``ContextSettings`` fields, scored by bench_context's rules per half (u01-u15 calibrate,
u16-u30 report) and per kind, for typed and untyped adds. Settings are chosen on the
calibration half; the report half is printed beside it and never used to choose.

    python -m loadtests.context_levers --tries '{"fill_floor": 0.25}' '{"fill_floor": 0.3}'
    python -m loadtests.context_levers --half calibration      # print one half only

Prints a row per try and source, writes loadtests/results/context_levers-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests import implicit_needs  # noqa: E402
from loadtests.bench_context import HALVES, score  # noqa: E402
from loadtests.context_inprocess import block_outcome  # noqa: E402
from loadtests.context_metrics import Labels  # noqa: E402
from loadtests.harness import write_json  # noqa: E402
from models import load_encoder  # noqa: E402
from serve_app.db.embedded import EmbeddedPostgres  # noqa: E402
from serve_app.db.migrations import migrate  # noqa: E402
from serve_app.embedding_model import ModelFacts  # noqa: E402
from serve_app.settings import Settings  # noqa: E402
from serve_app.store import NewMemory, Owner  # noqa: E402
from serve_app.store.vectors import ensure_table  # noqa: E402
from serve_app.testing.inprocess import in_process_services  # noqa: E402

SLUG = "all-minilm-l6-v2-int8"
TENANT = "levers"
COLUMNS = ("needed_recall", "unneeded_share", "retrieved_unneeded_share", "tokens_mean")


async def load(services: Any, data: dict, prefix: str, typed: bool) -> tuple[dict, dict]:
    """Every user's memories added as the API adds them; owners and labels by user."""
    owners, labels = {}, {}
    for u in data["users"]:
        owner = Owner(TENANT, f"{prefix}-{u['id']}")
        kinds = [(m["type"] or "semantic") if typed else "semantic" for m in u["memories"]]
        items = [NewMemory(m["content"], k) for m, k in zip(u["memories"], kinds, strict=True)]
        rows = await services.memories.add(owner, items, actor="bench")
        lab = Labels({str(r["id"]): m["key"] for m, r in zip(u["memories"], rows, strict=True)})
        lab.profile_keys = {m["key"] for m in u["memories"] if m["cls"]}
        owners[u["id"]], labels[u["id"]] = owner, lab
    return owners, labels


async def one_try(
    n: int, fields: dict[str, Any], dsn: str, encoder: Any, data: dict, sources: list[str]
) -> dict:
    settings = Settings().with_(context=fields)
    model = ModelFacts.of(encoder.spec)
    out: dict[str, Any] = {"settings": fields}
    async with in_process_services(settings, model, dsn, encoder) as services:
        for source in sources:
            owners, labels = await load(services, data, f"t{n}{source}", source == "typed")
            outs = []
            for i, msg in enumerate(data["messages"]):
                block = await services.context.build(owners[msg["user"]], msg["text"])
                lab = labels[msg["user"]]
                o = block_outcome(lab, msg["needs"], block, msg["helpful"])
                outs.append((i, msg["user"], o))
            by_source = {(source, u): lab for u, lab in labels.items()}
            out[source] = score(outs, by_source, source, data)
    return out


def row(name: str, figures: dict) -> str:
    return f"{name:44} " + " ".join(f"{figures[c]:>8}" for c in COLUMNS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tries", nargs="*", default=["{}"], help="ContextSettings fields (JSON)")
    ap.add_argument("--sources", default="typed,untyped")
    ap.add_argument("--half", choices=(*HALVES, "both"), default="both")
    args = ap.parse_args()
    sources = [s for s in args.sources.split(",") if s]
    data = implicit_needs.load()
    encoder = load_encoder(SLUG, threads=1)
    results = []
    with tempfile.TemporaryDirectory(prefix="memserve-levers-") as tmp:
        pg = EmbeddedPostgres(Path(tmp))
        dsn = pg.start()
        try:
            migrate(dsn)
            ensure_table(dsn, encoder.spec.table_slug, encoder.spec.dim)
            halves = HALVES if args.half == "both" else (args.half,)
            print(f"{'try / source / half':44} " + " ".join(f"{c[:8]:>8}" for c in COLUMNS))
            for n, spec in enumerate(args.tries):
                fields = json.loads(spec)
                r = asyncio.run(one_try(n, fields, dsn, encoder, data, sources))
                results.append(r)
                for source in sources:
                    for half in halves:
                        print(row(f"{spec[:28]} {source} {half}", r[source][half]), flush=True)
        finally:
            pg.stop()
    print(f"wrote {write_json('context_levers', {'tries': results, 'data': data['source']})}")


if __name__ == "__main__":
    main()
