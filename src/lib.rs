//! mcp-resume: a resume-aware Model Context Protocol client for the Streamable HTTP transport.
#![warn(missing_docs)]

pub mod client;
pub mod error;
pub mod ids;
pub mod policy;
pub mod proto;
pub mod sse;

pub use error::{Error, ErrorKind, Result, RpcError};
