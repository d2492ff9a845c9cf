//! `client.events()`, `client.notifications()` and `transport.events()`: one item per
//! `next()` (JSON text, see `convert`), `null` at the end. The JavaScript side makes async
//! iterators of them.
//!
//! A stream ends when its client is closed (after the items sent before), when the
//! `CancelToken` given to `next()` is cancelled (an iterator's `AbortSignal`), or when the
//! SDK's stream ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mcp_resume::{EventStream, NotificationStream};
use napi::bindgen_prelude::PromiseRaw;
use napi::Env;
use napi_derive::napi;
use serde_json::Value;
use tokio::sync::{watch, Mutex};

use crate::cancel::{CancelToken, Cancellation};
use crate::convert::{self, text};
use crate::errors::promise;

/// Which of the SDK's streams.
pub(crate) enum Source {
    /// Session events.
    Events(EventStream),
    /// Server notifications.
    Notifications(NotificationStream),
}

impl Source {
    async fn recv(&mut self) -> Option<Value> {
        match self {
            Source::Events(s) => s.recv().await.map(convert::event),
            Source::Notifications(s) => s.recv().await.map(convert::notification),
        }
    }

    fn missed(&self) -> u64 {
        match self {
            Source::Events(s) => s.missed(),
            Source::Notifications(s) => s.missed(),
        }
    }
}

/// Session events or server notifications, as JSON objects.
#[napi]
pub struct NativeStream {
    source: Arc<Mutex<Source>>,
    // Read without the stream's lock, which a `next()` waiting for an item holds.
    missed: Arc<AtomicU64>,
    closed: watch::Receiver<bool>,
}

impl NativeStream {
    /// `source`, ending once `closed` turns true.
    pub(crate) fn new(source: Source, closed: watch::Receiver<bool>) -> Self {
        NativeStream {
            source: Arc::new(Mutex::new(source)),
            missed: Arc::new(AtomicU64::new(0)),
            closed,
        }
    }
}

#[napi]
impl NativeStream {
    /// The next item, or `null` once the stream has ended.
    #[napi(catch_unwind)]
    pub fn next<'env>(
        &self,
        env: &'env Env,
        cancel: Option<&CancelToken>,
    ) -> napi::Result<PromiseRaw<'env, Option<String>>> {
        let source = self.source.clone();
        let missed = self.missed.clone();
        let mut closed = self.closed.clone();
        let mut cancel = Cancellation::of(cancel);
        promise(env, async move {
            let item = async {
                let mut source = source.lock().await;
                // An item longer than a JavaScript string can be is left out.
                let item = loop {
                    match source.recv().await.map(|item| text(&item)) {
                        Some(Err(_)) => continue,
                        Some(Ok(text)) => break Some(text),
                        None => break None,
                    }
                };
                missed.store(source.missed(), Ordering::Relaxed);
                item
            };
            Ok(tokio::select! {
                // What was sent before the close is still delivered.
                biased;
                item = item => item,
                // A client gone without `close()` ends its streams too.
                _ = closed.wait_for(|c| *c) => None,
                _ = cancel.fired() => None,
            })
        })
    }

    /// Items this subscriber lost because it fell more than 256 behind.
    #[napi(getter, catch_unwind)]
    pub fn missed(&self) -> f64 {
        self.missed.load(Ordering::Relaxed) as f64
    }
}
