//! The typed methods of [`Client`]: listing (whole lists and single pages), resources,
//! prompts, completion and logging.

use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

use super::client::Client;
use super::models::{
    self, CompleteRequest, CompleteResult, Completion, GetPromptResult, LoggingLevel, Page, Prompt,
    ReadResourceResult, Resource, ResourceTemplate,
};
use super::request::Request;
use super::results::{protocol, Tool, MAX_CONTENT_ITEMS};
use crate::error::{Error, ErrorKind};

/// Bound on the pages of one list, so a server that keeps sending cursors cannot loop the
/// client forever.
pub const MAX_LIST_PAGES: usize = 1000;

/// A `*/list` method: its name, the member holding its items, and how an item is read.
struct ListMethod<T> {
    method: &'static str,
    member: &'static str,
    read: fn(Value) -> Result<T, Error>,
}

fn read_model<T: DeserializeOwned>(value: Value) -> Result<T, Error> {
    models::from_value(value, "list item")
}

const TOOLS: ListMethod<Tool> = ListMethod {
    method: "tools/list",
    member: "tools",
    read: Tool::from_value,
};
const RESOURCES: ListMethod<Resource> = ListMethod {
    method: "resources/list",
    member: "resources",
    read: read_model::<Resource>,
};
const RESOURCE_TEMPLATES: ListMethod<ResourceTemplate> = ListMethod {
    method: "resources/templates/list",
    member: "resourceTemplates",
    read: read_model::<ResourceTemplate>,
};
const PROMPTS: ListMethod<Prompt> = ListMethod {
    method: "prompts/list",
    member: "prompts",
    read: read_model::<Prompt>,
};

impl Client {
    /// Lists the server's tools (`tools/list`, following `nextCursor` to the end, at most
    /// [`MAX_LIST_PAGES`] pages). The pages together may hold at most [`MAX_CONTENT_ITEMS`]
    /// items, and as much JSON (each page's `result` measured as written compactly) as one
    /// response may carry ([`ClientBuilder::max_body_size`](crate::ClientBuilder::max_body_size)
    /// or [`max_event_size`](crate::ClientBuilder::max_event_size), whichever is larger: 16 MiB
    /// by default): a list is held to what one result may be, however many pages a server
    /// cuts it into. A longer list is an [`ErrorKind::Protocol`](crate::ErrorKind::Protocol)
    /// error (read it with [`Client::list_tools_page`]). The whole list, every page of it,
    /// takes at most the client's call timeout
    /// ([`ClientBuilder::call_timeout`](crate::ClientBuilder::call_timeout)), as one call does:
    /// past it, [`ErrorKind::Timeout`](crate::ErrorKind::Timeout).
    pub async fn list_tools(&self) -> Result<Vec<Tool>, Error> {
        self.list_all(&TOOLS).await
    }

    /// One page of `tools/list`: the first with `None`, then each
    /// [`Page::next_cursor`] in turn.
    pub async fn list_tools_page(&self, cursor: Option<&str>) -> Result<Page<Tool>, Error> {
        self.list_page(&TOOLS, cursor, None).await
    }

    /// Lists the server's resources (`resources/list`, every page, within the bounds of
    /// [`Client::list_tools`]).
    pub async fn list_resources(&self) -> Result<Vec<Resource>, Error> {
        self.list_all(&RESOURCES).await
    }

    /// One page of `resources/list`.
    pub async fn list_resources_page(&self, cursor: Option<&str>) -> Result<Page<Resource>, Error> {
        self.list_page(&RESOURCES, cursor, None).await
    }

    /// Lists the server's resource templates (`resources/templates/list`, every page, within
    /// the bounds of [`Client::list_tools`]).
    pub async fn list_resource_templates(&self) -> Result<Vec<ResourceTemplate>, Error> {
        self.list_all(&RESOURCE_TEMPLATES).await
    }

    /// One page of `resources/templates/list`.
    pub async fn list_resource_templates_page(
        &self,
        cursor: Option<&str>,
    ) -> Result<Page<ResourceTemplate>, Error> {
        self.list_page(&RESOURCE_TEMPLATES, cursor, None).await
    }

    /// Reads a resource (`resources/read`).
    pub async fn read_resource(&self, uri: &str) -> Result<ReadResourceResult, Error> {
        self.request(Request::new("resources/read", json!({ "uri": uri })))
            .await
    }

    /// Subscribes to a resource's changes (`resources/subscribe`): each arrives as
    /// [`TypedNotification::ResourceUpdated`](models::TypedNotification::ResourceUpdated) on
    /// [`Client::notifications`]. A subscription belongs to the session: after a
    /// re-initialization ([`SessionEvent::Reinitialized`](crate::SessionEvent::Reinitialized))
    /// subscribe again.
    pub async fn subscribe_resource(&self, uri: &str) -> Result<(), Error> {
        self.request_ok(Request::new("resources/subscribe", json!({ "uri": uri })))
            .await
    }

    /// Ends a subscription (`resources/unsubscribe`).
    pub async fn unsubscribe_resource(&self, uri: &str) -> Result<(), Error> {
        self.request_ok(Request::new("resources/unsubscribe", json!({ "uri": uri })))
            .await
    }

    /// Lists the server's prompts (`prompts/list`, every page, within the bounds of
    /// [`Client::list_tools`]).
    pub async fn list_prompts(&self) -> Result<Vec<Prompt>, Error> {
        self.list_all(&PROMPTS).await
    }

    /// One page of `prompts/list`.
    pub async fn list_prompts_page(&self, cursor: Option<&str>) -> Result<Page<Prompt>, Error> {
        self.list_page(&PROMPTS, cursor, None).await
    }

    /// Renders a prompt (`prompts/get`) with its arguments (name to string value).
    pub async fn get_prompt<I, K, V>(
        &self,
        name: &str,
        arguments: I,
    ) -> Result<GetPromptResult, Error>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let arguments: Map<String, Value> = arguments
            .into_iter()
            .map(|(k, v)| (k.into(), Value::String(v.into())))
            .collect();
        let mut params = json!({ "name": name });
        if !arguments.is_empty() {
            params["arguments"] = Value::Object(arguments);
        }
        self.request(Request::new("prompts/get", params)).await
    }

    /// Asks for completions of a prompt argument or a resource template variable
    /// (`completion/complete`).
    pub async fn complete(&self, request: CompleteRequest) -> Result<Completion, Error> {
        let result: CompleteResult = self
            .request(Request::new("completion/complete", request.to_params()))
            .await?;
        Ok(result.completion)
    }

    /// Sets the least severe log level the server sends (`logging/setLevel`); the messages
    /// arrive as [`TypedNotification::LoggingMessage`](models::TypedNotification::LoggingMessage)
    /// on [`Client::notifications`]. The level belongs to the session: after a
    /// re-initialization set it again.
    pub async fn set_logging_level(&self, level: LoggingLevel) -> Result<(), Error> {
        self.request_ok(Request::new(
            "logging/setLevel",
            json!({ "level": level.as_str() }),
        ))
        .await
    }

    async fn list_all<T>(&self, list: &ListMethod<T>) -> Result<Vec<T>, Error> {
        // One deadline for the whole list, as for any call: a server answering each page
        // within the call timeout, and naming a next one, would otherwise hold the list for
        // up to a call timeout per page, a thousand of them.
        let timeout = self.call_timeout();
        let deadline = tokio::time::Instant::now().checked_add(timeout);
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        // A server naming a cursor again (`A`, `B`, `A`, …) would loop: its list ends there.
        let mut seen = std::collections::HashSet::new();
        let mut bytes = 0usize;
        let max_bytes = self.max_response_size();
        for _ in 0..MAX_LIST_PAGES {
            let left = deadline.map_or(timeout, |d| {
                d.saturating_duration_since(tokio::time::Instant::now())
            });
            if left.is_zero() {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!("{} did not end within {timeout:?}", list.method),
                )
                .with_may_have_run());
            }
            let page = self.list_page(list, cursor.as_deref(), Some(left)).await?;
            // Each page is within the body bound; without a bound on their sum, 1,000 of
            // them would all be held before the list ends.
            bytes = bytes.saturating_add(json_len(&page.raw));
            let passed = if items.len() + page.items.len() > MAX_CONTENT_ITEMS {
                Some(format!("{MAX_CONTENT_ITEMS} items"))
            } else if bytes > max_bytes {
                Some(format!("{max_bytes} bytes of JSON"))
            } else {
                None
            };
            if let Some(bound) = passed {
                return Err(protocol(format!(
                    "{} holds more than {bound} in all its pages",
                    list.method
                ))
                .with_may_have_run());
            }
            items.extend(page.items);
            match page.next_cursor {
                Some(next) if seen.insert(next.clone()) => cursor = Some(next),
                _ => return Ok(items),
            }
        }
        Err(protocol(format!(
            "{} did not end after {MAX_LIST_PAGES} pages",
            list.method
        )))
    }

    /// One page of `list`, within `timeout` when given (else the call timeout).
    async fn list_page<T>(
        &self,
        list: &ListMethod<T>,
        cursor: Option<&str>,
        timeout: Option<std::time::Duration>,
    ) -> Result<Page<T>, Error> {
        let params = match cursor {
            Some(cursor) => json!({ "cursor": cursor }),
            None => json!({}),
        };
        let request = Request::new(list.method, params);
        let request = match timeout {
            Some(timeout) => request.timeout(timeout),
            None => request,
        };
        let raw: Value = self.request(request).await?;
        read_page(list, raw)
    }
}

/// The length of `value` written as compact JSON, without writing it anywhere.
fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // A `Value` always serializes (its keys are strings), and counting never fails.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Reads one page of `list`'s result, with at most [`MAX_CONTENT_ITEMS`] items: a typed item
/// can take a hundred times the bytes it took in the body. A page that cannot be read is
/// still the server's answer: the request ran.
fn read_page<T>(list: &ListMethod<T>, raw: Value) -> Result<Page<T>, Error> {
    let values = match raw.get(list.member).and_then(Value::as_array) {
        None => {
            return Err(protocol(format!(
                "{} result lacks a `{}` array",
                list.method, list.member
            ))
            .with_may_have_run())
        }
        Some(values) if values.len() > MAX_CONTENT_ITEMS => {
            return Err(protocol(format!(
                "{} result has {} {}, more than {MAX_CONTENT_ITEMS}",
                list.method,
                values.len(),
                list.member
            ))
            .with_may_have_run())
        }
        Some(values) => values,
    };
    let items = values
        .iter()
        .cloned()
        .map(list.read)
        .collect::<Result<Vec<T>, Error>>()
        .map_err(Error::with_may_have_run)?;
    let next_cursor = raw
        .get("nextCursor")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(Page {
        items,
        next_cursor,
        raw,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // `{"name":""}` is 12 bytes in the body; a typed tool or prompt is a hundred times that.
    #[test]
    fn a_page_of_more_items_than_the_bound_is_refused() {
        let page = |member: &str, n: usize| json!({ member: vec![json!({"name": ""}); n] });
        let read = read_page(&TOOLS, page("tools", MAX_CONTENT_ITEMS)).unwrap();
        assert_eq!(read.items.len(), MAX_CONTENT_ITEMS);
        for error in [
            read_page(&TOOLS, page("tools", MAX_CONTENT_ITEMS + 1)).map(drop),
            read_page(&PROMPTS, page("prompts", MAX_CONTENT_ITEMS + 1)).map(drop),
        ] {
            let error = error.unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Protocol);
            assert!(error.message().contains("more than 100000"), "{error}");
            // The server answered: the page it was asked for was read.
            assert!(error.may_have_run(), "{error}");
        }
    }
}
