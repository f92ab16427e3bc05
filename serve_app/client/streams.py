"""Readers of streamed answers, one line at a time: an export's JSON Lines and the chat
proxy's server-sent events. Each knows how its stream ends, so a stream cut short (a
dropped connection, a replica gone mid-answer) raises instead of looking complete."""

from __future__ import annotations

import json
from typing import Any, Protocol

from serve_app.client.errors import Unavailable


class LineReader(Protocol):
    def feed(self, line: str) -> Any | None:
        """The item a line carries, or None for a line that carries none."""

    def end(self) -> None:
        """Called after the last line: raise ``Unavailable`` if the stream was cut short."""


class JsonLines:
    """An export: a JSON object per line, ``header`` first and ``end`` (the counts) last."""

    def __init__(self) -> None:
        self.last: Any = None

    def feed(self, line: str) -> Any | None:
        if not line.strip():
            return None
        record = json.loads(line)
        self.last = record.get("kind") if isinstance(record, dict) else None
        return record

    def end(self) -> None:
        if self.last != "end":
            raise Unavailable(200, "stream_cut", "the export ended before its end record")


class ServerSentEvents:
    """An OpenAI chat stream: ``data: {chunk}`` events until ``data: [DONE]``; an error
    event (``{"error": {"code", "message"}}``) raises as the upstream's failure (502)."""

    def __init__(self) -> None:
        self.done = False

    def feed(self, line: str) -> Any | None:
        if not line.startswith("data:"):
            return None
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return None
        chunk = json.loads(data)
        if isinstance(chunk, dict) and isinstance(chunk.get("error"), dict):
            err = chunk["error"]
            raise Unavailable(502, str(err.get("code", "upstream_error")), str(err.get("message")))
        return chunk

    def end(self) -> None:
        if not self.done:
            raise Unavailable(200, "stream_cut", "the chat stream ended before [DONE]")
