"""Browse what a server offers besides tools: resources (page by page), resource templates,
prompts, argument completion, and its log messages.

    python examples/resources.py http://127.0.0.1:8080/mcp
"""

from __future__ import annotations

import asyncio
import sys

from mcp_resume import Client, LoggingLevel, PromptReference


async def main(url: str) -> None:
    async with Client(url) as client:
        info = await client.connect()
        offered = info.capabilities
        if "resources" in offered:
            cursor: str | None = None
            while True:  # `list_resources()` follows the cursors itself; this is by hand
                page = await client.list_resources_page(cursor)
                for resource in page.items:
                    print(f"resource {resource.uri} ({resource.mime_type or '?'})")
                cursor = page.next_cursor
                if cursor is None:
                    break
            for template in await client.list_resource_templates():
                print(f"template {template.uri_template}")
            resources = await client.list_resources()
            if resources:
                read = await client.read_resource(resources[0].uri)
                print(read.text[:200])
        if "prompts" in offered:
            for prompt in await client.list_prompts():
                print(f"prompt {prompt.name}: {[a.name for a in prompt.arguments]}")
                if prompt.arguments and "completions" in offered:
                    first = prompt.arguments[0].name
                    completion = await client.complete(PromptReference(prompt.name), first, "")
                    print(f"  {first} may be {completion.values[:5]}")
        if "logging" in offered:
            await client.set_logging_level(LoggingLevel.WARNING)
        print("done")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080/mcp"))
