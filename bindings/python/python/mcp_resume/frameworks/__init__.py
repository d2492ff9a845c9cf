"""Thin adapters that put agent frameworks on ``mcp_resume.bridge``, each importing its
framework only when used (install the framework yourself):

- ``mcp_resume.frameworks.langchain``: ``langchain-mcp-adapters`` tools on a bridged
  ``ClientSession``;
- ``mcp_resume.frameworks.openai_agents``: an OpenAI Agents SDK MCP server class;
- ``mcp_resume.frameworks.fastmcp``: a FastMCP ``ClientTransport`` (and through a
  ``fastmcp.Client``, pydantic-ai's ``MCPToolset``).
"""
