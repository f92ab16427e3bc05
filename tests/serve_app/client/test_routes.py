"""Every operation of the app's OpenAPI has a client method, and the table says which.

The app is built as the Ingress builds it (``create_app``); an operation outside
``routes.EXCLUDED`` (mem0's and MCP's protocols, the console's static files) that is
missing from ``routes.ROUTES`` fails here, naming it.
"""

from __future__ import annotations

from serve_app.api import create_app
from serve_app.client import AsyncMemserveClient, MemserveClient
from serve_app.client.routes import EXCLUDED, ROUTES, excluded
from serve_app.settings import Settings

HTTP_METHODS = {"get", "put", "post", "patch", "delete"}


def operations() -> set[tuple[str, str]]:
    paths = create_app(Settings()).openapi()["paths"]
    return {(m.upper(), p) for p, ops in paths.items() for m in ops if m in HTTP_METHODS}


def test_every_openapi_operation_has_a_client_method():
    ops = operations()
    missing = sorted(op for op in ops if not excluded(op[1]) and op not in ROUTES)
    assert missing == [], f"routes without a client method (serve_app/client/routes.py): {missing}"
    stale = sorted(set(ROUTES) - ops)
    assert stale == [], f"client routes the app no longer has: {stale}"
    assert any(excluded(p) for _, p in ops)  # mem0's routes are in the schema, left out


async def test_the_table_names_methods_of_both_clients():
    with MemserveClient("http://127.0.0.1:1") as m:
        async with AsyncMemserveClient("http://127.0.0.1:1") as am:
            for names in ROUTES.values():
                for name in names:
                    assert callable(getattr(m, name, None)), name
                    assert callable(getattr(am, name, None)), name


def test_every_exclusion_says_why():
    assert all(len(reason) > 20 for reason in EXCLUDED.values())
    assert excluded("/mem0/v1/ping/") and excluded("/mcp") and not excluded("/v1/memories")
