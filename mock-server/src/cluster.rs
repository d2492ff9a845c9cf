//! The cluster: instances, balancer, shared store and oracle, started and controlled as one.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use crate::balancer::{self, BalancerHandle};
use crate::config::{ClusterConfig, ClusterEra, Faults, Preset};
use crate::context;
use crate::instance::{self, CrashPoints, InstanceEnv, RunningInstance, Settings};
use crate::oracle::{Oracle, OracleReport};
use crate::rng::SplitMix;
use crate::store::{MemoryStore, Store};

/// State shared by the balancer and the [`Cluster`] handle.
pub(crate) struct Inner {
    pub preset: Preset,
    pub era: ClusterEra,
    pub affinity: bool,
    pub settings: Arc<Settings>,
    pub oracle: Oracle,
    pub shared: Arc<dyn Store>,
    pub faults: Arc<RwLock<Faults>>,
    pub cut_rng: Arc<Mutex<Option<SplitMix>>>,
    log_rng: Arc<Mutex<Option<SplitMix>>>,
    backends: RwLock<Vec<Option<SocketAddr>>>,
    envs: Vec<Arc<InstanceEnv>>,
    crash: Arc<CrashPoints>,
    instances: tokio::sync::Mutex<Vec<Option<RunningInstance>>>,
}

impl Inner {
    pub(crate) fn backends(&self) -> Vec<Option<SocketAddr>> {
        self.backends
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set_backend(&self, i: usize, addr: Option<SocketAddr>) {
        let mut b = self.backends.write().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = b.get_mut(i) {
            *slot = addr;
        }
    }

    pub(crate) fn current_faults(&self) -> Faults {
        self.faults
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set_faults(&self, faults: Faults) {
        *self.cut_rng.lock().unwrap_or_else(|p| p.into_inner()) =
            faults.random_cut.map(|(seed, _)| SplitMix::new(seed));
        *self.log_rng.lock().unwrap_or_else(|p| p.into_inner()) =
            faults.log_loss.map(|(seed, _)| SplitMix::new(seed));
        *self.faults.write().unwrap_or_else(|p| p.into_inner()) = faults;
    }

    /// Kills instance `i`; false if there is no such instance or it is already down.
    pub(crate) async fn kill(&self, i: usize) -> bool {
        let mut instances = self.instances.lock().await;
        let Some(slot) = instances.get_mut(i) else {
            return false;
        };
        let Some(running) = slot.take() else {
            return false;
        };
        // The balancer stops routing to it first, as a health check would notice.
        self.set_backend(i, None);
        running.kill().await;
        true
    }

    /// Restarts instance `i` empty; an error if there is no such instance or it is up.
    pub(crate) async fn restart(&self, i: usize) -> io::Result<()> {
        let mut instances = self.instances.lock().await;
        let Some(slot) = instances.get_mut(i) else {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no such instance"));
        };
        if slot.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "instance is up",
            ));
        }
        let running = instance::start(self.envs[i].clone()).await?;
        self.set_backend(i, Some(running.addr));
        *slot = Some(running);
        Ok(())
    }
}

/// Kills and restarts the instances whose armed crash point a call reached. It holds the
/// cluster weakly: it ends with the cluster (the last sender goes with the instances' envs).
async fn crash_and_restart(
    inner: Weak<Inner>,
    mut requests: tokio::sync::mpsc::UnboundedReceiver<usize>,
) {
    while let Some(i) = requests.recv().await {
        let Some(inner) = inner.upgrade() else { return };
        if inner.kill(i).await {
            let _ = inner.restart(i).await;
        }
    }
}

/// A running mock cluster. [`Cluster::shutdown`] stops it; dropping it stops it too (its
/// ports close and its tasks are aborted), without waiting.
pub struct Cluster {
    inner: Arc<Inner>,
    balancer: Option<BalancerHandle>,
    addr: SocketAddr,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("url", &self.url())
            .field("preset", &self.inner.preset)
            .field("backends", &self.inner.backends())
            .finish()
    }
}

impl Cluster {
    /// Starts the instances and the balancer. Fails if `instances` is 0 or a port cannot be
    /// bound.
    pub async fn start(config: ClusterConfig) -> io::Result<Cluster> {
        if config.instances == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a cluster needs at least one instance",
            ));
        }
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
        let shared: Arc<dyn Store> = match &config.store {
            Some(s) => s.clone(),
            None => Arc::new(MemoryStore::new()),
        };
        let oracle = Oracle::new(config.instances, config.oracle_record_limit)
            .expecting(config.expected_client_capabilities.clone());
        let faults = Arc::new(RwLock::new(config.faults()));
        let log_rng = Arc::new(Mutex::new(None));
        let (crash_tx, crash_rx) = tokio::sync::mpsc::unbounded_channel();
        let crash = Arc::new(CrashPoints::new(crash_tx));
        let envs: Vec<Arc<InstanceEnv>> = (0..config.instances)
            .map(|index| {
                Arc::new(InstanceEnv {
                    index,
                    settings: settings.clone(),
                    shared: shared.clone(),
                    oracle: oracle.clone(),
                    faults: faults.clone(),
                    log_rng: log_rng.clone(),
                    crash: Some(crash.clone()),
                })
            })
            .collect();
        let inner = Arc::new(Inner {
            preset: config.preset,
            era: config.era,
            affinity: config.uses_affinity(),
            settings,
            oracle,
            shared,
            faults,
            cut_rng: Arc::new(Mutex::new(None)),
            log_rng,
            backends: RwLock::new(vec![None; config.instances]),
            envs,
            crash,
            instances: tokio::sync::Mutex::new((0..config.instances).map(|_| None).collect()),
        });
        inner.set_faults(config.faults());
        for i in 0..config.instances {
            inner.restart(i).await?;
        }
        tokio::spawn(crash_and_restart(Arc::downgrade(&inner), crash_rx));
        let balancer = balancer::start(inner.clone(), config.listen).await?;
        let addr = balancer.addr;
        Ok(Cluster {
            inner,
            balancer: Some(balancer),
            addr,
        })
    }

    /// The public MCP endpoint, e.g. `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// The balancer's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Base URL of the admin routes (`…/admin`): `GET oracle`, `POST reset`, `GET status`,
    /// `POST instances/{i}/kill`, `POST instances/{i}/restart`.
    pub fn admin_url(&self) -> String {
        format!("http://{}/admin", self.addr)
    }

    /// The MCP endpoint of instance `i` itself, bypassing the balancer (None while it is
    /// down). Its port changes on restart.
    pub fn instance_url(&self, i: usize) -> Option<String> {
        self.inner
            .backends()
            .get(i)
            .copied()
            .flatten()
            .map(|a| format!("http://{a}/mcp"))
    }

    /// Number of instances (up or down).
    pub fn instances(&self) -> usize {
        self.inner.envs.len()
    }

    /// Whether instance `i` is up.
    pub fn is_up(&self, i: usize) -> bool {
        self.inner.backends().get(i).copied().flatten().is_some()
    }

    /// The preset the cluster runs.
    pub fn preset(&self) -> Preset {
        self.inner.preset
    }

    /// The protocol era the instances speak.
    pub fn era(&self) -> ClusterEra {
        self.inner.era
    }

    /// Arms a one-shot crash: whichever instance runs the call tagged `tag` (the caller tag in
    /// `params._meta`) dies right after the call's `after_steps`-th step of `slow`,
    /// `counter_increment` or `batch_job` (its progress event sent, and for
    /// `counter_increment` its side effect applied), as [`Cluster::kill_instance`] kills, and
    /// is restarted empty at once. The call goes no further than that step. The instance
    /// index the call ran on is in the oracle's record of it.
    pub fn crash_mid_call(&self, tag: &str, after_steps: u64) {
        self.inner.crash.arm(tag, after_steps);
    }

    /// Whether the balancer pins sessions to instances.
    pub fn affinity(&self) -> bool {
        self.inner.affinity
    }

    /// What really happened since the last reset.
    pub fn oracle(&self) -> OracleReport {
        self.inner.oracle.report()
    }

    /// Clears the oracle's counters and records (it keeps knowing the live sessions).
    pub fn reset_oracle(&self) {
        self.inner.oracle.reset();
    }

    /// Waits until no tool execution is in flight on any instance, nor any request that may
    /// still start one (from the balancer's acceptance of a POST to the end of the work it
    /// started); false after `timeout`. Tests use it to know that a call cut off from its
    /// client has run to completion, and that no late re-send of it is still on its way to
    /// an execution.
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        self.inner.oracle.wait_idle(timeout).await
    }

    /// Kills instance `i`: the balancer stops routing to it, its connections drop, its
    /// running calls stop, its local state is gone. False if it was already down.
    pub async fn kill_instance(&self, i: usize) -> bool {
        self.inner.kill(i).await
    }

    /// Starts instance `i` again, empty.
    pub async fn restart_instance(&self, i: usize) -> io::Result<()> {
        self.inner.restart(i).await
    }

    /// Replaces the stream faults; applies to streams opened from now on (random
    /// generators are reseeded).
    pub fn set_faults(&self, faults: Faults) {
        self.inner.set_faults(faults);
    }

    /// The stream faults in force.
    pub fn faults(&self) -> Faults {
        self.inner.current_faults()
    }

    /// The shared store.
    pub fn store(&self) -> Arc<dyn Store> {
        self.inner.shared.clone()
    }

    /// Changes a session's negotiated context in the shared store, as a configuration
    /// rollout would: its capability hash changes from now on (streams opened before keep
    /// the old one, so a `strict` resume of them fails with `capability_mismatch`). Only
    /// meaningful where session records are shared (not `naive`). The oracle keeps the
    /// negotiated context as the truth, so calls executed after the drift count as wrong
    /// capability. Returns the new hash, or None if the shared store does not know
    /// the session.
    pub async fn drift_session(&self, session_id: &str) -> Option<String> {
        let mut rec = self.inner.shared.get_session(session_id).await.ok()??;
        let drift = rec
            .client_capabilities
            .pointer("/experimental/drift")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
            + 1;
        if !rec.client_capabilities.is_object() {
            rec.client_capabilities = serde_json::json!({});
        }
        if !rec.client_capabilities["experimental"].is_object() {
            rec.client_capabilities["experimental"] = serde_json::json!({});
        }
        rec.client_capabilities["experimental"]["drift"] = serde_json::json!(drift);
        rec.capability_hash = context::capability_hash(
            &rec.protocol_version,
            &rec.client_capabilities,
            &rec.server_capabilities,
        );
        let hash = rec.capability_hash.clone();
        self.inner.shared.put_session(rec).await.ok()?;
        Some(hash)
    }

    /// Stops the balancer and every instance.
    pub async fn shutdown(mut self) {
        if let Some(b) = self.balancer.take() {
            b.stop().await;
        }
        for i in 0..self.inner.envs.len() {
            self.inner.kill(i).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(b) = self.balancer.take() {
            b.abort();
        }
        if let Ok(mut instances) = self.inner.instances.try_lock() {
            for running in instances.iter_mut().filter_map(Option::take) {
                running.abort();
            }
        }
    }
}
