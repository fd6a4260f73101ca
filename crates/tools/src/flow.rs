//! Flow control of a tool's runs (issue 48), as a tool declares it: which runs exclude
//! each other (a concurrency key taken from the arguments), how fast runs may start (a
//! rate limit), and what a paused tool does with new calls. The engine and the task
//! stores enforce them (`taskd_engine::flow`); this module only parses and describes.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

/// The flow-control keys of a `[[tools]]` table or of an upstream tool's settings, as
/// written (each declaration carries them as fields of its own: a flattened struct
/// would lose `deny_unknown_fields`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct FlowConfig {
    pub concurrency_key: Option<String>,
    pub max_concurrency_per_key: Option<u32>,
    pub rate: Option<String>,
    pub rate_burst: Option<u32>,
    pub rate_per_key: Option<bool>,
    pub on_pause: Option<OnPause>,
}

/// A tool's flow control, checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FlowControl {
    /// Runs with the same key's value exclude each other beyond [`Self::max_per_key`].
    pub key: Option<ConcurrencyKey>,
    /// Runs of one key's value at once (1 unless said).
    pub max_per_key: u32,
    /// How fast runs may start.
    pub rate: Option<Rate>,
    /// Whether each key's value has a rate of its own (else the tool has one).
    pub rate_per_key: bool,
    pub on_pause: OnPause,
}

/// What a paused tool does with a new call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnPause {
    /// Accepted into the queue, where it waits for the tool to resume.
    #[default]
    Queue,
    /// Refused: the caller learns the tool is paused, and why.
    Refuse,
}

/// A flow-control key that does not make sense.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FlowError {
    #[error(
        "concurrency_key {0:?} must be a JSON pointer into the arguments (\"/environment\") \
         or a template of them (\"{{/service}}@{{/environment}}\")"
    )]
    Key(String),
    #[error("max_concurrency_per_key needs a concurrency_key, and must be at least 1")]
    PerKey,
    #[error(
        "rate {0:?} must be runs per time, such as \"6/min\", \"10/s\", \"100/15m\" or \
         \"1000/day\" (at least 1 run, at most {MAX_RATE_PER_SECOND} a second)"
    )]
    Rate(String),
    #[error("rate_burst and rate_per_key need a rate; rate_burst must be at least 1")]
    RateOptions,
    #[error("rate_per_key needs a concurrency_key")]
    RatePerKey,
}

/// Most runs a second a rate may allow.
pub const MAX_RATE_PER_SECOND: u32 = 100_000;

impl FlowConfig {
    /// Checks the keys and builds the flow control they declare.
    pub fn build(&self) -> Result<FlowControl, FlowError> {
        let key = self
            .concurrency_key
            .as_deref()
            .map(ConcurrencyKey::parse)
            .transpose()?;
        let max_per_key = match self.max_concurrency_per_key {
            None => 1,
            Some(0) => return Err(FlowError::PerKey),
            Some(_) if key.is_none() => return Err(FlowError::PerKey),
            Some(limit) => limit,
        };
        let rate = match &self.rate {
            None => {
                if self.rate_burst.is_some() || self.rate_per_key.is_some() {
                    return Err(FlowError::RateOptions);
                }
                None
            }
            Some(text) => {
                let burst = match self.rate_burst {
                    Some(0) => return Err(FlowError::RateOptions),
                    Some(burst) => burst,
                    None => 1,
                };
                Some(Rate::parse(text, burst)?)
            }
        };
        let rate_per_key = self.rate_per_key.unwrap_or(false);
        if rate_per_key && key.is_none() {
            return Err(FlowError::RatePerKey);
        }
        Ok(FlowControl {
            key,
            max_per_key,
            rate,
            rate_per_key,
            on_pause: self.on_pause.unwrap_or_default(),
        })
    }
}

/// Which arguments make runs exclude each other: a JSON pointer (`"/environment"`), or
/// a template with pointers in braces (`"{/service}@{/environment}"`).
#[derive(Debug, Clone, PartialEq)]
pub struct ConcurrencyKey {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    Pointer(String),
}

/// Longest key value kept: a longer one is cut (at a character boundary).
const MAX_KEY_VALUE: usize = 256;

/// The key of one call: its value (runs with equal values exclude each other) and how
/// a status message names it.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyValue {
    pub value: String,
    /// `environment=prod` for a single pointer, `key "api@prod"` for a template.
    pub label: String,
}

impl ConcurrencyKey {
    pub fn parse(text: &str) -> Result<ConcurrencyKey, FlowError> {
        let invalid = || FlowError::Key(text.to_owned());
        if text.starts_with('/') {
            return Ok(ConcurrencyKey {
                parts: vec![Part::Pointer(text.to_owned())],
            });
        }
        let mut parts = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            match rest.find('{') {
                None => {
                    if rest.contains('}') {
                        return Err(invalid());
                    }
                    parts.push(Part::Text(rest.to_owned()));
                    break;
                }
                Some(open) => {
                    let (before, after) = rest.split_at(open);
                    if before.contains('}') {
                        return Err(invalid());
                    }
                    if !before.is_empty() {
                        parts.push(Part::Text(before.to_owned()));
                    }
                    let close = after.find('}').ok_or_else(invalid)?;
                    let pointer = &after[1..close];
                    if !pointer.starts_with('/') || pointer.contains('{') {
                        return Err(invalid());
                    }
                    parts.push(Part::Pointer(pointer.to_owned()));
                    rest = &after[close + 1..];
                }
            }
        }
        if !parts.iter().any(|part| matches!(part, Part::Pointer(_))) {
            return Err(invalid());
        }
        Ok(ConcurrencyKey { parts })
    }

    /// The argument each pointer starts at (`environment` of `/environment/name`).
    pub fn arguments(&self) -> impl Iterator<Item = String> + '_ {
        self.parts.iter().filter_map(|part| match part {
            Part::Pointer(pointer) => pointer
                .split('/')
                .nth(1)
                .map(|name| name.replace("~1", "/").replace("~0", "~")),
            Part::Text(_) => None,
        })
    }

    /// The key of a call with `arguments`. A pointer to nothing (or to `null`) is the
    /// empty value: such calls share one key.
    pub fn of(&self, arguments: &Map<String, Value>) -> KeyValue {
        let arguments = Value::Object(arguments.clone());
        let mut value = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => value.push_str(text),
                Part::Pointer(pointer) => match arguments.pointer(pointer) {
                    None | Some(Value::Null) => {}
                    Some(Value::String(text)) => value.push_str(text),
                    Some(other) => value.push_str(&other.to_string()),
                },
            }
        }
        if value.len() > MAX_KEY_VALUE {
            let mut end = MAX_KEY_VALUE;
            while !value.is_char_boundary(end) {
                end -= 1;
            }
            value.truncate(end);
        }
        let label = match self.parts.as_slice() {
            [Part::Pointer(pointer)] => {
                let name = pointer.rsplit('/').next().unwrap_or(pointer);
                format!("{}={value}", name.replace("~1", "/").replace("~0", "~"))
            }
            _ => format!("key {value:?}"),
        };
        KeyValue { value, label }
    }
}

/// How fast runs may start: `count` per `per`, as a token bucket holding at most
/// `burst` starts (1 by default: starts evenly spaced, never more than `count` in any
/// window of `per` plus one).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub count: u32,
    pub per: Duration,
    pub burst: u32,
}

impl Rate {
    /// `"6/min"`, `"10/s"`, `"100/15m"`, `"1000/day"`.
    pub fn parse(text: &str, burst: u32) -> Result<Rate, FlowError> {
        let invalid = || FlowError::Rate(text.to_owned());
        let (count, per) = text.split_once('/').ok_or_else(invalid)?;
        let count: u32 = count.trim().parse().map_err(|_| invalid())?;
        let per = per.trim();
        let digits = per
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(invalid)?;
        let times: u64 = if digits == 0 {
            1
        } else {
            per[..digits].parse().map_err(|_| invalid())?
        };
        let unit = match &per[digits..] {
            "ms" => Duration::from_millis(1),
            "s" | "sec" | "second" => Duration::from_secs(1),
            "m" | "min" | "minute" => Duration::from_secs(60),
            "h" | "hour" => Duration::from_secs(3600),
            "d" | "day" => Duration::from_secs(86_400),
            _ => return Err(invalid()),
        };
        let per = unit.checked_mul(u32::try_from(times).map_err(|_| invalid())?);
        let per = per.filter(|per| !per.is_zero()).ok_or_else(invalid)?;
        let rate = Rate { count, per, burst };
        if count == 0 || rate.per_second() > f64::from(MAX_RATE_PER_SECOND) {
            return Err(invalid());
        }
        Ok(rate)
    }

    /// Starts a millisecond (the bucket's refill).
    pub fn per_ms(&self) -> f64 {
        f64::from(self.count) / self.per.as_secs_f64() / 1000.0
    }

    fn per_second(&self) -> f64 {
        f64::from(self.count) / self.per.as_secs_f64()
    }

    /// As written in the configuration's terms: `6/min`.
    pub fn describe(&self) -> String {
        let seconds = self.per.as_secs();
        let per = match seconds {
            _ if self.per.subsec_millis() != 0 || seconds == 0 => {
                format!("{}ms", self.per.as_millis())
            }
            1 => "s".into(),
            60 => "min".into(),
            3600 => "h".into(),
            86_400 => "day".into(),
            _ if seconds.is_multiple_of(3600) => format!("{}h", seconds / 3600),
            _ if seconds.is_multiple_of(60) => format!("{}m", seconds / 60),
            _ => format!("{seconds}s"),
        };
        format!("{}/{per}", self.count)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn arguments(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn keys_come_from_a_pointer_or_a_template() {
        let key = ConcurrencyKey::parse("/environment").expect("a pointer");
        let prod = key.of(&arguments(json!({"environment": "prod", "version": 3})));
        assert_eq!(prod.value, "prod");
        assert_eq!(prod.label, "environment=prod");
        assert_eq!(key.of(&arguments(json!({}))).value, "");
        let nested = ConcurrencyKey::parse("/target/region").expect("nested");
        assert_eq!(
            nested
                .of(&arguments(json!({"target": {"region": 7}})))
                .label,
            "region=7"
        );

        let template = ConcurrencyKey::parse("{/service}@{/environment}").expect("template");
        let key = template.of(&arguments(json!({"service": "api", "environment": "prod"})));
        assert_eq!(key.value, "api@prod");
        assert_eq!(key.label, "key \"api@prod\"");
        for bad in [
            "environment",
            "{environment}",
            "{/a",
            "a}{/b}",
            "plain text",
            "",
        ] {
            assert!(ConcurrencyKey::parse(bad).is_err(), "{bad:?}");
        }
        let long = ConcurrencyKey::parse("/x")
            .expect("pointer")
            .of(&arguments(json!({"x": "é".repeat(300)})));
        assert!(long.value.len() <= MAX_KEY_VALUE);
    }

    #[test]
    fn rates_parse_and_describe_themselves() {
        let rate = Rate::parse("6/min", 1).expect("6/min");
        assert_eq!(rate.per, Duration::from_secs(60));
        assert!((rate.per_ms() - 0.0001).abs() < 1e-12);
        assert_eq!(rate.describe(), "6/min");
        assert_eq!(
            Rate::parse("100/15m", 1).expect("15m").describe(),
            "100/15m"
        );
        assert_eq!(Rate::parse("60/s", 1).expect("s").describe(), "60/s");
        assert_eq!(Rate::parse("1000/day", 5).expect("day").burst, 5);
        for bad in [
            "6",
            "0/min",
            "6/fortnight",
            "6/0s",
            "x/min",
            "1000000/s",
            "6/-1m",
        ] {
            assert!(Rate::parse(bad, 1).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn options_need_what_they_qualify() {
        let build = |config: FlowConfig| config.build();
        assert_eq!(
            build(FlowConfig {
                max_concurrency_per_key: Some(2),
                ..FlowConfig::default()
            }),
            Err(FlowError::PerKey)
        );
        assert_eq!(
            build(FlowConfig {
                rate_burst: Some(3),
                ..FlowConfig::default()
            }),
            Err(FlowError::RateOptions)
        );
        assert_eq!(
            build(FlowConfig {
                rate: Some("1/s".into()),
                rate_per_key: Some(true),
                ..FlowConfig::default()
            }),
            Err(FlowError::RatePerKey)
        );
        let flow = build(FlowConfig {
            concurrency_key: Some("/env".into()),
            rate: Some("6/min".into()),
            on_pause: Some(OnPause::Refuse),
            ..FlowConfig::default()
        })
        .expect("valid");
        assert_eq!(flow.max_per_key, 1);
        assert_eq!(flow.rate.map(|rate| rate.burst), Some(1));
        assert_eq!(flow.on_pause, OnPause::Refuse);
    }
}
