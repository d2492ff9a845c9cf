//! The tokio/reqwest driver and the public async API. (In progress.)
