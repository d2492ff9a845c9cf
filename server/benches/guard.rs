//! Placeholder until the benchmarks land.
fn main() {}
