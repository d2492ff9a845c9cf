//! The seed scenario per preset (`presets/cases.rs`), with the cluster's shared store in
//! memory.

use crate::common::cluster::Backend;

const BACKEND: Backend = Backend::Memory;

mod cases;
