"""OpenTelemetry from Python: the client's spans and metrics reach an OTLP/HTTP collector
(exported by the Rust side), each call a child of the Python caller's current span."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from conftest import Cluster
from mcp_resume import Client

# The caller's span, as the application's own tracing would have it current.
PARENT = SpanContext(
    trace_id=0x0AF7651916CD43DD8448EB211C80319C,
    span_id=0xB7AD6B7169203331,
    is_remote=False,
    trace_flags=TraceFlags(TraceFlags.SAMPLED),
)


class Collector:
    """An OTLP/HTTP collector on 127.0.0.1 that keeps every request body by path."""

    def __init__(self) -> None:
        self.bodies: dict[str, list[bytes]] = {}
        received = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                received.setdefault(self.path, []).append(self.rfile.read(length))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def received(self, path: str) -> bytes:
        return b"".join(self.bodies.get(path, []))


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.server.shutdown()


async def test_spans_and_metrics_reach_otlp_under_the_callers_span(
    cluster: Callable[..., Cluster], collector: Collector
) -> None:
    c = cluster("replicated", "--idle-timeout-ms", "0")
    client = Client(c.url, open_listen_stream=False, otlp_endpoint=collector.url)
    with trace.use_span(NonRecordingSpan(PARENT)):
        result = await client.call_tool("echo", {"text": "traced"})
    assert result.text == "traced"
    # Closing flushes what the exporters hold.
    await client.close()

    spans = collector.received("/v1/traces")
    assert b"tools/call echo" in spans and b"mcp.method.name" in spans
    # The call's span is in the caller's trace, and the caller's span is its parent (the
    # protobuf carries both ids as raw bytes).
    assert PARENT.trace_id.to_bytes(16, "big") in spans
    assert PARENT.span_id.to_bytes(8, "big") in spans
    metrics = collector.received("/v1/metrics")
    assert b"mcp.client.operation.duration" in metrics


async def test_without_an_endpoint_nothing_is_exported_or_propagated(
    cluster: Callable[..., Cluster], collector: Collector
) -> None:
    c = cluster("replicated", "--idle-timeout-ms", "0")
    async with Client(c.url, open_listen_stream=False) as client:
        with trace.use_span(NonRecordingSpan(PARENT)):
            await client.call_tool("echo", {"text": "untraced"})
    assert collector.bodies == {}
    assert c.oracle().get("traces", []) == [], "no trace context on the wire"
