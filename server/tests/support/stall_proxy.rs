//! A TCP proxy in front of a Redis that can be made to stall, answer slowly, or drop its
//! connections: a store that accepts connections but does not answer, as a stopped
//! (`SIGSTOP`) or busy server does, without signalling a process.

// Shared by two test binaries, each using some of its modes.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};

/// What the proxy does with the bytes it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Forwards them both ways.
    Pass,
    /// Keeps them (connections are accepted and read, nothing is forwarded) until the mode
    /// changes; then forwards what it kept, as a stopped server that is continued.
    Stall,
    /// Forwards them both ways, the server's answers each this late.
    Slow(Duration),
    /// Forwards commands to the server and keeps its answers (it runs them, its client hears
    /// nothing), as [`Mode::Stall`] does both ways.
    Deaf,
    /// Closes every new connection at once, as a server that is down; open ones forward
    /// nothing more (what they kept stays kept) until [`StallProxy::cut`].
    Refuse,
}

/// The proxy; it stops when dropped.
pub(crate) struct StallProxy {
    addr: SocketAddr,
    mode: watch::Sender<Mode>,
    /// Bumped to drop every open connection.
    cut: watch::Sender<u64>,
    held: Arc<Held>,
    task: tokio::task::JoinHandle<()>,
}

/// Counts the reads kept instead of forwarded at once: a test knows a command reached the
/// proxy and waits there.
#[derive(Default)]
struct Held {
    reads: AtomicU64,
    more: Notify,
}

impl StallProxy {
    /// A proxy on 127.0.0.1 forwarding to `target`.
    pub(crate) async fn start(target: SocketAddr) -> StallProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (mode, _) = watch::channel(Mode::Pass);
        let (cut, _) = watch::channel(0u64);
        let (mode_rx, cut_rx) = (mode.subscribe(), cut.subscribe());
        let held = Arc::new(Held::default());
        let counted = held.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (mode, mut cut) = (mode_rx.clone(), cut_rx.clone());
                if *mode.borrow() == Mode::Refuse {
                    drop(client);
                    continue;
                }
                cut.mark_unchanged();
                let held = counted.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::select! {
                        _ = pump(cr, sw, mode.clone(), false, &held) => {}
                        _ = pump(sr, cw, mode, true, &held) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        StallProxy {
            addr,
            mode,
            cut,
            held,
            task,
        }
    }

    /// `redis://` at the proxy.
    pub(crate) fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// From now on, does this with what it reads.
    pub(crate) fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// Reads kept so far (see [`StallProxy::kept_past`]).
    pub(crate) fn kept(&self) -> u64 {
        self.held.reads.load(Ordering::SeqCst)
    }

    /// Waits until more than `n` reads were kept: a command sent since [`StallProxy::kept`]
    /// answered `n` waits in the proxy.
    pub(crate) async fn kept_past(&self, n: u64) {
        loop {
            let more = self.held.more.notified();
            tokio::pin!(more);
            more.as_mut().enable();
            if self.kept() > n {
                return;
            }
            more.await;
        }
    }

    /// Drops every open connection (what was kept, unsent), as a server that went away
    /// mid-command; new ones are accepted.
    pub(crate) fn cut(&self) {
        self.cut.send_modify(|n| *n += 1);
    }
}

impl Drop for StallProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.cut();
    }
}

/// Copies `from` to `to` as the mode says (`answers`: the server's side, which `Slow`
/// delays).
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
    answers: bool,
    held: &Held,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut counted = false;
        loop {
            let now = *mode.borrow_and_update();
            match now {
                Mode::Pass => break,
                Mode::Deaf if !answers => break,
                Mode::Slow(d) => {
                    if answers {
                        tokio::time::sleep(d).await;
                    }
                    break;
                }
                Mode::Stall | Mode::Deaf | Mode::Refuse => {
                    if !counted {
                        counted = true;
                        held.reads.fetch_add(1, Ordering::SeqCst);
                        held.more.notify_waiters();
                    }
                    if mode.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
