//! Tests that run programs from outside this crate: the TypeScript SDK's servers and client
//! (Node.js), the MCP conformance suite, the Python and Node bindings' own suites, rmcp's
//! client, redis-server and nginx, and `cargo package`. They mostly wait on those processes,
//! so they share one test binary and overlap with one another.

#[path = "../../examples/demo/workload.rs"]
mod workload;

mod interop_support;

mod bindings;
mod conformance;
mod interop_ts;
mod interop_ts_modern;
mod interop_typed;
mod packaging;
mod real_parts;
mod restart;
mod rmcp_bridge;
mod ts_client_workload;
