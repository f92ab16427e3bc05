"""Use cases: what the routes, the MCP tools and the worker call; they know no HTTP."""
