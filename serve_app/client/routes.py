"""Which client methods call each route of the service, and which routes it leaves out.

tests/serve_app/client/test_routes.py builds the app's OpenAPI and fails when an
operation is in neither table, so a new route cannot ship without its method.
"""

from __future__ import annotations

# (HTTP method, OpenAPI path) -> the client methods that send it
ROUTES: dict[tuple[str, str], tuple[str, ...]] = {
    ("GET", "/healthz"): ("health",),
    ("GET", "/readyz"): ("ready",),
    ("POST", "/v1/memories"): ("add",),
    ("GET", "/v1/memories"): ("list",),
    ("DELETE", "/v1/memories"): ("delete_scope",),
    ("POST", "/v1/memories/batch"): ("add_batch",),
    ("GET", "/v1/memories/{memory_id}"): ("get",),
    ("PATCH", "/v1/memories/{memory_id}"): ("update",),
    ("DELETE", "/v1/memories/{memory_id}"): ("delete",),
    ("GET", "/v1/memories/{memory_id}/history"): ("history",),
    ("POST", "/v1/search"): ("search",),
    ("POST", "/v1/context"): ("context",),
    ("GET", "/v1/context"): ("explain_context",),
    ("POST", "/v1/chat/completions"): ("chat", "chat_stream"),
    ("GET", "/v1/chat/usage"): ("chat_usage",),
    ("POST", "/v1/sessions/{session_id}/turns"): ("add_turns",),
    ("POST", "/v1/sessions/{session_id}/end"): ("end_session",),
    ("GET", "/v1/sessions/{session_id}"): ("session_status",),
    ("GET", "/v1/facts"): ("facts",),
    ("PUT", "/v1/facts"): ("set_fact",),
    ("DELETE", "/v1/facts"): ("delete_facts",),
    ("GET", "/v1/users"): ("users",),
    ("GET", "/v1/users/{user_id}/sessions"): ("user_sessions",),
    ("GET", "/v1/users/{user_id}/profile"): ("user_profile",),
    ("GET", "/v1/events"): ("events",),
    ("GET", "/v1/export"): ("export",),
    ("POST", "/v1/import"): ("import_", "import_all"),
    ("POST", "/v1/documents"): ("add_document", "upload_document"),
    ("GET", "/v1/documents"): ("documents",),
    ("GET", "/v1/documents/{document_id}"): ("document",),
    ("GET", "/v1/documents/jobs/{job_id}"): ("document_job",),
    ("DELETE", "/v1/documents/jobs/{job_id}"): ("cancel_document_job",),
    ("DELETE", "/v1/documents/{document_id}"): ("delete_document",),
    ("GET", "/v1/admin/keys"): ("list_keys",),
    ("POST", "/v1/admin/keys"): ("create_key",),
    ("GET", "/v1/admin/keys/{key_id}"): ("get_key",),
    ("DELETE", "/v1/admin/keys/{key_id}"): ("revoke_key",),
    ("DELETE", "/v1/admin/data"): ("erase_tenant",),
    ("GET", "/v1/admin/tenant/settings"): ("tenant_settings",),
    ("PUT", "/v1/admin/tenant/settings"): ("replace_tenant_settings",),
    ("PATCH", "/v1/admin/tenant/settings"): ("patch_tenant_settings",),
    ("GET", "/v1/admin/tenant/settings/history"): ("tenant_settings_history",),
    ("GET", "/v1/admin/usage"): ("llm_usage",),
    ("GET", "/v1/admin/models"): ("models",),
    ("DELETE", "/v1/admin/models/{slug}"): ("drop_model",),
    ("GET", "/v1/admin/extraction/dead-letters"): ("dead_letters",),
    ("POST", "/v1/admin/extraction/dead-letters/retry"): ("retry_dead_letters",),
    ("POST", "/v1/admin/consolidate"): ("consolidate",),
    ("POST", "/v1/admin/profile/classify"): ("classify_profile",),
    ("POST", "/v1/admin/webhooks"): ("create_webhook",),
    ("GET", "/v1/admin/webhooks"): ("webhooks",),
    ("GET", "/v1/admin/webhooks/{webhook_id}"): ("get_webhook",),
    ("PATCH", "/v1/admin/webhooks/{webhook_id}"): ("update_webhook",),
    ("DELETE", "/v1/admin/webhooks/{webhook_id}"): ("delete_webhook",),
    ("GET", "/v1/admin/webhooks/{webhook_id}/deliveries"): ("webhook_deliveries",),
    ("POST", "/v1/admin/webhooks/{webhook_id}/replay"): ("replay_webhook",),
}

# path prefix -> why the client has no methods for it
EXCLUDED: dict[str, str] = {
    "/mem0/": "mem0's platform API: use mem0's own client with host=<service>/mem0",
    "/mcp": "the Model Context Protocol: an MCP client speaks it (tools call this client)",
    "/console": "static files of the browser console, not an API",
    "/.well-known/": "OAuth discovery for MCP clients (RFC 9728), not an API of the client",
}


def excluded(path: str) -> bool:
    """Whether the client leaves ``path`` to another protocol (see ``EXCLUDED``)."""
    return any(path.startswith(prefix) for prefix in EXCLUDED)
