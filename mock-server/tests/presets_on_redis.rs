//! Every test of `presets.rs` again, with the cluster's shared store in Redis (a
//! `redis-server` of its own per cluster): the presets behave the same on both stores.

#[path = "presets.rs"]
mod presets;

const BACKEND: presets::common::cluster::Backend = presets::common::cluster::Backend::Redis;
