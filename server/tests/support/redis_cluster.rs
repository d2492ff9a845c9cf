//! A three-node Redis Cluster of `redis-server` children on free 127.0.0.1 ports, started
//! by the tests (slots split in three, the nodes introduced to each other), killed with its
//! handle.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mock_server::procs::{find_program, free_port, kill_at_exit, spare_at_exit, TempDir};
use tokio::net::TcpStream;

pub(crate) struct RedisCluster {
    nodes: Vec<Node>,
    dir: TempDir,
}

/// One node: its port, its cluster bus's port, its process.
struct Node {
    port: u16,
    bus: u16,
    child: Child,
}

impl RedisCluster {
    /// Starts the three nodes and waits until the cluster says `cluster_state:ok`.
    pub(crate) async fn start() -> RedisCluster {
        let binary = find_program("redis-server")
            .expect("the Redis Cluster tests need redis-server (apt-get install redis-server)");
        let mut cluster = RedisCluster {
            nodes: Vec::new(),
            dir: TempDir::new("redis-cluster").expect("a temp dir"),
        };
        for i in 0..3 {
            let node = start_node(&binary, cluster.dir.path(), i).await;
            cluster.nodes.push(node);
        }
        let mut conns = Vec::new();
        for node in &cluster.nodes {
            conns.push(connect(node.port).await);
        }
        let ranges = [(0, 5460), (5461, 10922), (10923, 16383)];
        for (conn, (from, to)) in conns.iter_mut().zip(ranges) {
            let _: () = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(from)
                .arg(to)
                .query_async(conn)
                .await
                .expect("slots assigned");
        }
        for node in &cluster.nodes[1..] {
            let _: () = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(node.port)
                // Without it, the bus is taken to be at the port plus 10,000.
                .arg(node.bus)
                .query_async(&mut conns[0])
                .await
                .expect("nodes meet");
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        'wait: loop {
            assert!(
                Instant::now() < deadline,
                "the cluster did not form in time"
            );
            for conn in &mut conns {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query_async(conn)
                    .await
                    .expect("cluster info");
                if !info.contains("cluster_state:ok") || !info.contains("cluster_known_nodes:3") {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue 'wait;
                }
            }
            break;
        }
        cluster
    }

    /// `redis://127.0.0.1:PORT` of each node.
    pub(crate) fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|node| format!("redis://127.0.0.1:{}", node.port))
            .collect()
    }

    /// Stops every node (`SIGSTOP`): each keeps its connections and takes new ones, and
    /// answers nothing until [`RedisCluster::continue_all`].
    pub(crate) fn stop_all(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Lets stopped nodes run again (`SIGCONT`).
    pub(crate) fn continue_all(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, signal: libc::c_int) {
        for node in &self.nodes {
            let pid = libc::pid_t::try_from(node.child.id()).expect("a pid");
            // SAFETY: a signal to a child this handle owns and has not reaped.
            assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "signalled");
        }
    }
}

/// Starts node `i` and waits until it listens. Its ports are free when picked, not reserved:
/// one taken by another process in the meantime makes the node exit, and it starts again on
/// other ports. The cluster bus's port is picked the same way: by default it would be the
/// node's port plus 10,000, which nothing checks is free.
async fn start_node(binary: &Path, dir: &Path, i: usize) -> Node {
    let mut last = String::new();
    for attempt in 0..5 {
        let (port, bus) = (
            free_port().expect("a free port"),
            free_port().expect("a free port"),
        );
        if port == bus {
            continue;
        }
        // A directory per attempt: a node keeps its ports in its cluster config file.
        let node_dir = dir.join(format!("n{i}-{attempt}"));
        std::fs::create_dir_all(&node_dir).expect("a node dir");
        let mut child = Command::new(binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"])
            .args(["--cluster-port", &bus.to_string()])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&node_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                last = format!("redis-server on {port} (bus {bus}) exited: {status}");
                break;
            }
            if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                // The tests keep the cluster in a `static`, which is never dropped.
                kill_at_exit(&child);
                return Node { port, bus, child };
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                last = format!("redis-server on {port} did not listen in time");
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    panic!("a Redis Cluster node did not start: {last}");
}

async fn connect(port: u16) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).expect("a URL");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match client.get_multiplexed_async_connection().await {
            Ok(c) => return c,
            Err(e) if Instant::now() > deadline => panic!("redis-server on {port}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for Node { child, .. } in &mut self.nodes {
            spare_at_exit(child);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
