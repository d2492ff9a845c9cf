//! Resume-safety guard for MCP Streamable HTTP servers.

mod error;
pub mod guard;
pub mod ids;
pub mod store;
pub mod wire;

pub use crate::error::{Error, ErrorKind};
pub use crate::store::{MemoryStore, Store};
#[cfg(feature = "redis")]
pub use crate::store::{RedisOptions, RedisStore};
