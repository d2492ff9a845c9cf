//! The tokio driver over real HTTP on 127.0.0.1: the public API against scripted servers and
//! the in-process mock cluster, faults, OAuth, the bridge, the seed incident's scenarios, the
//! demo's outcomes and the chaos soak. One test binary, so that the client's futures, the
//! test servers and the mock cluster are compiled and linked once.

// The demo's clients and workload, at the crate root where the demo's modules expect one
// another.
#[path = "../../examples/demo/modern.rs"]
mod demo_modern;
#[path = "../../examples/demo/reissue_client.rs"]
mod reissue_client;
#[path = "../../examples/demo/rmcp_client.rs"]
mod rmcp_client;
#[path = "../../examples/demo/workload.rs"]
mod workload;

mod support;

mod bridge;
mod chaos_soak;
mod demo_outcomes;
mod driver_api;
mod driver_cluster;
mod driver_faults;
mod last_drop;
mod ledger;
mod listen_stopped;
mod modern;
mod modern_mrtr_stream_end;
mod never_a_hang;
mod oauth_extensions;
mod oauth_flows;
mod oauth_trust;
mod probe_session;
mod seed_scenarios;
mod typed_cluster;
mod typed_driver;
