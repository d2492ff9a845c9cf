//! Which scopes to ask for: the specification's selection strategy, the step-up union and
//! `offline_access`.

/// The scope that asks an authorization server for a refresh token (OpenID Connect).
pub const OFFLINE_ACCESS: &str = "offline_access";

/// The scopes of a first authorization, in the specification's order of preference: the
/// `scope` of the server's `WWW-Authenticate` challenge; else every scope of the protected
/// resource metadata's `scopes_supported`; else none (the `scope` parameter is then left
/// out, and the authorization server applies its default).
pub fn select_initial_scopes(
    challenge_scope: Option<&str>,
    scopes_supported: Option<&[String]>,
) -> Vec<String> {
    match challenge_scope.map(split).filter(|s| !s.is_empty()) {
        Some(scopes) => scopes,
        None => dedup(scopes_supported.unwrap_or_default().iter().cloned()),
    }
}

/// `scopes` with `offline_access` added when the application wants a refresh token and the
/// authorization server lists the scope in its `scopes_supported`; never otherwise. An empty
/// selection stays empty: asking for `offline_access` alone would replace the server's
/// default scopes with it.
pub fn offline_access(
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
pub fn union(previous: &[String], challenged: Option<&str>) -> Vec<String> {
    dedup(
        previous
            .iter()
            .cloned()
            .chain(challenged.map(split).unwrap_or_default()),
    )
}

/// Whether `granted` includes every scope of `required` (space-separated).
pub fn covers(granted: &[String], required: Option<&str>) -> bool {
    split(required.unwrap_or_default())
        .iter()
        .all(|r| granted.iter().any(|g| g == r))
}

/// The `scope` parameter for `scopes`: space-separated, or `None` (left out) when empty.
pub fn scope_param(scopes: &[String]) -> Option<String> {
    (!scopes.is_empty()).then(|| scopes.join(" "))
}

pub(crate) fn split(scope: &str) -> Vec<String> {
    dedup(scope.split_whitespace().map(str::to_owned))
}

fn dedup(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in items {
        if !item.is_empty() && !out.contains(&item) {
            out.push(item);
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
}
