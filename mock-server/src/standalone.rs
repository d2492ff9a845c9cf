//! One instance on its own, without the built-in balancer: what `mock-cluster
//! --instance-only` runs, so that a real balancer (nginx) can front several instance
//! processes that share a networked store, and killing an instance is killing a process.
//!
//! Beside `/mcp` the instance answers a few admin routes of its own (a balancer in front
//! should forward only `/mcp`):
//! - `GET /admin/status`: index, preset, address, executions in flight here;
//! - `GET /admin/idle?timeout_ms=N`: waits up to N ms until no execution runs here, then
//!   answers `{"idle": bool}`;
//! - `GET /admin/oracle`: the oracle's report replayed from the shared store's journal, so
//!   every instance answers for the whole cluster;
//! - `POST /admin/reset`: resets that report (a journal entry), 204.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tokio::net::TcpListener;

use crate::config::{ClusterConfig, Preset};
use crate::instance::{self, InstanceEnv, RunningInstance, Settings};
use crate::oracle::{Oracle, OracleReport};
use crate::rng::SplitMix;
use crate::store::{MemoryStore, Store};

/// A running stand-alone instance. [`StandaloneInstance::shutdown`] stops it and tells the
/// store (its running calls become lost, as when an instance of the cluster is killed).
pub struct StandaloneInstance {
    running: Option<RunningInstance>,
    index: usize,
    preset: Preset,
}

impl std::fmt::Debug for StandaloneInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StandaloneInstance")
            .field("index", &self.index)
            .field("preset", &self.preset)
            .field("addr", &self.running.as_ref().map(|r| r.addr))
            .finish()
    }
}

#[derive(Clone)]
struct Admin {
    index: usize,
    preset: Preset,
    addr: SocketAddr,
    oracle: Oracle,
    store: Arc<dyn Store>,
    record_limit: usize,
}

impl StandaloneInstance {
    /// Starts instance number `index` on `config.listen`, sharing `config.store` (a fresh
    /// in-memory store when None: then it shares nothing with anyone). Uses the preset, the
    /// extension switch, `retry_ms`, `json_response`, `max_body_bytes`, `allowed_origins`,
    /// `log_loss`, `oracle_record_limit` and `expected_client_capabilities`; the balancer's
    /// settings (instances, affinity, cuts, idle timeout) belong to whatever balancer fronts
    /// it. Every report to the oracle goes to the store's journal before the instance acts on
    /// it.
    ///
    /// `index` must be unique among the instances sharing a store: it names the owner of
    /// streams and the holder of running requests.
    pub async fn start(config: ClusterConfig, index: usize) -> io::Result<StandaloneInstance> {
        let store: Arc<dyn Store> = match &config.store {
            Some(s) => s.clone(),
            None => Arc::new(MemoryStore::new()),
        };
        let settings = Arc::new(Settings {
            era: config.era,
            placement: config.preset.placement(),
            extension: config.extension,
            retry_ms: config.retry_ms,
            json_response: config.json_response,
            max_body_bytes: config.max_body_bytes,
            allowed_origins: config.allowed_origins.clone(),
            check_host: config.listen.ip().is_loopback(),
        });
        let oracle = Oracle::with_journal(index + 1, config.oracle_record_limit, store.clone())
            .expecting(config.expected_client_capabilities.clone());
        let env = Arc::new(InstanceEnv {
            index,
            settings,
            shared: store.clone(),
            oracle: oracle.clone(),
            faults: Arc::new(RwLock::new(config.faults())),
            log_rng: Arc::new(Mutex::new(
                config.log_loss.map(|(seed, _)| SplitMix::new(seed)),
            )),
            crash: None,
        });
        let listener = TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        let admin = Admin {
            index,
            preset: config.preset,
            addr,
            oracle,
            store,
            record_limit: config.oracle_record_limit,
        };
        let routes = Router::new()
            .route("/admin/status", get(status))
            .route("/admin/idle", get(idle))
            .route("/admin/oracle", get(oracle_report))
            .route("/admin/reset", post(reset))
            .with_state(admin);
        let running = instance::serve(env, listener, Some(routes))?;
        Ok(StandaloneInstance {
            running: Some(running),
            index,
            preset: config.preset,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.running
            .as_ref()
            .map(|r| r.addr)
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// Its MCP endpoint, `http://ADDR/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr())
    }

    /// Its index among the instances sharing the store.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Stops accepting, drops every connection and running call, and releases what it held
    /// in the store (running requests and idempotency keys become lost).
    pub async fn shutdown(mut self) {
        if let Some(r) = self.running.take() {
            r.kill().await;
        }
    }
}

impl Drop for StandaloneInstance {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            r.abort();
        }
    }
}

async fn status(State(a): State<Admin>) -> Response {
    Json(json!({
        "index": a.index,
        "preset": a.preset.as_str(),
        "addr": a.addr.to_string(),
        "running": a.oracle.running(),
    }))
    .into_response()
}

async fn idle(State(a): State<Admin>, Query(q): Query<HashMap<String, String>>) -> Response {
    let ms = q
        .get("timeout_ms")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        .min(60_000);
    let idle = a.oracle.wait_idle(Duration::from_millis(ms)).await;
    Json(json!({ "idle": idle })).into_response()
}

async fn oracle_report(State(a): State<Admin>) -> Response {
    let entries = match a.store.journal_entries().await {
        Ok(e) => e,
        Err(e) => return (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
    };
    match OracleReport::from_journal(&entries, a.record_limit) {
        Ok(r) => Json(r).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn reset(State(a): State<Admin>) -> Response {
    match a
        .store
        .journal_append(&OracleReport::journal_reset_entry())
        .await
    {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
    }
}
