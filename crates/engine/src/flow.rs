//! Flow control (issue 48): concurrency keys, rate limits and paused tools, as the
//! engine hands them to the store and shows them to clients. A tool declares them
//! ([`taskd_tools::flow`]); the task stores enforce them inside their own transactions,
//! so that they hold on every PostgreSQL node at once:
//!
//! - **Concurrency keys.** A task of a tool with a `concurrency_key` carries a [`Gate`]:
//!   the tool and the key's value, and the gate's limit. Its job is *admitted* (it may
//!   be claimed) while fewer than `limit` jobs of the gate are admitted and no older job
//!   of the gate waits; otherwise it is *held*: it has no turn, claims never see it, it
//!   takes no worker. When an admitted job leaves (its task ends, or waits for input)
//!   or an inline call lets its place go, the oldest held jobs are admitted, in order of
//!   creation. Store triggers do that, whatever path ends the job (schema.sql,
//!   migrations 15 and 20). An inline call takes a place too (a *hold*), waiting for
//!   one up to its tool's timeout.
//! - **Rates.** A claim takes a token from the tool's bucket (or the key's: see
//!   [`RateLimit`]) for each attempt it starts, retries included; a job that finds the
//!   bucket empty stays queued (a tool's: the tool is passed over until the next token;
//!   a key's: the job waits like a retry waits for its backoff). Inline calls take
//!   tokens too, waiting for one up to their timeout.
//! - **Pauses.** A paused tool's queued jobs are passed over by every claim; running
//!   attempts finish; new calls are queued (or refused, per `on_pause`). The pause is a
//!   row in the store: it survives restarts and reloads, and every node reads it.
//!
//! Why a queued task waits is not stored per task (a pause would rewrite thousands):
//! `tasks/get` reads it with the task ([`Waiting`]) and says it in `statusMessage`.

use serde_json::{Map, Value};

use taskd_base::clock::rfc3339;
use taskd_tools::flow::FlowControl;

/// Separates the tool from the key's value in a gate's id.
const GATE_SEPARATOR: char = '\u{1f}';

/// The gate of a task of a keyed tool.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    /// The tool and the key's value (runs with the same id exclude each other).
    pub id: String,
    /// How a status message names the key: `environment=prod`.
    pub label: String,
    /// Admitted jobs (and inline holds) of the gate at once.
    pub limit: i64,
}

impl Gate {
    /// The gate of the runs of a schedule whose runs wait for each other (`overlap =
    /// "queue"`): one at a time. Its id starts with the separator, which no tool's gate
    /// does (a tool's name is never empty), so it shares no places with a tool's key.
    pub fn schedule(name: &str) -> Gate {
        Gate {
            id: format!("{GATE_SEPARATOR}schedule{GATE_SEPARATOR}{name}"),
            label: format!("schedule {name}"),
            limit: 1,
        }
    }

    /// The gate of a call of `tool` with `arguments`, when the tool has a key.
    pub fn of(tool: &str, flow: &FlowControl, arguments: &Map<String, Value>) -> Option<Gate> {
        let key = flow.key.as_ref()?.of(arguments);
        Some(Gate {
            id: format!("{tool}{GATE_SEPARATOR}{}", key.value),
            label: key.label,
            limit: i64::from(flow.max_per_key),
        })
    }
}

/// A rate limit as a store applies it: the bucket a start draws a token from, how fast
/// it refills, and how many tokens it holds at most.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimit {
    /// The tool's name, or its gate's id with `rate_per_key`.
    pub bucket: String,
    /// Whether the bucket is a key's (an empty one defers its job, not the tool).
    pub per_key: bool,
    /// Tokens a millisecond.
    pub per_ms: f64,
    pub burst: f64,
}

impl RateLimit {
    /// The limit a start of `tool` draws from (with its job's gate, if any).
    pub fn of(tool: &str, flow: &FlowControl, gate: Option<&str>) -> Option<RateLimit> {
        let rate = flow.rate?;
        let (bucket, per_key) = match gate {
            Some(gate) if flow.rate_per_key => (gate.to_owned(), true),
            _ => (tool.to_owned(), false),
        };
        Some(RateLimit {
            bucket,
            per_key,
            per_ms: rate.per_ms(),
            burst: f64::from(rate.burst),
        })
    }
}

/// A token bucket's state, as stored: its tokens as of `updated_at`, and its refill.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    pub tokens: f64,
    pub updated_at: i64,
    pub per_ms: f64,
    pub burst: f64,
}

impl Bucket {
    /// A full bucket of `limit`.
    pub fn full(limit: &RateLimit, now: i64) -> Bucket {
        Bucket {
            tokens: limit.burst,
            updated_at: now,
            per_ms: limit.per_ms,
            burst: limit.burst,
        }
    }

    /// The bucket at `now` under `limit` (refilled, at most `burst`). A clock that
    /// reads earlier than the bucket's last update (another node's) refills nothing,
    /// and never moves the bucket back.
    pub fn at(self, limit: &RateLimit, now: i64) -> Bucket {
        let elapsed = (now - self.updated_at).max(0) as f64;
        Bucket {
            tokens: (self.tokens + elapsed * limit.per_ms).min(limit.burst),
            updated_at: now.max(self.updated_at),
            per_ms: limit.per_ms,
            burst: limit.burst,
        }
    }

    /// Takes a token: the bucket after, or `Err(until)`, when the next token comes.
    pub fn take(self) -> Result<Bucket, i64> {
        if self.tokens >= 1.0 {
            Ok(Bucket {
                tokens: self.tokens - 1.0,
                ..self
            })
        } else {
            Err(self.next_token())
        }
    }

    /// When the bucket holds a whole token again (as of its `updated_at`).
    pub fn next_token(&self) -> i64 {
        if self.tokens >= 1.0 || self.per_ms <= 0.0 {
            return self.updated_at;
        }
        self.updated_at + ((1.0 - self.tokens) / self.per_ms).ceil() as i64
    }
}

/// Why a queued task is not running, as its `statusMessage` says.
#[derive(Debug, Clone, PartialEq)]
pub enum Waiting {
    /// Its tool is paused.
    Paused { reason: String },
    /// Its gate is full, or older tasks of its key wait before it.
    Key { label: String, limit: i64 },
    /// Its rate's bucket is empty until then (Unix ms).
    Rate { until: i64 },
}

impl Waiting {
    pub fn message(&self) -> String {
        match self {
            Waiting::Paused { reason } if reason.is_empty() => "paused".to_owned(),
            Waiting::Paused { reason } => format!("paused: {reason}"),
            Waiting::Key { label, limit: 1 } => {
                format!("waiting: another run for {label} is in progress")
            }
            Waiting::Key { label, limit } => {
                format!("waiting: {limit} runs for {label} are in progress")
            }
            Waiting::Rate { until } => format!(
                "waiting for the tool's rate limit until {}",
                rfc3339(*until)
            ),
        }
    }

    /// Why a queued job waits, from what the store read with it: its tool's pause, its
    /// gate (if held), its rate bucket (if any), at `now`.
    pub fn of(
        paused: Option<String>,
        held: Option<(String, i64)>,
        bucket: Option<Bucket>,
        now: i64,
    ) -> Option<Waiting> {
        if let Some(reason) = paused {
            return Some(Waiting::Paused { reason });
        }
        if let Some((label, limit)) = held {
            return Some(Waiting::Key { label, limit });
        }
        let bucket = bucket?;
        let elapsed = (now - bucket.updated_at).max(0) as f64;
        let tokens = (bucket.tokens + elapsed * bucket.per_ms).min(bucket.burst);
        (tokens < 1.0).then(|| Waiting::Rate {
            until: bucket.next_token(),
        })
    }
}

/// A tool as paused by an operator.
#[derive(Debug, Clone, PartialEq)]
pub struct Pause {
    pub tool: String,
    pub reason: String,
    /// Unix ms.
    pub since: i64,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use taskd_tools::flow::FlowConfig;

    fn flow(config: FlowConfig) -> FlowControl {
        config.build().expect("valid flow control")
    }

    #[test]
    fn gates_and_buckets_follow_the_tools_keys() {
        let keyed = flow(FlowConfig {
            concurrency_key: Some("/environment".into()),
            max_concurrency_per_key: Some(2),
            rate: Some("6/min".into()),
            rate_per_key: Some(true),
            ..FlowConfig::default()
        });
        let arguments = json!({"environment": "prod"});
        let gate = Gate::of("deploy", &keyed, arguments.as_object().expect("object"))
            .expect("a keyed tool's gate");
        assert_eq!(gate.id, "deploy\u{1f}prod");
        assert_eq!(gate.label, "environment=prod");
        assert_eq!(gate.limit, 2);
        let limit = RateLimit::of("deploy", &keyed, Some(&gate.id)).expect("a rate");
        assert_eq!(limit.bucket, gate.id);
        assert!(limit.per_key);
        let plain = flow(FlowConfig::default());
        assert!(Gate::of("deploy", &plain, &Map::new()).is_none());
        assert!(RateLimit::of("deploy", &plain, None).is_none());
    }

    #[test]
    fn a_bucket_refills_at_its_rate_up_to_its_burst() {
        // 6/min: a token every 10 s.
        let limit = RateLimit {
            bucket: "api".into(),
            per_key: false,
            per_ms: 0.0001,
            burst: 1.0,
        };
        let bucket = Bucket::full(&limit, 0);
        let bucket = bucket.take().expect("the first start");
        assert_eq!(bucket.at(&limit, 4_000).take(), Err(10_000));
        let later = bucket
            .at(&limit, 10_000)
            .take()
            .expect("a token after 10 s");
        assert!(later.tokens.abs() < 1e-9);
        let idle = later.at(&limit, 1_000_000);
        assert_eq!(idle.tokens, 1.0, "never more than the burst");
    }

    #[test]
    fn a_waiting_task_says_why_pause_first() {
        let empty = Bucket {
            tokens: 0.0,
            updated_at: 1_000,
            per_ms: 0.0001,
            burst: 1.0,
        };
        let held = Some(("environment=prod".to_owned(), 1));
        assert_eq!(
            Waiting::of(
                Some("deploy freeze".into()),
                held.clone(),
                Some(empty),
                1_000
            )
            .map(|waiting| waiting.message()),
            Some("paused: deploy freeze".to_owned())
        );
        assert_eq!(
            Waiting::of(None, held, None, 0).map(|waiting| waiting.message()),
            Some("waiting: another run for environment=prod is in progress".to_owned())
        );
        assert_eq!(
            Waiting::of(None, None, Some(empty), 2_000),
            Some(Waiting::Rate { until: 11_000 })
        );
        assert_eq!(Waiting::of(None, None, Some(empty), 11_000), None);
        assert_eq!(
            Waiting::Key {
                label: "key \"a\"".into(),
                limit: 3
            }
            .message(),
            "waiting: 3 runs for key \"a\" are in progress"
        );
    }
}
