"""MCP server: memserve's memory calls as tools for agents (``/mcp`` and a stdio entry point)."""

from serve_app.mcp.http import PATH, mount_mcp

__all__ = ["PATH", "mount_mcp"]
