//! One delivery attempt: the signed POST, through a client that follows no redirect,
//! uses no proxy, connects only where [`crate::target`] allows, gives up after the
//! webhook's `timeout_ms`, and reads at most [`MAX_ANSWER_BYTES`] of the answer.

use std::time::Duration;

use ureq::unversioned::transport::DefaultConnector;

use crate::config::WebhookConfig;
use crate::target::GuardedResolver;

/// Most bytes of a receiver's answer read (then the connection is dropped).
pub const MAX_ANSWER_BYTES: u64 = 64 * 1024;

/// How long connecting may take at most (within `timeout_ms`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What an attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// An answer with this status.
    Answered(u16),
    /// No answer: why (no connection, refused address, timeout, broken answer).
    Failed(String),
}

impl Attempt {
    pub fn delivered(&self) -> bool {
        matches!(self, Attempt::Answered(status) if (200..300).contains(status))
    }

    /// Whether the receiver as a whole seems down or overloaded (rather than refusing
    /// this one event): later deliveries wait too.
    pub fn endpoint_trouble(&self) -> bool {
        match self {
            Attempt::Failed(_) => true,
            Attempt::Answered(status) => matches!(status, 429 | 502 | 503 | 504),
        }
    }
}

/// The HTTP client of one webhook.
pub fn agent(config: &WebhookConfig) -> ureq::Agent {
    let timeout = Duration::from_millis(config.timeout_ms);
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::PlatformVerifier)
        .build();
    let settings = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .timeout_connect(Some(CONNECT_TIMEOUT.min(timeout)))
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(None)
        .https_only(!config.host_allowed())
        .max_idle_connections_per_host(config.concurrency.max(1))
        .user_agent(concat!(
            "mcp-taskd/",
            env!("CARGO_PKG_VERSION"),
            " (webhooks)"
        ))
        .tls_config(tls)
        .build();
    ureq::Agent::with_parts(
        settings,
        DefaultConnector::default(),
        GuardedResolver {
            allow_any_address: config.host_allowed(),
        },
    )
}

/// POSTs `body` to the webhook, signed by `signature`, as `id` at `timestamp`.
pub fn post(
    agent: &ureq::Agent,
    url: &str,
    id: &str,
    timestamp: i64,
    signature: &str,
    body: &[u8],
) -> Attempt {
    let sent = agent
        .post(url)
        .header("content-type", "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .send(body);
    match sent {
        Ok(mut response) => {
            let status = response.status().as_u16();
            // Read (bounded) so that the connection can serve the next delivery.
            let _ = response
                .body_mut()
                .with_config()
                .limit(MAX_ANSWER_BYTES)
                .read_to_vec();
            Attempt::Answered(status)
        }
        Err(error) => Attempt::Failed(error.to_string()),
    }
}
