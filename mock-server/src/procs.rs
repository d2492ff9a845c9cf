//! The cluster on real parts, as child processes: `redis-server`, stand-alone instances
//! (`mock-cluster --instance-only`) sharing it, and nginx in front. Tests start their own on
//! free 127.0.0.1 ports, each in its own temp directory, and every process dies with its
//! handle (also when a test panics).
//!
//! `redis-server` and `nginx` are looked up on `PATH` (and in the `sbin` directories); when
//! one is missing, starting fails with an error that says how to install it.

use std::ffi::OsString;
use std::io;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::config::Preset;
use crate::nginx::NginxConfig;
use crate::oracle::{OracleReport, DEFAULT_ORACLE_RECORD_LIMIT};
use crate::store::{RedisOptions, RedisStore, Store, StoreError};

/// How long a process gets to start listening.
const START_DEADLINE: Duration = Duration::from_secs(15);
/// Pause between two checks of a condition being waited for.
const POLL: Duration = Duration::from_millis(10);

/// A directory removed with its handle.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// A fresh directory under the system temp dir, named after `label`.
    pub fn new(label: &str) -> io::Result<TempDir> {
        let path = std::env::temp_dir().join(format!(
            "mcp-resume-{label}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&path)?;
        Ok(TempDir(path))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Finds `name` on `PATH` or in the usual system directories (nginx lives in `sbin`).
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    std::env::split_paths(&path)
        .chain(
            ["/usr/sbin", "/usr/local/sbin", "/sbin", "/usr/local/bin"]
                .iter()
                .map(PathBuf::from),
        )
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn missing(name: &str, package: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!(
            "`{name}` was not found on PATH or in /usr/sbin: install it (apt-get install \
             {package}; .ci/run does) to run the real-parts tests"
        ),
    )
}

/// A free port on 127.0.0.1 (the listener is closed before the port is used, so another
/// process could take it first: callers that start a server on it retry on failure).
pub fn free_port() -> io::Result<u16> {
    Ok(StdListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

fn signal(child: &Child, sig: i32) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// Waits up to `deadline` for the child to exit; true when it did.
fn wait_exit(child: &mut Child, deadline: Duration) -> bool {
    let end = Instant::now() + deadline;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) if Instant::now() < end => std::thread::sleep(POLL),
            _ => return false,
        }
    }
}

/// Children a `static` owns: statics are never dropped, so these are killed when the process
/// exits instead (only while still ours: [`spare_at_exit`] takes a child out before it is
/// reaped, so a pid signalled here is never another process's).
static KILLED_AT_EXIT: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// Has `child` killed (SIGKILL) when this process exits, unless [`spare_at_exit`] is called
/// for it first: for servers kept in a `static` for a whole test binary.
pub fn kill_at_exit(child: &Child) {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        // SAFETY: registers a plain `extern "C"` function taking no arguments.
        unsafe {
            libc::atexit(kill_registered);
        }
    });
    KILLED_AT_EXIT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(child.id());
}

/// `child` is being killed and reaped by its owner: not to be signalled at exit.
pub fn spare_at_exit(child: &Child) {
    KILLED_AT_EXIT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .retain(|pid| *pid != child.id());
}

extern "C" fn kill_registered() {
    // At exit another thread may hold the lock: then nothing is killed rather than waiting.
    let Ok(mut pids) = KILLED_AT_EXIT.try_lock() else {
        return;
    };
    for pid in pids.drain(..) {
        if let Ok(pid) = i32::try_from(pid) {
            // SAFETY: kill(2) on a child of ours not yet reaped; no memory is involved.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

fn kill_now(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

fn read_log(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(20).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// Waits until `addr` accepts a connection, or the child exits, or the deadline.
async fn wait_listening(
    child: &mut Child,
    addr: SocketAddr,
    what: &str,
    log: &Path,
) -> io::Result<()> {
    let end = tokio::time::Instant::now() + START_DEADLINE;
    loop {
        if let Some(status) = child.try_wait()? {
            return Err(io::Error::other(format!(
                "{what} exited ({status}) before listening on {addr}:\n{}",
                read_log(log)
            )));
        }
        if TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= end {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "{what} did not listen on {addr} in time:\n{}",
                    read_log(log)
                ),
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A `redis-server` child on a port of its own, with an append-only file fsynced on every
/// write, so that it can be killed and started again without losing what it acknowledged.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    binary: PathBuf,
    dir: TempDir,
}

impl RedisServer {
    /// Starts one; fails (saying how to install it) when `redis-server` is missing.
    pub async fn start() -> io::Result<RedisServer> {
        let binary =
            find_program("redis-server").ok_or_else(|| missing("redis-server", "redis-server"))?;
        let mut server = RedisServer {
            child: None,
            port: 0,
            binary,
            dir: TempDir::new("redis")?,
        };
        let mut last = None;
        for _ in 0..5 {
            server.port = free_port()?;
            match server.start_again().await {
                Ok(()) => return Ok(server),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("redis-server did not start")))
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether it is running.
    pub fn is_up(&self) -> bool {
        self.child.is_some()
    }

    /// Kills it at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            spare_at_exit(&c);
            kill_now(&mut c);
        }
    }

    /// Starts it (again) on the same port and data directory; it reloads its append-only
    /// file and answers once loaded.
    pub async fn start_again(&mut self) -> io::Result<()> {
        if self.child.is_some() {
            return Ok(());
        }
        let log = self.dir.path().join("redis.log");
        let mut child = Command::new(&self.binary)
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--daemonize",
                "no",
                "--logfile",
            ])
            .arg(&log)
            .arg("--dir")
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        // Listening is not serving: it answers LOADING while it reads its file back.
        if let Err(e) = wait_redis(&mut child, addr, &log).await {
            kill_now(&mut child);
            return Err(e);
        }
        // A server kept in a `static` for a whole test binary is never dropped.
        kill_at_exit(&child);
        self.child = Some(child);
        Ok(())
    }

    /// Kills it and starts it again (same port, same data).
    pub async fn restart(&mut self) -> io::Result<()> {
        self.kill();
        self.start_again().await
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The pid of the redis-server answering on `addr`, once it serves (not while it loads).
async fn redis_pid(addr: SocketAddr) -> io::Result<Option<u32>> {
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(b"INFO server\r\n").await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if text.starts_with('-') {
            // -LOADING and other errors: not serving yet.
            return Ok(None);
        }
        if let Some(rest) = text.split("process_id:").nth(1) {
            if let Some(line) = rest.split("\r\n").next().filter(|_| rest.contains("\r\n")) {
                return Ok(line.trim().parse().ok());
            }
        }
        if buf.len() > 64 * 1024 {
            return Ok(None);
        }
    }
}

/// Waits until the child itself serves on `addr`: another process that happens to listen
/// on the port (a free port is only free until someone takes it) does not count.
async fn wait_redis(child: &mut Child, addr: SocketAddr, log: &Path) -> io::Result<()> {
    let end = tokio::time::Instant::now() + START_DEADLINE;
    loop {
        if let Some(status) = child.try_wait()? {
            return Err(io::Error::other(format!(
                "redis-server exited ({status}) before serving on {addr}:\n{}",
                read_log(log)
            )));
        }
        let answer = tokio::time::timeout(Duration::from_secs(1), redis_pid(addr)).await;
        match answer {
            Ok(Ok(Some(pid))) if pid == child.id() => return Ok(()),
            Ok(Ok(Some(other))) => {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("{addr} is served by another redis-server (pid {other})"),
                ))
            }
            _ => {}
        }
        if tokio::time::Instant::now() >= end {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "redis-server did not serve on {addr} in time:\n{}",
                    read_log(log)
                ),
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until nginx has written its pid file (it does so once its sockets are bound), so
/// that a port taken by someone else is not mistaken for nginx listening.
async fn wait_nginx_pid(child: &mut Child, pid_file: &Path, log: &Path) -> io::Result<()> {
    let end = tokio::time::Instant::now() + START_DEADLINE;
    loop {
        if let Some(status) = child.try_wait()? {
            return Err(io::Error::other(format!(
                "nginx exited ({status}) before starting:\n{}",
                read_log(log)
            )));
        }
        let written = std::fs::read_to_string(pid_file).unwrap_or_default();
        if written.trim() == child.id().to_string() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= end {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("nginx did not start in time:\n{}", read_log(log)),
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// nginx as a child process, everything it writes under its own prefix directory.
#[derive(Debug)]
pub struct Nginx {
    child: Option<Child>,
    config: NginxConfig,
    dir: TempDir,
}

impl Nginx {
    /// Starts nginx with `config` (its `prefix` is replaced by a fresh temp directory; port
    /// 0 in `listen` picks a free port). Fails, saying how to install it, when nginx is
    /// missing.
    pub async fn start(mut config: NginxConfig) -> io::Result<Nginx> {
        let binary = find_program("nginx").ok_or_else(|| missing("nginx", "nginx"))?;
        let dir = TempDir::new("nginx")?;
        config.prefix = dir.path().to_owned();
        // Run as root, nginx's workers drop to an unprivileged user: let them in.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
        }
        let pick = config.listen.port() == 0;
        let mut last = None;
        for _ in 0..5 {
            if pick {
                config.listen.set_port(free_port()?);
            }
            let conf = dir.path().join("nginx.conf");
            std::fs::write(&conf, config.render())?;
            let log = dir.path().join("error.log");
            let mut child = Command::new(&binary)
                .arg("-p")
                .arg(dir.path())
                .arg("-c")
                .arg(&conf)
                .arg("-e")
                .arg(&log)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?;
            let pid_file = dir.path().join("nginx.pid");
            let started = async {
                wait_nginx_pid(&mut child, &pid_file, &log).await?;
                wait_listening(&mut child, config.listen, "nginx", &log).await
            };
            match started.await {
                Ok(()) => {
                    return Ok(Nginx {
                        child: Some(child),
                        config,
                        dir,
                    })
                }
                Err(e) => {
                    stop_nginx(&mut child);
                    last = Some(e);
                    if !pick {
                        break;
                    }
                }
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("nginx did not start")))
    }

    /// The public MCP endpoint, `http://LISTEN/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.config.listen)
    }

    /// The configuration it runs.
    pub fn config(&self) -> &NginxConfig {
        &self.config
    }

    /// The tail of its error log (cuts show up there as "upstream timed out").
    pub fn error_log(&self) -> String {
        read_log(&self.dir.path().join("error.log"))
    }

    /// The tail of its access log: request, status, the instance that answered, time.
    pub fn access_log(&self) -> String {
        read_log(&self.dir.path().join("access.log"))
    }
}

fn stop_nginx(child: &mut Child) {
    // SIGTERM: the master stops its workers (SIGKILL would leave them behind).
    signal(child, libc::SIGTERM);
    if !wait_exit(child, Duration::from_secs(5)) {
        kill_now(child);
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            stop_nginx(&mut c);
        }
    }
}

/// One `mock-cluster --instance-only` child process.
#[derive(Debug)]
pub struct InstanceProcess {
    child: Option<Child>,
    addr: SocketAddr,
    log: PathBuf,
}

impl InstanceProcess {
    /// Runs `binary --instance-only --listen ADDR` plus `args`, and waits for the URL it
    /// prints first on stdout. Its stderr goes to `log`.
    pub async fn start(
        binary: &Path,
        addr: SocketAddr,
        args: &[String],
        log: PathBuf,
    ) -> io::Result<InstanceProcess> {
        let err = std::fs::File::create(&log)?;
        let mut child = Command::new(binary)
            .arg("--instance-only")
            .arg("--listen")
            .arg(addr.to_string())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .map(tokio::process::ChildStdout::from_std);
        let line = async {
            let mut line = String::new();
            if let Some(Ok(out)) = stdout {
                BufReader::new(out).read_line(&mut line).await?;
            }
            Ok::<_, io::Error>(line)
        };
        let line = match tokio::time::timeout(START_DEADLINE, line).await {
            Ok(Ok(l)) if !l.trim().is_empty() => l,
            _ => {
                kill_now(&mut child);
                return Err(io::Error::other(format!(
                    "instance on {addr} did not start:\n{}",
                    read_log(&log)
                )));
            }
        };
        let expected = format!("http://{addr}/mcp");
        if line.trim() != expected {
            kill_now(&mut child);
            return Err(io::Error::other(format!(
                "instance printed {:?}, expected {expected}",
                line.trim()
            )));
        }
        Ok(InstanceProcess {
            child: Some(child),
            addr,
            log,
        })
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The tail of its stderr.
    pub fn log(&self) -> String {
        read_log(&self.log)
    }

    /// Kills it at once (SIGKILL): no goodbye to the store.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_now(&mut c);
        }
    }

    /// Stops it with SIGTERM (it releases what it holds in the store), waiting up to 5 s.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            signal(&c, libc::SIGTERM);
            if !wait_exit(&mut c, Duration::from_secs(5)) {
                kill_now(&mut c);
            }
        }
    }
}

impl Drop for InstanceProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What [`ProcessCluster::start`] runs.
#[derive(Debug, Clone)]
pub struct ProcessClusterConfig {
    /// The `mock-cluster` binary.
    pub binary: PathBuf,
    /// The instances' preset (`sticky` runs `strict` instances behind the affinity config).
    pub preset: Preset,
    /// Number of instance processes.
    pub instances: usize,
    /// Override of the preset's routing (affinity on the session id, or round-robin).
    pub affinity: Option<bool>,
    /// nginx's `proxy_read_timeout`: an SSE stream idle this long is cut.
    pub idle_timeout: Duration,
    /// Lease of each instance process's claims in Redis (how long after a silent death its
    /// running calls read as lost).
    pub lease: Duration,
    /// More flags for every instance (e.g. `--retry-ms 50`).
    pub instance_args: Vec<String>,
}

impl ProcessClusterConfig {
    /// 3 instances of `preset`, its routing, a 30 s idle timeout, a 3 s lease.
    pub fn new(binary: PathBuf, preset: Preset) -> Self {
        Self {
            binary,
            preset,
            instances: 3,
            affinity: None,
            idle_timeout: Duration::from_secs(30),
            lease: Duration::from_secs(3),
            instance_args: Vec::new(),
        }
    }
}

/// Redis, N instance processes sharing it, nginx in front: the cluster of the incident, on
/// real parts. The oracle is the instances' journal in Redis.
#[derive(Debug)]
pub struct ProcessCluster {
    // Dropped in this order: the balancer, the instances, then what they use.
    nginx: Nginx,
    instances: Vec<Option<InstanceProcess>>,
    store: RedisStore,
    redis: RedisServer,
    config: ProcessClusterConfig,
    namespace: String,
    addrs: Vec<SocketAddr>,
    dir: TempDir,
}

impl ProcessCluster {
    /// Starts redis-server, the instances, then nginx; fails with an install hint when
    /// redis-server or nginx is missing.
    pub async fn start(config: ProcessClusterConfig) -> io::Result<ProcessCluster> {
        if config.instances == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a cluster needs at least one instance",
            ));
        }
        // Both checked before anything starts, so a missing one is reported at once.
        find_program("redis-server").ok_or_else(|| missing("redis-server", "redis-server"))?;
        find_program("nginx").ok_or_else(|| missing("nginx", "nginx"))?;
        let redis = RedisServer::start().await?;
        let namespace = format!("mcp-{}:", uuid::Uuid::new_v4().simple());
        let store = RedisStore::connect_with(
            &redis.url(),
            RedisOptions {
                namespace: namespace.clone(),
                ..RedisOptions::default()
            },
        )
        .await
        .map_err(|e| io::Error::other(e.to_string()))?;
        let dir = TempDir::new("instances")?;
        let mut addrs = Vec::new();
        let mut instances = Vec::new();
        for i in 0..config.instances {
            let mut started = None;
            for _ in 0..5 {
                let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
                let log = dir.path().join(format!("instance-{i}.log"));
                match InstanceProcess::start(
                    &config.binary,
                    addr,
                    &Self::args(&config, &redis, &namespace, i),
                    log,
                )
                .await
                {
                    Ok(p) => {
                        started = Some(p);
                        break;
                    }
                    Err(e) if e.to_string().contains("in use") => continue,
                    Err(e) => return Err(e),
                }
            }
            let p = started.ok_or_else(|| io::Error::other("no free port for an instance"))?;
            addrs.push(p.addr());
            instances.push(Some(p));
        }
        let mut nginx_config = NginxConfig::new(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            addrs.clone(),
            PathBuf::new(),
        );
        nginx_config.affinity = config.affinity.unwrap_or(config.preset.affinity());
        nginx_config.idle_timeout = config.idle_timeout;
        let nginx = Nginx::start(nginx_config).await?;
        Ok(ProcessCluster {
            config,
            redis,
            store,
            namespace,
            addrs,
            instances,
            nginx,
            dir,
        })
    }

    fn args(
        config: &ProcessClusterConfig,
        redis: &RedisServer,
        namespace: &str,
        i: usize,
    ) -> Vec<String> {
        let mut args = vec![
            "--preset".to_owned(),
            config.preset.as_str().to_owned(),
            "--instance-index".to_owned(),
            i.to_string(),
            "--store".to_owned(),
            redis.url(),
            "--namespace".to_owned(),
            namespace.to_owned(),
            "--lease-ms".to_owned(),
            config.lease.as_millis().to_string(),
        ];
        args.extend(config.instance_args.iter().cloned());
        args
    }

    /// The public MCP endpoint (nginx).
    pub fn url(&self) -> String {
        self.nginx.url()
    }

    /// Instance `i`'s own MCP endpoint, bypassing nginx (None while it is down).
    pub fn instance_url(&self, i: usize) -> Option<String> {
        self.instances
            .get(i)?
            .as_ref()
            .map(|p| format!("http://{}/mcp", p.addr()))
    }

    /// Whether instance `i` is running.
    pub fn is_up(&self, i: usize) -> bool {
        matches!(self.instances.get(i), Some(Some(_)))
    }

    /// The preset.
    pub fn preset(&self) -> Preset {
        self.config.preset
    }

    /// Whether nginx pins sessions.
    pub fn affinity(&self) -> bool {
        self.nginx.config().affinity
    }

    /// A handle on the shared store (the cluster's namespace).
    pub fn store(&self) -> Arc<dyn Store> {
        Arc::new(self.store.clone())
    }

    /// The Redis key prefix of this cluster.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// nginx.
    pub fn nginx(&self) -> &Nginx {
        &self.nginx
    }

    /// The redis-server (to kill and restart it).
    pub fn redis_mut(&mut self) -> &mut RedisServer {
        &mut self.redis
    }

    /// The tails of the instances' stderr, for failure messages.
    pub fn instance_logs(&self) -> String {
        (0..self.addrs.len())
            .map(|i| {
                format!(
                    "--- instance {i}:\n{}",
                    read_log(&self.dir.path().join(format!("instance-{i}.log")))
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// What really happened: the journal the instances wrote, replayed. Retried for up to
    /// 5 s: after a Redis restart the first command on a connection fails while it
    /// reconnects.
    pub async fn oracle(&self) -> Result<OracleReport, StoreError> {
        let end = tokio::time::Instant::now() + Duration::from_secs(5);
        let entries = loop {
            match self.store.journal_entries().await {
                Ok(e) => break e,
                Err(e) if tokio::time::Instant::now() >= end => return Err(e),
                Err(_) => tokio::time::sleep(POLL).await,
            }
        };
        OracleReport::from_journal(&entries, DEFAULT_ORACLE_RECORD_LIMIT)
            .map_err(|e| StoreError(format!("oracle journal: {e}")))
    }

    /// Restarts the oracle's counts (a journal entry; the truth about sessions stays).
    pub async fn reset_oracle(&self) -> Result<(), StoreError> {
        self.store
            .journal_append(&OracleReport::journal_reset_entry())
            .await
    }

    /// Waits until no execution runs on any live instance; false after `timeout`.
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        let end = tokio::time::Instant::now() + timeout;
        for p in self.instances.iter().flatten() {
            loop {
                let left = end.saturating_duration_since(tokio::time::Instant::now());
                if left.is_zero() {
                    return false;
                }
                let wait = left.min(Duration::from_secs(1)).as_millis();
                match http_get(p.addr(), &format!("/admin/idle?timeout_ms={wait}")).await {
                    Ok(body) if body.contains("\"idle\":true") => break,
                    Ok(_) => {}
                    // An instance that does not answer runs nothing this cluster waits for.
                    Err(_) => break,
                }
            }
        }
        true
    }

    /// Kills instance `i`'s process (SIGKILL) and tells the store, as an orchestrator that
    /// saw it die would: its running requests and keys become lost at once. False if it was
    /// down already.
    pub async fn kill_instance(&mut self, i: usize) -> bool {
        if !self.kill_instance_silently(i) {
            return false;
        }
        let _ = self.store.release_instance(i).await;
        true
    }

    /// Kills instance `i`'s process and tells nobody: its claims read as lost once its
    /// lease expires.
    pub fn kill_instance_silently(&mut self, i: usize) -> bool {
        match self.instances.get_mut(i).and_then(Option::take) {
            Some(mut p) => {
                p.kill();
                true
            }
            None => false,
        }
    }

    /// Starts instance `i` again on its port, empty.
    pub async fn restart_instance(&mut self, i: usize) -> io::Result<()> {
        if self.is_up(i) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "instance is up",
            ));
        }
        let addr = *self
            .addrs
            .get(i)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such instance"))?;
        let log = self.dir.path().join(format!("instance-{i}.log"));
        let p = InstanceProcess::start(
            &self.config.binary,
            addr,
            &Self::args(&self.config, &self.redis, &self.namespace, i),
            log,
        )
        .await?;
        self.instances[i] = Some(p);
        Ok(())
    }

    /// Stops nginx, the instances (SIGTERM) and Redis.
    pub async fn shutdown(mut self) {
        for p in self.instances.iter_mut().flatten() {
            p.stop();
        }
    }
}

/// A GET on 127.0.0.1 without a client library: the admin routes answer small JSON bodies.
async fn http_get(addr: SocketAddr, path: &str) -> io::Result<String> {
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(65), s.read_to_end(&mut out))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "admin route did not answer"))??;
    Ok(String::from_utf8_lossy(&out).into_owned())
}
