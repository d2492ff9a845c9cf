// The span active in JavaScript, for the client's telemetry (`otlpEndpoint`): read through
// `@opentelemetry/api` when the application has it installed, as the W3C `traceparent` of the
// active span. The Rust side makes each call's span its child, and exports the spans over
// OTLP itself (see src/telemetry.rs for why).
import { createRequire } from "node:module";

let api;
try {
  api = createRequire(import.meta.url)("@opentelemetry/api");
} catch {
  api = undefined;
}

/** `() => traceparent | undefined`; undefined when `@opentelemetry/api` is not installed. */
export function callerContext() {
  if (!api) return undefined;
  return () => {
    const span = api.trace.getSpanContext(api.context.active());
    if (!span || !api.isSpanContextValid(span)) return undefined;
    const sampled = (span.traceFlags & api.TraceFlags.SAMPLED) === api.TraceFlags.SAMPLED;
    return `00-${span.traceId}-${span.spanId}-${sampled ? "01" : "00"}`;
  };
}
