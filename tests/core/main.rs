//! The sans-IO core without a network: the recovery decision row by row, the session's
//! state machine, the SSE decoder against a reference, the era probe's table, the simulator's
//! fault schedules and the property tests. One test binary, so that the shared simulator and
//! the crate's generic code are compiled and linked once.

mod sim;

mod checkpoints;
mod decide_table;
mod hardening;
mod listen_stopped;
mod modern_props;
mod probe_table;
mod public_api;
mod sans_io;
mod session_props;
mod simulator;
mod sse_differential;
mod sse_props;
