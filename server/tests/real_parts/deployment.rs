//! The deployment under test, from real parts: a `redis-server`, three replica processes
//! (the `replica` example: rmcp 3.11, with or without the guard), nginx in front (legacy
//! sessions pinned by `Mcp-Session-Id`, everything else round-robin; idle streams cut).
//! Besides the effect, the replicas count in Redis what shows a fault bit: a call's requests,
//! its answers cut before they went, its runs finished, its runs a drain found in flight.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use mock_server::nginx::NginxConfig;
use mock_server::procs::{free_port, Nginx, RedisServer};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// nginx's `proxy_read_timeout`: a stream silent this long is cut.
pub(crate) const IDLE: Duration = Duration::from_millis(300);
/// The replicas' claim lease: a killed replica's keys read as lost this long after it died.
pub(crate) const LEASE: Duration = Duration::from_millis(800);

pub(crate) struct Deployment {
    pub(crate) guarded: bool,
    namespace: String,
    redis_url: String,
    replicas: Vec<Replica>,
    nginx: Nginx,
    counter: redis::aio::MultiplexedConnection,
    _redis: RedisServer,
}

struct Replica {
    port: u16,
    child: Option<Child>,
}

impl Deployment {
    pub(crate) async fn start(guarded: bool) -> Deployment {
        let redis = RedisServer::start()
            .await
            .unwrap_or_else(|e| panic!("the real-parts tests need redis-server: {e}"));
        let namespace = format!("rp{}:", uuid::Uuid::new_v4().simple());
        let mut replicas = Vec::new();
        for _ in 0..3 {
            let port = free_port().unwrap();
            let child = spawn(guarded, &redis.url(), &namespace, port).await;
            replicas.push(Replica {
                port,
                child: Some(child),
            });
        }
        let upstreams: Vec<u16> = replicas.iter().map(|r| r.port).collect();
        let counter = redis::Client::open(redis.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        Deployment {
            guarded,
            namespace,
            redis_url: redis.url(),
            replicas,
            nginx: start_nginx(&upstreams).await,
            counter,
            _redis: redis,
        }
    }

    /// The public MCP endpoint (nginx).
    pub(crate) fn url(&self) -> String {
        self.nginx.url()
    }

    /// The replicas' `redis-server` (a client's ledger may live there too, under its own
    /// prefix).
    pub(crate) fn redis_url(&self) -> &str {
        &self.redis_url
    }

    /// The side effects the tool applied for `tag` (Redis: the truth).
    pub(crate) async fn effects(&self, tag: &str) -> u64 {
        self.count("effects", tag).await
    }

    /// The replicas' count of `what` for `tag` (see the `replica` example): `posts`,
    /// `cut`, `done`, `drained`.
    pub(crate) async fn count(&self, what: &str, tag: &str) -> u64 {
        let mut c = self.counter.clone();
        let n: Option<u64> = redis::cmd("GET")
            .arg(format!("{}{what}:{tag}", self.namespace))
            .query_async(&mut c)
            .await
            .unwrap();
        n.unwrap_or(0)
    }

    /// Waits until the call tagged `tag` has applied its effect; the pid of the replica
    /// that ran it.
    pub(crate) async fn wait_effect(&self, tag: &str) -> u32 {
        for _ in 0..400 {
            let mut c = self.counter.clone();
            let pid: Option<u32> = redis::cmd("GET")
                .arg(format!("{}ran:{tag}", self.namespace))
                .query_async(&mut c)
                .await
                .unwrap();
            if let Some(pid) = pid {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the call {tag} never ran");
    }

    /// Kills the replica with this pid at once (SIGKILL), as a crash would; its port stays
    /// closed.
    pub(crate) fn kill9(&mut self, pid: u32) {
        let r = self
            .replicas
            .iter_mut()
            .find(|r| r.child.as_ref().and_then(Child::id) == Some(pid))
            .expect("a replica with that pid");
        let child = r.child.as_mut().unwrap();
        signal(child, libc::SIGKILL);
        // Reaped, so that `revive` sees it dead.
        let _ = child.start_kill();
    }

    /// A rolling restart's step on the replica with this pid: drained (SIGTERM: its
    /// connections closed at once, its running calls let end), then started again on its port
    /// as a new process.
    pub(crate) async fn drain_and_restart(&mut self, pid: u32) {
        let i = self
            .replicas
            .iter()
            .position(|r| r.child.as_ref().and_then(Child::id) == Some(pid))
            .expect("a replica with that pid");
        let mut child = self.replicas[i].child.take().unwrap();
        signal(&child, libc::SIGTERM);
        let exited = tokio::time::timeout(Duration::from_secs(15), child.wait()).await;
        assert!(exited.is_ok(), "replica {i} drained in time");
        let port = self.replicas[i].port;
        let child = spawn(self.guarded, &self.redis_url, &self.namespace, port).await;
        self.replicas[i].child = Some(child);
    }

    /// Starts again, on their ports, the replicas that died.
    pub(crate) async fn revive(&mut self) {
        for i in 0..self.replicas.len() {
            let dead = match self.replicas[i].child.as_mut() {
                Some(c) => c.try_wait().ok().flatten().is_some(),
                None => true,
            };
            if dead {
                let port = self.replicas[i].port;
                let child = spawn(self.guarded, &self.redis_url, &self.namespace, port).await;
                self.replicas[i].child = Some(child);
            }
        }
    }

    /// What nginx saw (for failure messages).
    pub(crate) fn access_log(&self) -> String {
        self.nginx.access_log()
    }
}

/// One replica process on `port`; returns once it listens.
async fn spawn(guarded: bool, redis_url: &str, namespace: &str, port: u16) -> Child {
    let mut cmd = Command::new(replica_binary());
    cmd.args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--redis", redis_url, "--namespace", namespace])
        .args(["--lease-ms", &LEASE.as_millis().to_string()])
        .args(["--instance", &format!("replica-{port}")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    if !guarded {
        cmd.arg("--no-guard");
    }
    let mut child = cmd.spawn().expect("the replica starts");
    let out = child.stdout.take().expect("its stdout");
    let mut line = String::new();
    let mut reader = BufReader::new(out);
    let read = reader.read_line(&mut line);
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("the replica listens in time")
        .expect("its first line");
    assert!(line.starts_with("http://"), "the replica said {line:?}");
    child
}

async fn start_nginx(upstreams: &[u16]) -> Nginx {
    let mut config = NginxConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        upstreams
            .iter()
            .map(|p| format!("127.0.0.1:{p}").parse().unwrap())
            .collect(),
        PathBuf::new(),
    );
    config.affinity = true;
    config.idle_timeout = IDLE;
    Nginx::start(config)
        .await
        .unwrap_or_else(|e| panic!("the real-parts tests need nginx: {e}"))
}

fn signal(child: &Child, sig: i32) {
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// The `replica` example next to this test's binary (`cargo test` builds examples); built
/// here when it is missing or older than this crate's sources (this test run alone).
fn replica_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test's path");
        let profile_dir = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("the test runs from target/<profile>/deps")
            .to_owned();
        let bin = profile_dir.join("examples").join("replica");
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let built = std::fs::metadata(&bin).and_then(|m| m.modified()).ok();
        let sources = [root.join("src"), root.join("examples")]
            .iter()
            .filter_map(|p| newest_mtime(p))
            .max();
        if built.is_some_and(|b| sources.is_none_or(|s| s <= b)) {
            return bin;
        }
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => "test",
            _ => "release",
        };
        let target_dir = profile_dir.parent().expect("the target directory");
        let out = std::process::Command::new(env!("CARGO"))
            .args(["build", "-p", "mcp-resume-server", "--example", "replica"])
            .args(["--profile", profile])
            .env("CARGO_TARGET_DIR", target_dir)
            .current_dir(root)
            .output()
            .expect("cargo runs");
        assert!(
            out.status.success(),
            "building the replica failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        bin
    })
    .clone()
}

fn newest_mtime(path: &std::path::Path) -> Option<std::time::SystemTime> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.is_file() {
        return meta.modified().ok();
    }
    std::fs::read_dir(path)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| newest_mtime(&e.path()))
        .max()
}
