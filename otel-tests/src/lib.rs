//! Nothing but tests: mcp-resume's OpenTelemetry spans, metrics and OTLP export, against the
//! mock cluster (`tests/otel/`).
