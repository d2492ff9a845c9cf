//! Resume-safety guard for MCP Streamable HTTP servers.

pub mod guard;
pub mod ids;
pub mod wire;
