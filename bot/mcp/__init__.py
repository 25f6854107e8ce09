"""Cellmate as an MCP server: a coding agent runs code in a conversation's kernel (the bot's
streamable HTTP endpoint, and `cellmate mcp`, a stdio bridge to it), authorised by a token a
person asks for in that conversation (`/mcp token`)."""
