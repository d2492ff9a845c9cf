//! Links the addon so that its `napi_*` symbols resolve against the Node process loading it.

fn main() {
    napi_build::setup();
}
