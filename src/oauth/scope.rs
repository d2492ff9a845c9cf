//! Which scopes to ask for: the specification's selection strategy, the step-up union and
//! `offline_access`.
//!
//! Scope lists come from servers (a challenge's `scope`, a metadata document's
//! `scopes_supported`, a token response's `scope`): at most the first [`MAX_SCOPE_ITEMS`]
//! items of each are looked at, in linear time, and at most [`MAX_SCOPES`] distinct ones kept.

use std::collections::HashSet;

/// The scope that asks an authorization server for a refresh token (OpenID Connect).
pub(crate) const OFFLINE_ACCESS: &str = "offline_access";

/// The most distinct scopes kept from one list; the rest is dropped. A server asking for
/// more is not asking for anything a user could review.
pub(crate) const MAX_SCOPES: usize = 256;

/// The most items of one scope list looked at (repeats included): whatever a server sends,
/// reading it costs a bounded time.
pub(crate) const MAX_SCOPE_ITEMS: usize = 4096;

/// The scopes of a first authorization, in the specification's order of preference: the
/// `scope` of the server's `WWW-Authenticate` challenge; else every scope of the protected
/// resource metadata's `scopes_supported`; else none (the `scope` parameter is then left
/// out, and the authorization server applies its default).
pub(crate) fn select_initial_scopes(
    challenge_scope: Option<&str>,
    scopes_supported: Option<&[String]>,
) -> Vec<String> {
    match challenge_scope.map(split).filter(|s| !s.is_empty()) {
        Some(scopes) => scopes,
        None => dedup(
            scopes_supported
                .unwrap_or_default()
                .iter()
                .map(String::as_str),
        ),
    }
}

/// `scopes` with `offline_access` added when the application wants a refresh token and the
/// authorization server lists the scope in its `scopes_supported`; never otherwise. An empty
/// selection stays empty: asking for `offline_access` alone would replace the server's
/// default scopes with it.
pub(crate) fn offline_access(
    mut scopes: Vec<String>,
    wanted: bool,
    authorization_server_scopes: Option<&[String]>,
) -> Vec<String> {
    let supported = authorization_server_scopes
        .unwrap_or_default()
        .iter()
        .any(|s| s == OFFLINE_ACCESS);
    if wanted && supported && !scopes.is_empty() && !scopes.iter().any(|s| s == OFFLINE_ACCESS) {
        scopes.push(OFFLINE_ACCESS.to_owned());
    }
    scopes
}

/// The scopes of a step-up authorization: those requested before, then the challenge's
/// (SEP-2350), so a permission granted for an earlier operation is not lost.
pub(crate) fn union(previous: &[String], challenged: Option<&str>) -> Vec<String> {
    dedup(
        previous
            .iter()
            .map(String::as_str)
            .chain(challenged.unwrap_or_default().split_whitespace()),
    )
}

/// Whether `granted` includes every scope of `required` (space-separated). A `required` list
/// longer than [`MAX_SCOPE_ITEMS`] is never covered (it cannot be checked in bounded time),
/// and only the first [`MAX_SCOPE_ITEMS`] granted scopes count.
pub(crate) fn covers(granted: &[String], required: Option<&str>) -> bool {
    let granted: HashSet<&str> = granted
        .iter()
        .take(MAX_SCOPE_ITEMS)
        .map(String::as_str)
        .collect();
    let mut required = required.unwrap_or_default().split_whitespace();
    required
        .by_ref()
        .take(MAX_SCOPE_ITEMS)
        .all(|r| granted.contains(r))
        && required.next().is_none()
}

/// The scopes of a server-supplied list (`scopes_supported`, a token response's scopes),
/// without repeats or empty ones, at most [`MAX_SCOPES`].
pub(crate) fn bounded(scopes: &[String]) -> Vec<String> {
    dedup(scopes.iter().map(String::as_str))
}

/// The `scope` parameter for `scopes`: space-separated, or `None` (left out) when empty.
pub(crate) fn scope_param(scopes: &[String]) -> Option<String> {
    (!scopes.is_empty()).then(|| scopes.join(" "))
}

/// The scopes of a space-separated `scope` value, as [`bounded`] keeps them.
pub(crate) fn split(scope: &str) -> Vec<String> {
    dedup(scope.split_whitespace())
}

/// The first [`MAX_SCOPES`] distinct non-empty items among the first [`MAX_SCOPE_ITEMS`], in
/// order; linear in them (a hashed set, its keys random per process, so that chosen names
/// cannot make it slow).
fn dedup<'a>(items: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for item in items.take(MAX_SCOPE_ITEMS) {
        if out.len() == MAX_SCOPES {
            break;
        }
        if !item.is_empty() && seen.insert(item) {
            out.push(item.to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn initial_selection_order() {
        let supported = v(&["a", "b"]);
        assert_eq!(
            select_initial_scopes(Some("x  y x"), Some(&supported)),
            v(&["x", "y"])
        );
        assert_eq!(
            select_initial_scopes(None, Some(&supported)),
            v(&["a", "b"])
        );
        assert_eq!(
            select_initial_scopes(Some("  "), Some(&supported)),
            v(&["a", "b"])
        );
        assert!(select_initial_scopes(None, None).is_empty());
        assert_eq!(scope_param(&[]), None);
        assert_eq!(scope_param(&v(&["a", "b"])).as_deref(), Some("a b"));
    }

    #[test]
    fn offline_access_only_when_listed_and_wanted() {
        let with = v(&["mcp:basic", "offline_access"]);
        let without = v(&["mcp:basic"]);
        assert_eq!(
            offline_access(v(&["mcp:basic"]), true, Some(&with)),
            v(&["mcp:basic", "offline_access"])
        );
        assert_eq!(
            offline_access(v(&["mcp:basic"]), true, Some(&without)),
            v(&["mcp:basic"])
        );
        assert_eq!(
            offline_access(v(&["mcp:basic"]), true, None),
            v(&["mcp:basic"])
        );
        assert_eq!(
            offline_access(v(&["mcp:basic"]), false, Some(&with)),
            v(&["mcp:basic"])
        );
        assert!(offline_access(vec![], true, Some(&with)).is_empty());
        assert_eq!(
            offline_access(v(&["offline_access"]), true, Some(&with)),
            v(&["offline_access"])
        );
    }

    #[test]
    fn step_up_keeps_what_was_granted() {
        assert_eq!(union(&v(&["a", "b"]), Some("c a")), v(&["a", "b", "c"]));
        assert_eq!(union(&[], Some("c")), v(&["c"]));
        assert_eq!(union(&v(&["a"]), None), v(&["a"]));
        assert!(covers(&v(&["a", "b"]), Some("b a")));
        assert!(!covers(&v(&["a"]), Some("a b")));
        assert!(covers(&v(&["a"]), None));
    }

    /// 200,000 scopes (a 401's `scope`, a metadata document's `scopes_supported`) are kept
    /// to the cap, duplicates dropped, and a list too long to check covers nothing. (Before,
    /// each was compared with every one kept so far: quadratic, seconds.)
    #[test]
    fn huge_scope_lists_are_capped() {
        let distinct: Vec<String> = (0..200_000).map(|i| format!("scope:{i}")).collect();
        let header = distinct.join(" ");
        // The same scope over and over never reaches the cap: every item is looked at.
        let repeated = vec!["same".to_owned(); 200_000];
        let from_challenge = select_initial_scopes(Some(&header), None);
        let from_metadata = select_initial_scopes(None, Some(&distinct));
        let from_repeats = select_initial_scopes(None, Some(&repeated));
        let unioned = union(&from_metadata, Some(&header));
        let covered = covers(&distinct, Some(&header));
        let covered_by_what_was_asked = covers(&from_challenge, Some(&header));
        assert_eq!(from_challenge.len(), MAX_SCOPES);
        assert_eq!(from_challenge[0], "scope:0");
        assert_eq!(from_metadata, from_challenge);
        assert_eq!(from_repeats, v(&["same"]));
        assert_eq!(unioned.len(), MAX_SCOPES);
        // Too long to check in bounded time: not covered, whatever was granted.
        assert!(!covered && !covered_by_what_was_asked);
        assert!(covers(&from_challenge, Some("scope:0 scope:255")));
        assert_eq!(bounded(&repeated), v(&["same"]));
    }
}
