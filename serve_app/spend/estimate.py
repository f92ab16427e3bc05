"""What an LLM call uses, as an upstream bills it: the usage an answer reports, or an
estimate from every part of the request when it reports none.

One estimate for every caller (the chat proxy, extraction, summaries, consolidation), so
what is reserved before a call and what is recorded after it count the same things: the
messages' text, images and audio at a fixed cost, names, tool calls and reasoning, the
tool and function definitions and a response schema (a strict ``json_schema`` is read
by the model like any prompt).
"""

from __future__ import annotations

import json
from typing import Any

from serve_app.text import count_tokens


def reported_usage(answer: Any) -> tuple[int, int, int]:
    """(prompt, completion, cached prompt) tokens an upstream answer or final chunk
    reports; 0 where it reports none."""
    usage = answer.get("usage") if isinstance(answer, dict) else None
    if not isinstance(usage, dict):
        return 0, 0, 0

    def n(value: Any) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    details = usage.get("prompt_tokens_details")
    cached = n(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return n(usage.get("prompt_tokens")), n(usage.get("completion_tokens")), cached


def reports_usage(answer: Any) -> bool:
    """Whether an upstream answer or chunk carries a ``usage`` object at all."""
    return isinstance(answer, dict) and isinstance(answer.get("usage"), dict)


def usage_of(answer: Any) -> tuple[int, int, int] | None:
    """(prompt, completion, cached prompt) tokens an answer reports; None without ``usage``."""
    return reported_usage(answer) if reports_usage(answer) else None


# What a provider bills for a part that is not text: an image at high detail (a 1024 px
# square: 85 + 4 tiles x 170) and a short audio clip; the estimate errs high, not low.
IMAGE_TOKENS = 765
AUDIO_TOKENS = 1000
_MESSAGE_OVERHEAD = 4  # the chat template's tokens around each message
# Request fields the upstream reads besides the messages (tool and function definitions,
# a JSON schema to follow): counted as their JSON.
_READ_FIELDS = ("tools", "functions", "tool_choice", "response_format", "prediction")
_MESSAGE_TEXT = ("name", "tool_call_id", "reasoning_content", "reasoning", "refusal")


def _json_tokens(value: Any) -> int:
    return count_tokens(json.dumps(value, ensure_ascii=False, default=str))


def _content_tokens(content: Any) -> int:
    if isinstance(content, str):
        return count_tokens(content)
    if not isinstance(content, list):
        return 0 if content is None else _json_tokens(content)
    total = 0
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("text", "input_text"):
            total += count_tokens(str(part.get("text", "")))
        elif kind in ("image_url", "input_image", "image"):
            total += IMAGE_TOKENS
        elif kind in ("input_audio", "audio"):
            total += AUDIO_TOKENS
        else:
            total += _json_tokens(part)  # files and parts of kinds to come: their JSON
    return total


def request_tokens(payload: dict[str, Any]) -> int:
    """The prompt tokens an upstream reads for ``payload``, estimated: every message's
    text, images and audio at a fixed cost, names, tool calls with their arguments and
    reasoning, plus the tool and function definitions and a response schema. Linear in
    the request's size."""
    total = 0
    for message in payload.get("messages") or ():
        if not isinstance(message, dict):
            continue
        total += _MESSAGE_OVERHEAD + _content_tokens(message.get("content"))
        total += sum(count_tokens(v) for k in _MESSAGE_TEXT if isinstance(v := message.get(k), str))
        for key in ("tool_calls", "function_call", "audio"):
            if message.get(key):
                total += _json_tokens(message[key])
    return total + sum(_json_tokens(payload[k]) for k in _READ_FIELDS if payload.get(k))


def estimated_usage(payload: dict[str, Any], answer: str) -> tuple[int, int]:
    """(prompt, completion) tokens estimated for a call whose upstream reported none (a
    stream cut before its last chunk, or an upstream that ignores ``include_usage``):
    every forwarded call is billed upstream, so it is counted here too, from every part
    of the request (:func:`request_tokens`) and of the answer (text, tool-call arguments,
    reasoning: what ``answer`` collected)."""
    return request_tokens(payload), count_tokens(answer)
