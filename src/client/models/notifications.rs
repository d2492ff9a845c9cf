//! The typed view of server notifications.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::logging::LoggingMessage;

/// A server notification, typed. Obtained from
/// [`ServerNotification::typed`](crate::ServerNotification::typed); the call it is about, when
/// it has one, is [`ServerNotification::call`](crate::ServerNotification::call).
///
/// A notification whose params do not match its method's shape is [`TypedNotification::Other`]:
/// it is never dropped.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TypedNotification {
    /// `notifications/progress`.
    Progress(Progress),
    /// `notifications/message`: a log message.
    LoggingMessage(LoggingMessage),
    /// `notifications/resources/updated`: a subscribed resource changed; read it again.
    ResourceUpdated {
        /// The resource's URI.
        uri: String,
    },
    /// `notifications/{tools,resources,prompts}/list_changed`: list it again.
    ListChanged(ListKind),
    /// `notifications/cancelled`: the server cancels a request it sent (the client stops the
    /// handler, see [`RequestContext`](crate::RequestContext)) or reports one it gave up.
    Cancelled(Cancelled),
    /// Any other notification, or one whose params do not match its method.
    Other {
        /// The method.
        method: String,
        /// The params, as sent.
        params: Option<Value>,
    },
}

/// Which list changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ListKind {
    /// `tools/list`.
    Tools,
    /// `resources/list` (and the templates).
    Resources,
    /// `prompts/list`.
    Prompts,
}

/// Progress of a request (`notifications/progress`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Progress {
    /// The token the request carried in `_meta.progressToken`.
    pub progress_token: Value,
    /// Progress so far; increases with every notification.
    pub progress: f64,
    /// The total, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// A human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Members this version does not model, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A cancellation (`notifications/cancelled`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Cancelled {
    /// The id of the cancelled request.
    pub request_id: Value,
    /// Why, if said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Members this version does not model, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl TypedNotification {
    /// Types a notification by its method; params that do not fit make it
    /// [`TypedNotification::Other`].
    pub fn parse(method: &str, params: Option<&Value>) -> Self {
        let typed = match method {
            "notifications/progress" => params
                .and_then(|p| Progress::deserialize(p).ok())
                .map(TypedNotification::Progress),
            "notifications/message" => params
                .and_then(|p| LoggingMessage::deserialize(p).ok())
                .map(TypedNotification::LoggingMessage),
            "notifications/resources/updated" => params
                .and_then(|p| p.get("uri"))
                .and_then(Value::as_str)
                .map(|uri| TypedNotification::ResourceUpdated {
                    uri: uri.to_owned(),
                }),
            "notifications/tools/list_changed" => {
                Some(TypedNotification::ListChanged(ListKind::Tools))
            }
            "notifications/resources/list_changed" => {
                Some(TypedNotification::ListChanged(ListKind::Resources))
            }
            "notifications/prompts/list_changed" => {
                Some(TypedNotification::ListChanged(ListKind::Prompts))
            }
            "notifications/cancelled" => params
                .and_then(|p| Cancelled::deserialize(p).ok())
                .map(TypedNotification::Cancelled),
            _ => None,
        };
        typed.unwrap_or_else(|| TypedNotification::Other {
            method: method.to_owned(),
            params: params.cloned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::models::LoggingLevel;
    use serde_json::json;

    #[test]
    fn each_method_is_typed_and_bad_params_fall_back() {
        let p = json!({"progressToken": "t", "progress": 2, "total": 5, "message": "m"});
        match TypedNotification::parse("notifications/progress", Some(&p)) {
            TypedNotification::Progress(p) => {
                assert_eq!(p.progress_token, json!("t"));
                assert_eq!(p.progress, 2.0);
                assert_eq!(p.total, Some(5.0));
            }
            other => panic!("{other:?}"),
        }
        let m = json!({"level": "warning", "logger": "db", "data": {"x": 1}});
        assert!(matches!(
            TypedNotification::parse("notifications/message", Some(&m)),
            TypedNotification::LoggingMessage(LoggingMessage {
                level: LoggingLevel::Warning,
                ..
            })
        ));
        assert_eq!(
            TypedNotification::parse("notifications/tools/list_changed", None),
            TypedNotification::ListChanged(ListKind::Tools)
        );
        assert_eq!(
            TypedNotification::parse(
                "notifications/resources/updated",
                Some(&json!({"uri": "a:b"}))
            ),
            TypedNotification::ResourceUpdated { uri: "a:b".into() }
        );
        let c = json!({"requestId": 7, "reason": "late"});
        assert!(matches!(
            TypedNotification::parse("notifications/cancelled", Some(&c)),
            TypedNotification::Cancelled(Cancelled { request_id, .. }) if request_id == json!(7)
        ));
        let bad = json!({"level": "loud", "data": 1});
        assert!(matches!(
            TypedNotification::parse("notifications/message", Some(&bad)),
            TypedNotification::Other { .. }
        ));
        assert!(matches!(
            TypedNotification::parse("notifications/progress", None),
            TypedNotification::Other { .. }
        ));
    }
}
