//! The metric instruments: the conventions' two duration histograms, and the recovery
//! counters and histogram this crate proposes ([`names`](super::names)).

use opentelemetry::metrics::{Counter, Histogram, Meter};

use super::names;

/// One client's instruments, made once.
pub(super) struct Instruments {
    pub(super) operation_duration: Histogram<f64>,
    pub(super) session_duration: Histogram<f64>,
    pub(super) resumes: Counter<u64>,
    pub(super) resume_rejections: Counter<u64>,
    pub(super) reinitializations: Counter<u64>,
    pub(super) resends: Counter<u64>,
    pub(super) outcome_unknown: Counter<u64>,
    pub(super) context_mismatches: Counter<u64>,
    pub(super) recovery_duration: Histogram<f64>,
}

impl Instruments {
    pub(super) fn new(meter: &Meter) -> Self {
        let counter = |name: &'static str, unit: &'static str, description: &'static str| {
            meter
                .u64_counter(name)
                .with_unit(unit)
                .with_description(description)
                .build()
        };
        Instruments {
            operation_duration: meter
                .f64_histogram(names::MCP_CLIENT_OPERATION_DURATION)
                .with_unit("s")
                .with_description(
                    "The duration of the MCP request or notification as observed on the sender \
                     from the time it was sent until the response or ack is received.",
                )
                .with_boundaries(names::DURATION_BUCKETS.to_vec())
                .build(),
            session_duration: meter
                .f64_histogram(names::MCP_CLIENT_SESSION_DURATION)
                .with_unit("s")
                .with_description("The duration of the MCP session as observed on the MCP client.")
                .with_boundaries(names::DURATION_BUCKETS.to_vec())
                .build(),
            resumes: counter(
                names::METRIC_RESUMES,
                "{resume}",
                "Streams resumed with Last-Event-ID.",
            ),
            resume_rejections: counter(
                names::METRIC_RESUME_REJECTIONS,
                "{rejection}",
                "Resumes the server rejected.",
            ),
            reinitializations: counter(
                names::METRIC_REINITIALIZATIONS,
                "{reinitialization}",
                "Sessions re-initialized.",
            ),
            resends: counter(
                names::METRIC_RESENDS,
                "{request}",
                "Requests re-sent after an interruption (new JSON-RPC id, same idempotency key).",
            ),
            outcome_unknown: counter(
                names::METRIC_OUTCOME_UNKNOWN,
                "{request}",
                "Requests interrupted that could not be re-sent safely: they may or may not have run.",
            ),
            context_mismatches: counter(
                names::METRIC_CONTEXT_MISMATCHES,
                "{response}",
                "Answers produced under another negotiated context than the session's.",
            ),
            recovery_duration: meter
                .f64_histogram(names::METRIC_RECOVERY_DURATION)
                .with_unit("s")
                .with_description(
                    "From a stream's cut to the first byte of the stream that resumed it.",
                )
                .with_boundaries(names::RECOVERY_BUCKETS.to_vec())
                .build(),
        }
    }
}
