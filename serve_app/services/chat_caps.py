"""What a caller may spend of the operator's upstream LLM key through the chat proxy.

The proxy forwards with the operator's key, so the request decides the bill:
the model must be on the allow-list (``MEMSERVE_CHAT_MODELS``, by default only
``MEMSERVE_LLM_MODEL``), and ``n``, ``max_tokens`` / ``max_completion_tokens``
and the number of tools are capped. Anything over is a 422 that names the cap.
"""

from __future__ import annotations

from typing import Any

from serve_app.context.tokens import count_tokens
from serve_app.errors import ApiError
from serve_app.settings import ChatSettings

TOKEN_FIELDS = ("max_tokens", "max_completion_tokens")


def allowed_models(caps: ChatSettings, default_model: str) -> frozenset[str]:
    listed = [m.strip() for m in caps.models.split(",") if m.strip()]
    return frozenset(listed or [default_model])


def _refuse(message: str) -> ApiError:
    return ApiError(422, "invalid_request", message)


def _count(payload: dict[str, Any], name: str, cap: int, what: str) -> None:
    value = payload.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _refuse(f"{name} must be a positive integer")
    if value > cap:
        raise _refuse(f"{name} {value} is over this proxy's cap of {cap} {what}")


def check_caps(payload: dict[str, Any], caps: ChatSettings, models: frozenset[str]) -> None:
    """Raise a 422 when the OpenAI ``payload`` asks for more than the caps allow."""
    model = payload.get("model")
    if model is not None and model not in models:
        raise _refuse(f"model {model!r} is not allowed here; allowed: {', '.join(sorted(models))}")
    _count(payload, "n", caps.max_n, "choices")
    for name in TOKEN_FIELDS:
        _count(payload, name, caps.max_tokens, "tokens")
    for name in ("tools", "functions"):
        tools = payload.get(name)
        if tools is None:
            continue
        if not isinstance(tools, list):
            raise _refuse(f"{name} must be a list")
        if len(tools) > caps.max_tools:
            raise _refuse(f"{len(tools)} {name} is over this proxy's cap of {caps.max_tools}")


def reported_usage(answer: Any) -> tuple[int, int]:
    """(prompt, completion) tokens an upstream answer or final chunk reports; 0 if none."""
    usage = answer.get("usage") if isinstance(answer, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (
        prompt if isinstance(prompt, int) and prompt > 0 else 0,
        completion if isinstance(completion, int) and completion > 0 else 0,
    )


def reports_usage(answer: Any) -> bool:
    """Whether an upstream answer or chunk carries a ``usage`` object at all."""
    return isinstance(answer, dict) and isinstance(answer.get("usage"), dict)


def estimated_usage(messages: list[dict[str, Any]], answer: str) -> tuple[int, int]:
    """(prompt, completion) tokens estimated from the text, for a call whose upstream
    reported none (a stream cut before its last chunk, or sent without usage): every
    forwarded call is billed upstream, so it is counted here too."""
    prompt = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        prompt += count_tokens(content if isinstance(content, str) else "")
    return prompt, count_tokens(answer)
