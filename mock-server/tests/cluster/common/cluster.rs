//! The in-process cluster on the store a test binary chooses: in memory, or in Redis (a
//! `redis-server` of its own per cluster, which lives and dies with the cluster).

use std::io;
use std::ops::Deref;
use std::sync::Arc;

use mock_server::procs::RedisServer;
use mock_server::{Cluster, ClusterConfig, RedisStore};

/// Where the cluster's shared store lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    Redis,
}

/// A cluster, and the Redis server behind it if any. Derefs to the [`Cluster`].
pub struct TestCluster {
    cluster: Option<Cluster>,
    redis: Option<RedisServer>,
}

impl Deref for TestCluster {
    type Target = Cluster;

    fn deref(&self) -> &Cluster {
        self.cluster.as_ref().expect("running")
    }
}

impl TestCluster {
    /// Stops the cluster, then its Redis server.
    pub async fn shutdown(mut self) {
        if let Some(c) = self.cluster.take() {
            c.shutdown().await;
        }
        drop(self.redis.take());
    }
}

/// Starts `config` with its shared store on `backend` (replacing `config.store`).
pub async fn start_on(backend: Backend, mut config: ClusterConfig) -> io::Result<TestCluster> {
    let redis = match backend {
        Backend::Memory => None,
        Backend::Redis => {
            let server = RedisServer::start().await?;
            let store = RedisStore::connect(&server.url())
                .await
                .map_err(|e| io::Error::other(e.to_string()))?;
            config.store = Some(Arc::new(store));
            Some(server)
        }
    };
    Ok(TestCluster {
        cluster: Some(Cluster::start(config).await?),
        redis,
    })
}
