//! The guide: how to use the client and what it does for you, chapter by chapter. Every
//! example here is compiled as a doctest.
//!
//! - [`client`]: making calls, the surface, the examples;
//! - [`recovery`]: the recovery rules, row by row;
//! - [`eras`]: the legacy era (sessions) and the modern one (2026-07-28) on one core;
//! - [`authorization`]: OAuth 2.1, its flows and its trust boundaries;
//! - [`configuration`]: every setting and its default, the cargo features, the MSRV;
//! - [`telemetry`]: OpenTelemetry spans and metrics (feature `otel`), recovery made visible;
//! - [`bridge`]: keeping another SDK's client (rmcp, the Python `mcp` package, the TypeScript
//!   SDK) and getting these rules;
//! - [`bindings`]: Python and Node.js;
//! - [`compatibility`]: what 1.0 will keep;
//! - [the walkthrough](crate::proto::walkthrough): a cross-instance resume through the core.
//!
//! The evidence behind the claims (the demo's runs, performance, interoperability, the mock
//! cluster, the extension for server authors) is in the repository's `docs/` folder.

#[doc = include_str!("client.md")]
pub mod client {}

#[doc = include_str!("recovery.md")]
pub mod recovery {}

#[doc = include_str!("eras.md")]
pub mod eras {}

#[doc = include_str!("authorization.md")]
pub mod authorization {}

#[doc = include_str!("configuration.md")]
pub mod configuration {}

#[doc = include_str!("telemetry.md")]
pub mod telemetry {}

#[doc = include_str!("bridge.md")]
pub mod bridge {}

#[doc = include_str!("bindings.md")]
pub mod bindings {}

#[doc = include_str!("compatibility.md")]
pub mod compatibility {}
