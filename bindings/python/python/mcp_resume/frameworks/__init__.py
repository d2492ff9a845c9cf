"""Framework modules that put agent frameworks on ``mcp_resume.bridge``, each importing its
framework only when used (install it with the module's extra; a missing one raises
``ModuleNotFoundError`` naming the extra):

- ``mcp_resume.frameworks.langchain`` (``mcp_resume[langchain]``): ``langchain-mcp-adapters``
  tools on a bridged session, and its ``MultiServerMCPClient`` with HTTP connections bridged;
- ``mcp_resume.frameworks.openai_agents`` (``mcp_resume[openai-agents]``): the OpenAI Agents
  SDK's streamable-HTTP server class;
- ``mcp_resume.frameworks.fastmcp`` (``mcp_resume[fastmcp]``): a FastMCP ``ClientTransport``;
- ``mcp_resume.frameworks.pydantic_ai`` (``mcp_resume[pydantic-ai]``): pydantic-ai's
  ``MCPToolset`` on that transport.

In each, a call that may have run (the bridge's ``outcome_unknown`` or ``context_mismatch``,
or an error its data marks ``mayHaveRun``, as a call timed out while the server ran it)
reaches the framework in a form its automatic retry does not retry, with a message saying
that it may have run; and ``tool_call_keys=True`` (where the framework has a tool call id)
derives the call's idempotency key from it.
"""
