//! `mock-cluster`: runs the mock cluster until Ctrl-C.
fn main() {}
