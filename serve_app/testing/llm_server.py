"""A scripted OpenAI-compatible chat-completions server for tests.

Runs ``http.server`` in a thread; the test (or, through ``POST /_control``, any
process such as the e2e service) decides what it answers:

- rules: the first rule whose ``contains`` text occurs in the request's messages
  answers (optionally only for one kind of call and a limited number of times);
- a queue of scripted answers, used before the rules;
- a rule may answer an HTTP error instead (``status``, e.g. 400: a content filter);
- responders (in-process only): a function of the request's messages that answers
  (or returns None to pass), e.g. a reconcile answer decided from the memories the
  prompt shows; ``on_request`` runs before answering (a test's concurrent edit);
- ``max_prompt_chars``: longer requests get HTTP 400 "context too long";
- failure modes: ``malformed`` (content that is not JSON), ``http500``,
  ``delay`` (answer after ``delay_s``; with a short client timeout: a timeout),
  and ``down()`` (the socket is closed: connection refused) / ``up()``;
- streams: ``cut`` (the connection closes after the first piece of content, before
  ``[DONE]``), ``slow_stream`` (``delay_s`` between events).

Defaults without a rule: an extraction call gets ``{"memories": [], "facts": []}``,
a summary call gets a summary quoting the first user turn, and any other chat
call (the chat proxy's upstream) gets ``DEFAULT_CHAT_ANSWER``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from serve_app.consolidation.prompts import DIGEST_MARKER, INSIGHT_MARKER
from serve_app.extraction.prompts import EXTRACT_MARKER, SUMMARY_MARKER
from serve_app.extraction.reconcile import KNOWN_HEADER
from serve_app.spend.estimate import estimated_usage
from serve_app.text import count_tokens

CACHE_PROMPTS = 256
DEFAULT_CHAT_ANSWER = "This is a scripted answer from the test LLM."
# (kind, messages) -> the answer's content, or None to let the next responder/rule answer
Responder = Callable[[str, list[dict[str, Any]]], str | None]


@dataclass
class Rule:
    contains: str
    answer: str
    kind: str | None = None  # extract | summary | chat; None: any
    times: int | None = None  # None: unlimited
    status: int = 200  # != 200: answer this HTTP error instead
    message: str = "scripted failure"  # the error's message (status != 200)


class PrefixCache:
    """A provider's prompt cache, as DeepSeek's (or OpenAI's without its 1024-token floor):
    a prompt's cached tokens are those of the longest prefix it shares with one of the
    last ``size`` prompts, in whole 64-token blocks."""

    def __init__(self, size: int = CACHE_PROMPTS) -> None:
        self._seen: deque[str] = deque(maxlen=size)

    def cached(self, text: str) -> int:
        best = max((len(os.path.commonprefix([text, seen])) for seen in self._seen), default=0)
        self._seen.append(text)
        return count_tokens(text[:best]) // 64 * 64


def kind_of(messages: list[dict[str, Any]]) -> str:
    text = " ".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
    if EXTRACT_MARKER in text:
        return "extract"
    if SUMMARY_MARKER in text:
        return "summary"
    if INSIGHT_MARKER in text:
        return "insight"
    if DIGEST_MARKER in text:
        return "digest"
    return "chat"


def extraction(memories: list[dict] | None = None, facts: list[dict] | None = None) -> str:
    """An answer that follows the extraction contract."""
    return json.dumps({"memories": memories or [], "facts": facts or []})


def shown(messages: list[dict[str, Any]]) -> dict[str, str]:
    """The aliases an extraction prompt showed (``m1: text`` / ``f1: cat/key = value``
    lines after the reconcile header), as a reconciling model reads them."""
    user = str(messages[-1].get("content", "")) if messages else ""
    if KNOWN_HEADER not in user:
        return {}
    out = {}
    for line in user.split(KNOWN_HEADER, 1)[1].splitlines():
        alias, sep, text = line.partition(": ")
        if sep and alias[:1] in ("m", "f") and alias[1:].isdigit():
            out[alias] = text
    return out


def decision(event: str, target: str, content: str = "", reason: str = "", **extra: Any):
    """A memory item with a reconcile event (UPDATE, INVALIDATE, NOOP) on an alias."""
    item = {"event": event, "target": target, "reason": reason, **extra}
    if content:
        item.update(type="fact", content=content, importance=0.7, confidence=0.9)
    return item


def memory(content: str, type: str = "fact", importance: float = 0.7, confidence: float = 0.9):
    return {"type": type, "content": content, "importance": importance, "confidence": confidence}


def fact(category: str, key: str, value: str, confidence: float = 0.9) -> dict:
    return {"category": category, "key": key, "value": value, "confidence": confidence}


class FakeLLM:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[socket.socket] = set()
        self.reset()

    # ---------- lifecycle ----------

    @property
    def url(self) -> str:
        """Base URL as OpenAI clients expect it (MEMSERVE_LLM_BASE_URL)."""
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> FakeLLM:
        handler = _make_handler(self)
        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer((self.host, self.port), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def down(self) -> None:
        """Close the socket: clients get connection refused until :meth:`up`.

        Open keep-alive connections are cut too, as when a real server dies.
        """
        self.stop()
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def up(self) -> None:
        if self._server is None:
            self.start()

    @property
    def is_up(self) -> bool:
        return self._server is not None

    # ---------- scripting ----------

    def reset(self) -> None:
        with self._lock:
            self.rules: list[Rule] = []
            self.queue: list[str] = []
            self.mode = "ok"  # ok | malformed | http500 | delay
            self.delay_s = 0.0
            self.requests: list[dict[str, Any]] = []
            self.max_prompt_chars: int | None = None
            self.responders: list[Responder] = []
            self.on_request: Callable[[str, list[dict[str, Any]]], None] | None = None
            # (host, port) of the caller -> what the request log records as its "client"
            # (e.g. which Ray replica holds that socket); runs while the connection is open.
            self.identify: Callable[[tuple[str, int]], Any] | None = None
            self.report_usage = True  # answers carry OpenAI's ``usage``; False: omitted
            # Cut answers longer than the request's max_tokens (finish_reason "length");
            # a cut queued answer goes back to the queue's front (the model would say it again).
            self.honour_max_tokens = False
            self.cache = PrefixCache()  # cached_tokens in the usage it reports
            # Answer a strict ``json_schema`` response format with 400, as servers that
            # only know ``json_object`` do.
            self.refuse_json_schema = False

    def add_rule(
        self,
        contains: str,
        answer: str,
        kind: str | None = "extract",
        times: int | None = None,
        status: int = 200,
        message: str = "scripted failure",
    ) -> None:
        with self._lock:
            self.rules.append(Rule(contains, answer, kind, times, status, message))

    def add_responder(self, fn: Responder) -> None:
        """``fn(kind, messages)`` answers a call (a string) or passes (None); tried in
        order after the queue and before the rules."""
        with self._lock:
            self.responders.append(fn)

    def remove_rules(self, contains: str) -> int:
        """Drop every rule matching on ``contains``; how many."""
        with self._lock:
            before = len(self.rules)
            self.rules = [r for r in self.rules if r.contains != contains]
            return before - len(self.rules)

    def limit_prompt(self, max_chars: int | None) -> None:
        """Requests with more message characters than this get HTTP 400 (context too long)."""
        with self._lock:
            self.max_prompt_chars = max_chars

    def enqueue(self, *answers: str) -> None:
        with self._lock:
            self.queue.extend(answers)

    def set_mode(self, mode: str, delay_s: float = 0.0) -> None:
        assert mode in ("ok", "malformed", "http500", "delay", "cut", "slow_stream"), mode
        with self._lock:
            self.mode = mode
            self.delay_s = delay_s

    def refuse_schema(self, refuse: bool = True) -> None:
        """Whether a ``json_schema`` response format is refused (400) like an old server."""
        with self._lock:
            self.refuse_json_schema = refuse

    def set_usage(self, report: bool) -> None:
        """Whether answers report ``usage`` (the tokens are counted either way: ``served``)."""
        with self._lock:
            self.report_usage = report

    def served(self, kind: str | None = None) -> dict[str, int]:
        """Calls answered 200 and their prompt/completion tokens (what a provider bills),
        counted as the service estimates them (serve_app/services/chat_caps.py)."""
        out = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
        for r in self.calls(kind):
            if r.get("usage"):
                out["calls"] += 1
                out["prompt_tokens"] += r["usage"]["prompt_tokens"]
                out["completion_tokens"] += r["usage"]["completion_tokens"]
        return out

    def calls(self, kind: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if kind is None or r["kind"] == kind]

    # ---------- answering ----------

    def control(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /_control``: the same scripting over HTTP (for other processes)."""
        action = body.get("action")
        if action == "reset":
            self.reset()
        elif action == "rule":
            self.add_rule(
                body["contains"],
                body["answer"],
                body.get("kind", "extract"),
                body.get("times"),
                int(body.get("status", 200)),
                body.get("message", "scripted failure"),
            )
        elif action == "remove_rules":
            return {"ok": True, "removed": self.remove_rules(body["contains"])}
        elif action == "limit_prompt":
            self.limit_prompt(body.get("max_chars"))
        elif action == "enqueue":
            self.enqueue(*body["answers"])
        elif action == "mode":
            self.set_mode(body["mode"], float(body.get("delay_s", 0.0)))
        elif action == "usage":
            self.set_usage(bool(body.get("report", True)))
        elif action == "refuse_schema":
            self.refuse_schema(bool(body.get("refuse", True)))
        elif action == "down":
            threading.Thread(target=self.down, daemon=True).start()
        else:
            raise ValueError(f"unknown action {action!r}")
        return {"ok": True}

    def answer(self, body: dict[str, Any]) -> tuple[int, str | None]:
        """(HTTP status, assistant content) for one chat-completions request
        (for an error status, the error's message instead of content)."""
        status, content, _ = self.answer_with_usage(body)
        return status, content

    def answer_with_usage(self, body: dict[str, Any]) -> tuple[int, str | None, dict | None]:
        """:meth:`answer` and the ``usage`` the answer reports (None: not reported)."""
        return self.respond(body)[:3]

    def respond(
        self, body: dict[str, Any], peer: tuple[str, int] | None = None
    ) -> tuple[int, str | None, dict | None, str]:
        """(status, content, reported usage, finish_reason) for one request; ``peer``:
        the caller's socket address (recorded as ``client``, through :attr:`identify`)."""
        messages = body.get("messages") or []
        kind = kind_of(messages)
        text = "\n".join(str(m.get("content", "")) for m in messages)
        identify = self.identify
        client = identify(peer) if identify is not None and peer is not None else peer
        entry = {
            "kind": kind,
            "messages": messages,
            "body": body,
            "at": time.time(),
            "client": client,
        }
        with self._lock:
            self.requests.append(entry)
            mode, delay = self.mode, self.delay_s
            content = None
            status, message = 200, "scripted failure"
            if self.max_prompt_chars is not None and len(text) > self.max_prompt_chars:
                return 400, "context too long", None, "stop"
            response_format = body.get("response_format") or {}
            if self.refuse_json_schema and response_format.get("type") == "json_schema":
                return 400, "response_format 'json_schema' is not supported", None, "stop"
            hook, responders = self.on_request, list(self.responders)
            queued = kind == "extract" and bool(self.queue)
            if queued:
                content = self.queue.pop(0)
            elif any((content := fn(kind, messages)) is not None for fn in responders):
                pass
            else:
                for rule in self.rules:
                    if (rule.kind in (None, kind)) and rule.contains in text:
                        content, status, message = rule.answer, rule.status, rule.message
                        if rule.times is not None:
                            rule.times -= 1
                            if rule.times <= 0:
                                self.rules.remove(rule)
                        break
        if hook is not None:
            hook(kind, messages)
        if mode == "delay" and delay:
            time.sleep(delay)
        if status != 200:
            return status, message, None, "stop"
        if mode == "http500":
            return 500, None, None, "stop"
        if mode == "malformed":
            content = "Sure! Here are the memories: {memories: [oops"
        if content is None:
            content = self._default(kind, messages)
        cap = body.get("max_tokens") or body.get("max_completion_tokens")
        finish = "stop"
        if self.honour_max_tokens and isinstance(cap, int) and count_tokens(content) > cap:
            if queued:
                with self._lock:
                    self.queue.insert(0, content)
            content, finish = content[: cap * 3], "length"
        prompt, completion = estimated_usage(body, content)
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": self._cached(messages)},
        }
        with self._lock:
            entry["usage"] = usage  # served (billed) whether or not the answer reports it
            reported = self.report_usage
        return 200, content, usage if reported else None, finish

    def _cached(self, messages: list[dict[str, Any]]) -> int:
        text = "\n".join(str(m.get("content", "")) for m in messages)
        with self._lock:
            return self.cache.cached(text)

    @staticmethod
    def _default(kind: str, messages: list[dict[str, Any]]) -> str:
        if kind == "extract":
            return extraction()
        if kind == "insight":  # one sentence over the first memory listed
            user = str(messages[-1].get("content", "")) if messages else ""
            first = next((ln[2:] for ln in user.splitlines() if ln.startswith("- ")), "")
            return json.dumps(
                {"insight": f"The user has a pattern around: {first[:200]}", "importance": 0.7}
            )
        if kind == "digest":
            return json.dumps({"summary": "The user had several older conversations."})
        if kind == "summary":
            user = str(messages[-1].get("content", "")) if messages else ""
            lines = [ln for ln in user.splitlines() if "] user:" in ln]
            first = lines[0].split("] user:", 1)[1].strip() if lines else "nothing notable"
            return json.dumps({"summary": f"The user talked about: {first[:200]}"})
        return DEFAULT_CHAT_ANSWER


def _make_handler(fake: FakeLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # keep test output clean
            pass

        def setup(self) -> None:
            super().setup()
            with fake._lock:
                fake._conns.add(self.connection)

        def finish(self) -> None:
            with fake._lock:
                fake._conns.discard(self.connection)
            with contextlib.suppress(OSError):
                super().finish()

        def _json(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(data)  # the client may have given up (timeout tests)

        def _body(self) -> dict[str, Any]:
            n = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(n) or b"{}")

        def _stream(self, body: dict[str, Any], content: str, usage: dict | None) -> None:
            """OpenAI-style SSE: a role chunk, content in a few pieces, a stop chunk, [DONE];
            with ``stream_options.include_usage`` (and usage reported), every chunk carries
            ``"usage": null`` and a last one with no choices carries the usage, as OpenAI's."""
            base = {
                "id": "chatcmpl-stream",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": body.get("model", "fake"),
            }
            step = max(1, len(content) // 3)
            deltas = [{"role": "assistant", "content": ""}] + [
                {"content": content[i : i + step]} for i in range(0, len(content), step)
            ]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            events = [
                {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]}
                for d in deltas
            ]
            events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            if (body.get("stream_options") or {}).get("include_usage") and usage is not None:
                events = [{**e, "usage": None} for e in events]
                events.append({**base, "choices": [], "usage": usage})
            with fake._lock:
                mode, delay = fake.mode, fake.delay_s
            if mode == "cut":  # the role and the first piece, then the connection closes
                events = events[:2]
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                for event in events:
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                    self.wfile.flush()
                    if mode == "slow_stream":
                        time.sleep(delay)
                if mode != "cut":
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()

        def do_GET(self) -> None:
            if self.path == "/_requests":
                self._json(200, {"requests": fake.calls()})
            elif self.path in ("/v1/models", "/models"):
                self._json(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
            else:
                self._json(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            try:
                body = self._body()
            except ValueError:
                self._json(400, {"error": {"message": "invalid JSON"}})
                return
            if self.path == "/_control":
                try:
                    self._json(200, fake.control(body))
                except (KeyError, ValueError, AssertionError) as exc:
                    self._json(400, {"error": {"message": str(exc)}})
                return
            if self.path not in ("/v1/chat/completions", "/chat/completions"):
                self._json(404, {"error": {"message": "not found"}})
                return
            if not fake.is_up:  # went down while this connection was open
                self.close_connection = True
                return
            status, content, usage, finish = fake.respond(body, self.client_address[:2])
            if status != 200:
                error = {"message": content or "scripted failure", "type": "server"}
                self._json(status, {"error": error})
                return
            if body.get("stream"):
                self._stream(body, content or "", usage)
                return
            self._json(
                200,
                {
                    "id": f"chatcmpl-{len(fake.requests)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "fake"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": content},
                            "finish_reason": finish,
                        }
                    ],
                    **({"usage": usage} if usage else {}),
                },
            )

    return Handler
