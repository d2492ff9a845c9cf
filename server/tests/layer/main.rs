//! The tower layer in front of a real rmcp 3.11 server, on 127.0.0.1: what a client sees on
//! the wire, and what really ran (the tools' own side-effect counts).

mod empty_ids;
mod held;
mod keyed_memory;
mod panics;
mod raw;
mod server;
mod skin;
#[cfg(feature = "redis")]
#[path = "../support/stall_proxy.rs"]
mod stall_proxy;
#[cfg(feature = "redis")]
mod stalled_store;
mod stores;
mod stream_logs;
mod trailers;
mod wire;
