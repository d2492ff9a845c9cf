//! The guard core's rules, with no I/O: row tables (one named test per rule, as the client's
//! `decide` table) and property tests over interleavings of two claims of one key.

mod harness;
mod hostile;
mod keys;
mod props;
mod resume;
mod session;
