//! Every test of `presets/cases.rs` again, with the cluster's shared store in Redis (a
//! `redis-server` of its own per cluster): the presets behave the same on both stores.

use crate::common::cluster::Backend;

const BACKEND: Backend = Backend::Redis;

// The same cases as `presets.rs` on purpose, compiled again against this module's store.
#[allow(clippy::duplicate_mod)]
#[path = "presets/cases.rs"]
mod cases;
