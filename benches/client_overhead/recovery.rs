//! Recovery latency through the mock cluster: the balancer cuts a `slow` call's SSE stream
//! after its second event (priming, then the step's notification); the response is already in
//! the shared log, so the time from the cut to the answer is the client's reconnect delay plus
//! one resumed GET.
//!
//! The cluster does not report when it cuts. A TCP forwarder between the client and the
//! balancer does: it stamps the moment the balancer's side of a connection ends while the
//! client's side is still open (a server-side close; connections the client closes itself are
//! not stamped). The client sees that end a few microseconds later. The forwarder's hop is on
//! every round trip, the measured one included, so the budget is checked against the round
//! trip through the same path.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcp_resume::ReconnectPolicy;
use mock_server::{Cluster, ClusterConfig, Preset};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::clients::{plain_http, Client, Floor, Kind};
use crate::meter::median;

pub(crate) struct Recovery {
    /// Cut → answer delivered to the caller, per call, in ms.
    pub samples: Vec<f64>,
    /// Calls whose stream was not cut (should be none).
    pub uncut: usize,
    /// One `ping` round trip through the forwarder and the balancer, median, in ms.
    pub rtt_ms: f64,
    /// `SessionEvent::Resumed` seen (mcp-resume only).
    pub resumed: Option<u64>,
    /// `SessionEvent::Reinitialized` seen (mcp-resume only).
    pub reinitialized: Option<u64>,
    /// Resumes the cluster served, and tool executions it ran (the oracle's count: one per
    /// call means nothing was re-sent).
    pub server_resumes: u64,
    pub executions: u64,
}

impl Recovery {
    pub(crate) fn p50(&self) -> f64 {
        median(&self.samples)
    }

    pub(crate) fn percentile(&self, p: f64) -> f64 {
        let mut v = self.samples.clone();
        if v.is_empty() {
            return f64::NAN;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let i = ((v.len() - 1) as f64 * p).round() as usize;
        v[i]
    }
}

/// The first server-side close stamped since the last `take`.
#[derive(Clone, Default)]
struct CutClock(Arc<Mutex<Option<Instant>>>);

impl CutClock {
    fn stamp(&self, at: Instant) {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        slot.get_or_insert(at);
    }

    fn take(&self) -> Option<Instant> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

async fn forwarder(upstream: SocketAddr, clock: CutClock) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let clock = clock.clone();
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let client_ended = Arc::new(AtomicBool::new(false));
                let ended = client_ended.clone();
                let up = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut cr, &mut sw).await;
                    ended.store(true, Ordering::SeqCst);
                    let _ = sw.shutdown().await;
                });
                let _ = tokio::io::copy(&mut sr, &mut cw).await;
                if !client_ended.load(Ordering::SeqCst) {
                    clock.stamp(Instant::now());
                }
                drop(cw);
                up.abort();
            });
        }
    });
    addr
}

/// `policy` applies to mcp-resume only (`None`: the default one).
pub(crate) async fn measure(
    kind: Kind,
    policy: Option<ReconnectPolicy>,
    retry_ms: Option<u64>,
    calls: usize,
) -> Recovery {
    let cluster = Cluster::start(ClusterConfig {
        // Every instance can serve a resume, so what is measured is the reconnect, never a
        // rejection and re-initialization.
        preset: Preset::Replicated,
        instances: 3,
        idle_timeout: None,
        cut_after_events: Some(2),
        retry_ms,
        ..Default::default()
    })
    .await
    .expect("the cluster starts");
    let clock = CutClock::default();
    let addr = forwarder(cluster.addr(), clock.clone()).await;
    let url = format!("http://{addr}/mcp");

    let floor = Floor::connect(plain_http(), &url).await;
    let mut rtts = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        floor.ping().await;
        rtts.push(t.elapsed().as_secs_f64() * 1e3);
    }

    let client = match (kind, policy) {
        (Kind::McpResume, policy) => Client::connect_mcp_resume(&url, policy).await,
        (kind, _) => Client::connect(kind, &url).await,
    };
    let mut events = match &client {
        Client::McpResume(c) => Some(c.events()),
        _ => None,
    };
    let mut samples = Vec::new();
    let mut uncut = 0;
    for _ in 0..calls {
        clock.take();
        let started = Instant::now();
        client.slow().await;
        let done = Instant::now();
        match clock.take() {
            Some(cut) if cut >= started => samples.push((done - cut).as_secs_f64() * 1e3),
            _ => uncut += 1,
        }
        // Lets the resumed stream wind down before the next call.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let (mut resumed, mut reinitialized) = (None, None);
    if let Some(events) = events.as_mut() {
        let (mut r, mut i) = (0, 0);
        while let Ok(Some(e)) = tokio::time::timeout(Duration::from_millis(1), events.recv()).await
        {
            match e {
                mcp_resume::SessionEvent::Resumed { .. } => r += 1,
                mcp_resume::SessionEvent::Reinitialized { .. } => i += 1,
                _ => {}
            }
        }
        (resumed, reinitialized) = (Some(r), Some(i));
    }
    client.close().await;
    let oracle = cluster.oracle();
    cluster.shutdown().await;
    Recovery {
        server_resumes: oracle.totals.resumes,
        executions: oracle.totals.executions,
        samples,
        uncut,
        rtt_ms: median(&rtts),
        resumed,
        reinitialized,
    }
}
