//! The `otel` feature end to end: the spans, span events and metrics a client exports for
//! what happens to its calls on the mock cluster (read back from the SDK's in-memory
//! exporters), the trace context the cluster sees, and OTLP over HTTP to a receiver that
//! decodes the official protobuf definitions.

mod bridge;
mod faulty;
mod metrics;
mod otlp;
mod spans;
mod support;
#[path = "../../../examples/demo/workload.rs"]
mod workload;
