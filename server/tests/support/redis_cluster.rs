//! A three-node Redis Cluster of `redis-server` children on free 127.0.0.1 ports, started
//! by the tests (slots split in three, the nodes introduced to each other), killed with its
//! handle.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mock_server::procs::{find_program, free_port, TempDir};

pub(crate) struct RedisCluster {
    nodes: Vec<(u16, Child)>,
    _dir: TempDir,
}

impl RedisCluster {
    /// Starts the three nodes and waits until the cluster says `cluster_state:ok`.
    pub(crate) async fn start() -> RedisCluster {
        let binary = find_program("redis-server")
            .expect("the Redis Cluster tests need redis-server (apt-get install redis-server)");
        let dir = TempDir::new("redis-cluster").expect("a temp dir");
        let mut nodes = Vec::new();
        for i in 0..3 {
            let port = free_port().expect("a free port");
            let node_dir = dir.path().join(format!("n{i}"));
            std::fs::create_dir_all(&node_dir).expect("a node dir");
            let child = Command::new(&binary)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .arg("--dir")
                .arg(&node_dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server starts");
            nodes.push((port, child));
        }
        let cluster = RedisCluster { nodes, _dir: dir };
        let mut conns = Vec::new();
        for (port, _) in &cluster.nodes {
            conns.push(connect(*port).await);
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
        for (port, _) in &cluster.nodes[1..] {
            let _: () = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(*port)
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
            .map(|(port, _)| format!("redis://127.0.0.1:{port}"))
            .collect()
    }
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
        for (_, child) in &mut self.nodes {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
