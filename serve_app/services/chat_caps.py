"""What a caller may spend of the operator's upstream LLM key through the chat proxy.

The proxy forwards with the operator's key, so the request decides the bill:
the model must be on the allow-list (``MEMSERVE_CHAT_MODELS``, by default only
``MEMSERVE_LLM_MODEL``), and ``n``, ``max_tokens`` / ``max_completion_tokens``
and the number of tools are capped. Anything over is a 422 that names the cap.
"""

from __future__ import annotations

from typing import Any

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
