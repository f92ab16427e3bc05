"""``BaseClient``: what the sync and async clients share besides the calls — the connection."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import httpx

from serve_app.client.api import Api
from serve_app.client.token_auth import TokenAuth, TokenProvider

H = TypeVar("H", httpx.Client, httpx.AsyncClient)
TT = TypeVar("TT", httpx.BaseTransport, httpx.AsyncBaseTransport)


class BaseClient(Api, Generic[H, TT]):
    """One httpx connection pool with the key's bearer header (or, with ``token_provider``,
    a token of the platform's identity provider, asked for each request); subclasses say
    which kind."""

    _http_class: Callable[..., H]

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        transport: TT | None = None,
        token_provider: TokenProvider | None = None,
    ) -> None:
        if api_key and token_provider is not None:
            raise ValueError("give an api_key or a token_provider, not both")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        options: dict[str, Any] = {"headers": headers, "timeout": timeout, "transport": transport}
        if token_provider is not None:
            options["auth"] = TokenAuth(token_provider)
        self._http: H = self._http_class(base_url=base_url, **options)
