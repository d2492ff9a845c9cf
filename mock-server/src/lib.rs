//! A mock round-robin MCP cluster with an oracle, for testing resume-aware clients.
//!
//! [`Cluster::start`] runs N MCP server instances (legacy Streamable HTTP, protocol
//! versions 2025-03-26 to 2025-11-25; or, with [`ClusterEra`], the stateless 2026-07-28
//! revision, or both) behind a load balancer on one public port. The
//! balancer round-robins (or pins sessions) and cuts SSE streams the way real balancers do;
//! instances can be killed and restarted. A [`Preset`] decides what the instances share and
//! how they treat a resume; the resume-safety extension can be switched off to get a
//! stock-like server. The [`Oracle`](OracleReport) records what really happened — calls
//! executed under the wrong capabilities, against unknown records, or twice — so tests
//! assert on truth rather than on what a client believed.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use mock_server::{Cluster, ClusterConfig, Preset};
//! let cluster = Cluster::start(ClusterConfig {
//!     preset: Preset::Strict,
//!     instances: 3,
//!     cut_after_events: Some(2),
//!     ..Default::default()
//! })
//! .await?;
//! println!("MCP endpoint: {}", cluster.url());
//! // ... drive a client against cluster.url() ...
//! let report = cluster.oracle();
//! assert_eq!(report.totals.wrong_capability, 0);
//! cluster.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! The shared store is in memory by default; [`RedisStore`] puts it in Redis. A
//! [`StandaloneInstance`] runs one instance without the balancer, so that instance processes
//! can share a Redis behind nginx ([`nginx`] writes its configuration, [`procs`] runs the
//! whole thing as child processes for tests); they report to the oracle through the store's
//! journal ([`OracleReport::from_journal`]).
//!
//! See `README.md` in this crate for the wire behaviour of each preset, the status codes and
//! the oracle's JSON shape.

#![warn(missing_docs)]

mod balancer;
mod cluster;
mod config;
pub mod context;
mod instance;
pub mod nginx;
mod oracle;
#[cfg(unix)]
pub mod procs;
mod rng;
mod sse;
mod standalone;
pub mod store;
mod tools;

pub use cluster::Cluster;
pub use config::{ClusterConfig, ClusterEra, CutStyle, Faults, Preset, UnknownEra, UnknownPreset};
pub use oracle::{
    ExecutionRecord, OracleReport, OracleTotals, ResumeRecord, TraceRecord,
    DEFAULT_ORACLE_RECORD_LIMIT,
};
pub use standalone::StandaloneInstance;
pub use store::{MemoryStore, RedisOptions, RedisStore, Store};
