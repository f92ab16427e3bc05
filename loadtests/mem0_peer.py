"""mem0 OSS served over HTTP the way mem0's own REST server (server/main.py) does.

Runs with the peer virtualenv's Python (built by loadtests/bench_servers.py), never
with memserve's: it imports nothing from memserve. FastAPI with sync routes (so
requests run in Starlette's thread pool) around one ``Memory`` built from a config:
pgvector on a PostgreSQL server given by DSN, the all-MiniLM-L6-v2 checkpoint
through sentence-transformers, and an LLM config that is never called (the
benchmark adds with ``infer=False``; mem0 then stores each message as a memory).

    <peer-venv>/bin/python loadtests/mem0_peer.py --dsn DSN --model DIR --port N --data DIR
"""

from __future__ import annotations

import argparse
import os

# Before mem0 and sentence-transformers are imported: no telemetry, no hub.
os.environ.setdefault("MEM0_TELEMETRY", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from typing import Any  # noqa: E402

import uvicorn  # noqa: E402
from fastapi import FastAPI, HTTPException  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402
from pydantic import BaseModel, Field  # noqa: E402


class Message(BaseModel):
    role: str
    content: str


class MemoryCreate(BaseModel):
    messages: list[Message]
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    metadata: dict[str, Any] | None = None
    infer: bool = True


class SearchRequest(BaseModel):
    query: str
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    top_k: int = Field(10, alias="limit")

    model_config = {"populate_by_name": True}


def mem0_config(dsn: str, model_dir: str, data_dir: str) -> dict:
    return {
        "vector_store": {
            "provider": "pgvector",
            "config": {
                "connection_string": dsn,
                "collection_name": "memories",
                "embedding_model_dims": 384,
            },
        },
        "embedder": {
            "provider": "huggingface",
            "config": {"model": model_dir, "embedding_dims": 384},
        },
        # Never called with infer=False; a closed local port so nothing leaves the machine.
        "llm": {
            "provider": "openai",
            "config": {
                "api_key": "unused",
                "openai_base_url": "http://127.0.0.1:9/v1",
                "model": "unused",
            },
        },
        "history_db_path": os.path.join(data_dir, "history.db"),
    }


def _ids(req: MemoryCreate | SearchRequest) -> dict[str, str]:
    """The session identifiers the request set (mem0 scopes every call by them)."""
    pairs = (("user_id", req.user_id), ("agent_id", req.agent_id), ("run_id", req.run_id))
    return {k: v for k, v in pairs if v is not None}


def build_app(memory: Any) -> FastAPI:
    app = FastAPI(title="mem0 peer")

    @app.get("/healthz")
    def healthz() -> dict:
        return {"ok": True}

    @app.post("/memories")
    def add_memory(req: MemoryCreate) -> JSONResponse:
        if not (ids := _ids(req)):
            raise HTTPException(400, "one of user_id, agent_id, run_id is required")
        try:
            out = memory.add(
                messages=[m.model_dump() for m in req.messages],
                metadata=req.metadata,
                infer=req.infer,
                **ids,
            )
        except Exception as e:  # mem0's server answers 500 with the message
            raise HTTPException(500, str(e)) from e
        return JSONResponse(content=out)

    @app.post("/search")
    def search(req: SearchRequest) -> Any:
        try:
            return memory.search(query=req.query, filters=_ids(req), top_k=req.top_k)
        except Exception as e:
            raise HTTPException(500, str(e)) from e

    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--model", required=True, help="sentence-transformers checkpoint directory")
    ap.add_argument("--data", required=True, help="directory for mem0's history database")
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args()
    from mem0 import Memory

    memory = Memory.from_config(mem0_config(args.dsn, args.model, args.data))
    uvicorn.run(build_app(memory), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
