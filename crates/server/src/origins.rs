//! DNS-rebinding protection: which `Host` and `Origin` values a request may carry
//! (loopback ones, and `server.allowed_hosts` / `server.allowed_origins`). Built with the
//! live settings, checked by the transport before anything else.

const LOOPBACK_HOSTS: &[&str] = &["localhost", "127.0.0.1", "[::1]", "::1"];

/// Splits `host[:port]` (with bracketed IPv6) and returns the lowercase host.
fn host_part(authority: &str) -> String {
    let authority = authority.trim().to_ascii_lowercase();
    if authority.starts_with('[') {
        return match authority.find(']') {
            Some(end) => authority[..=end].to_owned(),
            None => authority,
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host.to_owned(),
        _ => authority,
    }
}

/// Which `Host` and `Origin` values a request may carry.
pub struct OriginPolicy {
    /// Lowercase host names (no port) besides loopback.
    pub hosts: Vec<String>,
    /// Exact origins (`scheme://host[:port]`) besides loopback ones.
    pub origins: Vec<String>,
}

impl OriginPolicy {
    pub fn new(hosts: &[String], origins: &[String]) -> OriginPolicy {
        OriginPolicy {
            hosts: hosts.iter().map(|h| host_part(h)).collect(),
            origins: origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
        }
    }

    fn host_allowed(&self, authority: &str) -> bool {
        let host = host_part(authority);
        LOOPBACK_HOSTS.contains(&host.as_str()) || self.hosts.contains(&host)
    }

    /// `true` when `Host` and (if present) `Origin` are acceptable.
    pub fn allows(&self, host: Option<&str>, origin: Option<&str>) -> bool {
        if let Some(host) = host {
            if !self.host_allowed(host) {
                return false;
            }
        }
        match origin {
            None => true,
            Some(origin) => {
                let origin = origin.trim_end_matches('/').to_ascii_lowercase();
                if self.origins.contains(&origin) {
                    return true;
                }
                match origin.split_once("://") {
                    Some(("http" | "https", authority)) => {
                        LOOPBACK_HOSTS.contains(&host_part(authority).as_str())
                    }
                    _ => false,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_and_configured_hosts() {
        let policy = OriginPolicy::new(&["mcp.example.com".into()], &[]);
        assert!(policy.allows(Some("127.0.0.1:8080"), Some("http://localhost:8080")));
        assert!(policy.allows(Some("[::1]:1"), None));
        assert!(policy.allows(Some("MCP.example.com:443"), None));
        assert!(!policy.allows(Some("evil.example.com"), None));
        assert!(!policy.allows(Some("localhost"), Some("http://evil.example.com")));
        assert!(!policy.allows(Some("localhost"), Some("null")));
    }
}
