//! The mock cluster over raw HTTP, checked against its oracle: the presets on both stores,
//! bad input, the 2026-07-28 era, killed instances, what `wait_idle` waits for, the store's
//! own suite, the binary, real parts (redis-server, instance processes, nginx) and the
//! TypeScript SDK's client. One test binary, so that the cluster and its test helpers are
//! compiled and linked once.

mod common;

mod bad_input;
mod binary;
mod guard_answers;
mod idle;
mod kill_keys;
mod lost_claims;
mod lost_outcomes;
mod modern;
mod presets;
mod presets_on_redis;
mod real_parts;
mod store;
mod ts_client;
