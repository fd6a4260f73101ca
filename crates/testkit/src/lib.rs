//! Shared pieces of the generated-input ("fuzz") tests that sit beside each parser
//! (`fuzz` test modules): the run configuration and a generator of near-valid JSON.
//!
//! Nightly-only cargo-fuzz is not available, so these run on stable with `proptest`.
//! Inside `cargo test` every run uses a fixed seed and a few hundred cases, so CI sees
//! the same inputs every time; `PROPTEST_CASES` and `PROPTEST_RNG_SEED` override both
//! (`benches/fuzz.sh` runs long with a fresh seed and prints it, to replay a failure).
//!
//! A dev-dependency only. May depend on: no crate of this workspace (the crates whose
//! tests use it sit above it). Must never know: anything it generates inputs for.

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use serde_json::{Map, Value};

/// Seed of the bounded run inside `cargo test`.
pub const SEED: u64 = 0x6d63_702d_7461_736b;

/// `cases` generated inputs from [`SEED`], unless the environment says otherwise. No
/// failure files are written: a failure prints its minimal input, and the seed replays it.
pub fn config(cases: u32) -> Config {
    let from_env = Config::default();
    Config {
        cases: if std::env::var_os("PROPTEST_CASES").is_some() {
            from_env.cases
        } else {
            cases
        },
        rng_seed: match from_env.rng_seed {
            RngSeed::Random => RngSeed::Fixed(SEED),
            fixed => fixed,
        },
        failure_persistence: None,
        ..from_env
    }
}

/// Member names the parsers look for, so that generated objects hit them often.
const KEYS: &[&str] = &[
    "jsonrpc",
    "id",
    "method",
    "params",
    "_meta",
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientCapabilities",
    "io.modelcontextprotocol/logLevel",
    "progressToken",
    "progress",
    "total",
    "message",
    "result",
    "error",
    "inputRequired",
    "requests",
    "state",
    "content",
    "structuredContent",
    "isError",
    "code",
    "data",
    "type",
    "",
];

/// A string: usually short and printable, sometimes empty, odd or long.
pub fn any_string() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => "[a-z0-9/._-]{0,12}",
        4 => any::<String>(),
        2 => Just(String::new()),
        2 => "[\\x00-\\x1f\"\\\\\u{80}-\u{10ffff}]{1,8}",
        1 => (1usize..20_000).prop_map(|n| "x".repeat(n)),
    ]
}

/// A number at an edge as often as in the middle.
pub fn any_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop::sample::select(vec![0i64, -1, 1, i64::MIN, i64::MAX]).prop_map(Value::from),
        prop::sample::select(vec![0.5f64, -0.0, 1e308, -1e308, 5e-324, 2.0f64.powi(53)])
            .prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
    ]
}

/// A member name: one the parsers know, or anything.
pub fn any_key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(KEYS).prop_map(str::to_owned),
        1 => any_string(),
    ]
}

/// Any JSON value, nested up to `depth` levels.
pub fn any_json(depth: u32) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any_number(),
        any_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(depth, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((any_key(), inner), 0..4)
                .prop_map(|members| Value::Object(members.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// `value` with some of its members removed, replaced by any value, or added: a valid
/// shape made near-valid.
pub fn mutate_object(value: Map<String, Value>) -> impl Strategy<Value = Map<String, Value>> {
    let edits = prop::collection::vec(
        (0u8..3, any_key(), any_json(3), any::<prop::sample::Index>()),
        0..4,
    );
    edits.prop_map(move |edits| {
        let mut object = value.clone();
        for (kind, key, replacement, index) in edits {
            let existing = (!object.is_empty())
                .then(|| object.keys().nth(index.index(object.len())).cloned())
                .flatten();
            match (kind, existing) {
                (0, Some(existing)) => {
                    object.remove(&existing);
                }
                (1, Some(existing)) => {
                    object.insert(existing, replacement);
                }
                _ => {
                    object.insert(key, replacement);
                }
            }
        }
        object
    })
}
