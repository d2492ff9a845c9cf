//! [`UrlPolicy`]: which URLs the OAuth traffic of one MCP endpoint may go to. Every URL a
//! server names (the challenge's `resource_metadata`, the protected resource metadata's
//! authorization servers, an authorization server's endpoints) passes through it before it
//! is requested.

use std::net::{Ipv4Addr, Ipv6Addr};

use url::{Host, Url};

use super::OAuthError;

/// Which URLs the OAuth traffic (metadata, registration, token requests, the authorization
/// page) of one MCP endpoint may go to.
///
/// - `https` to any host but a loopback one;
/// - a loopback host (`localhost`, `*.localhost`, `127.0.0.0/8`, `::1`, and the unspecified
///   addresses, which reach this machine too), over `http` or `https`, only when the MCP
///   endpoint is itself on a loopback host, or after
///   [`UrlPolicy::dangerous_allow_loopback`]: otherwise a remote server could point the
///   client's requests at services listening on the user's machine;
/// - plain `http` to any other host only after [`UrlPolicy::dangerous_allow_plain_http`]:
///   tokens and secrets would cross the network in cleartext. The MCP endpoint itself is
///   held to the same rule ([`UrlPolicy::check_server`]).
///
/// The check is on the URL as written: a DNS name that resolves to a loopback or private
/// address is not caught here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UrlPolicy {
    /// The MCP endpoint is on a loopback host.
    server_loopback: bool,
    /// The MCP endpoint is plain `http` off loopback.
    server_plain_http: bool,
    allow_loopback: bool,
    allow_plain_http: bool,
}

impl UrlPolicy {
    /// The policy of the MCP endpoint at `server`, without any opt-in.
    pub fn for_server(server: &Url) -> Self {
        let server_loopback = is_loopback_host(server);
        UrlPolicy {
            server_loopback,
            server_plain_http: server.scheme() != "https" && !server_loopback,
            allow_loopback: false,
            allow_plain_http: false,
        }
    }

    /// Lets a remote MCP endpoint (or its authorization server) send the client to loopback
    /// URLs: for an authorization server that really runs on this machine while the MCP
    /// server does not. Every local service becomes reachable by whoever runs that server.
    #[must_use]
    pub fn dangerous_allow_loopback(mut self) -> Self {
        self.allow_loopback = true;
        self
    }

    /// Allows plain `http` off loopback, for the MCP endpoint and every OAuth URL: tokens,
    /// codes and client secrets cross the network in cleartext, readable and replaceable by
    /// anyone on the path.
    #[must_use]
    pub fn dangerous_allow_plain_http(mut self) -> Self {
        self.allow_plain_http = true;
        self
    }

    /// Whether the MCP endpoint itself may carry OAuth tokens: not when it is plain `http`
    /// off loopback, unless [`UrlPolicy::dangerous_allow_plain_http`].
    pub fn check_server(&self) -> Result<(), OAuthError> {
        if self.server_plain_http && !self.allow_plain_http {
            return Err(OAuthError::InsecureUrl(
                "the MCP endpoint is plain http off loopback: its tokens would travel in cleartext"
                    .into(),
            ));
        }
        Ok(())
    }

    /// `raw` parsed, when OAuth traffic may go there; [`OAuthError::InsecureUrl`] for another
    /// scheme or plain `http` off loopback, [`OAuthError::LoopbackUrl`] for a loopback URL
    /// named for a remote MCP endpoint. Error messages carry the URL without user info or
    /// query.
    pub fn check(&self, raw: &str) -> Result<Url, OAuthError> {
        let url = Url::parse(raw).map_err(|_| OAuthError::InsecureUrl(shown(raw)))?;
        self.check_url(&url)?;
        Ok(url)
    }

    /// [`UrlPolicy::check`] for a parsed URL.
    pub fn check_url(&self, url: &Url) -> Result<(), OAuthError> {
        let loopback = is_loopback_host(url);
        match url.scheme() {
            "https" => {}
            "http" if loopback || self.allow_plain_http => {}
            _ => return Err(OAuthError::InsecureUrl(shown(url.as_str()))),
        }
        if loopback && !(self.server_loopback || self.allow_loopback) {
            return Err(OAuthError::LoopbackUrl(shown(url.as_str())));
        }
        Ok(())
    }
}

/// Whether `url`'s host is this machine: `localhost` and its subdomains (RFC 6761), the
/// loopback addresses (an IPv4-mapped one included) and the unspecified ones (connecting to
/// `0.0.0.0` reaches a local listener).
pub(crate) fn is_loopback_host(url: &Url) -> bool {
    match url.host() {
        Some(Host::Domain(d)) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            d == "localhost" || d.ends_with(".localhost")
        }
        Some(Host::Ipv4(ip)) => local_v4(ip),
        Some(Host::Ipv6(ip)) => local_v6(ip),
        None => false,
    }
}

fn local_v4(ip: Ipv4Addr) -> bool {
    ip.is_loopback() || ip.is_unspecified()
}

fn local_v6(ip: Ipv6Addr) -> bool {
    ip.is_loopback() || ip.is_unspecified() || ip.to_ipv4_mapped().is_some_and(local_v4)
}

/// A URL as an error message may show it: scheme, host, port and path; no user info, query
/// or fragment (they may carry credentials).
pub(crate) fn shown(raw: &str) -> String {
    match Url::parse(raw) {
        Ok(url) => shown_url(&url),
        Err(_) => "<unparseable URL>".to_owned(),
    }
}

/// [`shown`] for a parsed URL.
pub(crate) fn shown_url(url: &Url) -> String {
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    match url.host_str() {
        Some(host) => format!("{}://{host}{port}{}", url.scheme(), url.path()),
        None => format!("{}:{}", url.scheme(), url.path()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(server: &str) -> UrlPolicy {
        UrlPolicy::for_server(&Url::parse(server).unwrap())
    }

    #[test]
    fn a_remote_endpoint_never_reaches_loopback() {
        let remote = policy("https://mcp.example/mcp");
        assert!(remote.check_server().is_ok());
        assert!(remote.check("https://as.example/token").is_ok());
        for local in [
            "http://127.0.0.1:8080/",
            "https://127.0.0.1/",
            "http://127.9.9.9/",
            "http://localhost/",
            "http://LOCALHOST./",
            "http://api.localhost/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://0.0.0.0:22/",
            "http://[::]/",
            // Numeric forms the URL parser normalizes to 127.0.0.1.
            "http://2130706433/",
            "http://0x7f.1/",
        ] {
            assert!(
                matches!(remote.check(local), Err(OAuthError::LoopbackUrl(_))),
                "{local}"
            );
        }
        let opted_in = remote.dangerous_allow_loopback();
        assert!(opted_in.check("http://127.0.0.1:8080/").is_ok());
    }

    #[test]
    fn a_loopback_endpoint_may_use_loopback() {
        for server in ["http://127.0.0.1:3000/mcp", "http://localhost:3000/mcp"] {
            let local = policy(server);
            assert!(local.check_server().is_ok());
            assert!(local.check("http://localhost:9/token").is_ok());
            assert!(local.check("https://as.example/").is_ok());
            assert!(matches!(
                local.check("http://as.example/"),
                Err(OAuthError::InsecureUrl(_))
            ));
        }
    }

    #[test]
    fn plain_http_only_when_opted_in() {
        let plain = policy("http://mcp.example/mcp");
        assert!(matches!(
            plain.check_server(),
            Err(OAuthError::InsecureUrl(_))
        ));
        assert!(plain.check("http://as.example/").is_err());
        let opted_in = plain.dangerous_allow_plain_http();
        assert!(opted_in.check_server().is_ok());
        assert!(opted_in.check("http://as.example/").is_ok());
        // Plain http is not loopback: that needs its own opt-in.
        assert!(matches!(
            opted_in.check("http://127.0.0.1/"),
            Err(OAuthError::LoopbackUrl(_))
        ));
        for other in ["ftp://as.example/", "file:///etc/passwd", "not a url"] {
            assert!(
                matches!(opted_in.check(other), Err(OAuthError::InsecureUrl(_))),
                "{other}"
            );
        }
    }

    #[test]
    fn errors_show_no_credentials() {
        let remote = policy("https://mcp.example/mcp");
        let err = remote
            .check("http://user:hunter2@127.0.0.1/x?token=abc")
            .unwrap_err();
        let text = err.to_string();
        assert!(!text.contains("hunter2") && !text.contains("abc"), "{text}");
        assert!(text.contains("http://127.0.0.1/x"), "{text}");
    }
}
