//! The crate's one error type.

use std::borrow::Cow;
use std::fmt;

/// What went wrong, stable across releases (new kinds may be added).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The store could not be reached or did not answer in time. Keyed calls are refused
    /// with a retryable error meanwhile; unkeyed traffic passes.
    StoreUnavailable,
    /// The store answered something this crate did not write (a malformed record).
    StoreData,
    /// The store is full (the in-memory store's bound): keyed calls are refused, retryably.
    StoreFull,
    /// A setting is invalid (a bad URL, an instance id that is not visible ASCII).
    InvalidConfig,
}

/// An error of this crate: a [`ErrorKind`] and a message; `source()` may hold the cause
/// (not part of the API).
pub struct Error {
    kind: ErrorKind,
    message: Cow<'static, str>,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn with_source(
        kind: ErrorKind,
        message: impl Into<Cow<'static, str>>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            kind,
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }

    /// For [`Store`](crate::Store) implementations: the store could not be reached (the
    /// guard refuses keyed calls retryably meanwhile).
    pub fn store_unavailable(source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::with_source(
            ErrorKind::StoreUnavailable,
            "the store is unavailable",
            source,
        )
    }

    /// For [`Store`](crate::Store) implementations: the store holds something it cannot read
    /// back.
    pub fn store_data(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::StoreData, message)
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind).field("message", &self.message);
        if let Some(s) = &self.source {
            d.field("source", s);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
