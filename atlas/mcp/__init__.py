"""MCP client support: servers from the home's mcp.json, their tools as Atlas tools."""
