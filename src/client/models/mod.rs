//! Typed models of the MCP 2025-11-25 client surface: what the typed methods of
//! [`Client`](super::Client) return, what the server-request handlers receive and answer,
//! and the typed view of server notifications.
//!
//! Two rules hold for every type here, so that a client built today does not lose what a newer
//! server sends:
//! - **Unknown fields are kept.** Every object type has an `extra` map holding the members
//!   this version does not model; serializing the value writes them back unchanged.
//! - **JSON Schemas are kept verbatim** as [`serde_json::Value`]: no `$ref` is resolved, no
//!   keyword is dropped or rewritten, whatever draft (2020-12 or older) the server uses.
//!
//! Types the server sends are `#[non_exhaustive]`: read their fields, match on them with
//! `..`. Types the application builds (answers to server requests, completion references)
//! have constructors.

mod common;
mod completion;
mod content;
mod elicitation;
mod logging;
mod notifications;
mod prompts;
mod resources;
mod roots;
mod sampling;

pub use common::{Annotations, OneOrMany, Page, Role};
pub use completion::{CompleteRequest, CompleteResult, Completion, CompletionReference};
pub use content::{
    AudioContent, Content, EmbeddedResource, ImageContent, ResourceContents, ResourceLink,
    TextContent,
};
pub use elicitation::{ElicitAction, ElicitRequest, ElicitResult};
pub use logging::{LoggingLevel, LoggingMessage};
pub use notifications::{Cancelled, ListKind, Progress, TypedNotification};
pub use prompts::{GetPromptResult, Prompt, PromptArgument, PromptMessage};
pub use resources::{ReadResourceResult, Resource, ResourceTemplate};
pub use roots::{ListRootsResult, Root};
pub use sampling::{CreateMessageRequest, CreateMessageResult, SamplingContent, SamplingMessage};

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{Error, ErrorKind};

/// Reads a server's JSON into a model; a mismatch is the server breaking the protocol.
pub(crate) fn from_value<T: DeserializeOwned>(value: Value, what: &str) -> Result<T, Error> {
    serde_json::from_value(value).map_err(|e| {
        // What did not fit (a bound passed, a member missing) is worth reading; a value
        // quoted from the server is cut, since it can be as large as the message.
        let mut why = e.to_string();
        if why.len() > WHY_LEN {
            let end = (0..=WHY_LEN).rev().find(|&i| why.is_char_boundary(i));
            why.truncate(end.unwrap_or(0));
            why.push('…');
        }
        Error::with_source(ErrorKind::Protocol, format!("malformed {what}: {why}"), e)
    })
}

/// The most bytes of a reading error kept in a [`from_value`] error's message.
const WHY_LEN: usize = 200;

/// Reads a request's `result` into a model. A result that does not fit is still the server's
/// answer: the request ran.
pub(crate) fn from_result<T: DeserializeOwned>(value: Value) -> Result<T, Error> {
    from_value(value, "result").map_err(Error::with_may_have_run)
}
