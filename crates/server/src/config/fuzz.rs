//! Generated configurations (see [`taskd_testkit`]): every section and key with values
//! that are right, of the wrong type or out of range, unknown keys, missing required
//! keys, repeated tables, then sometimes damaged text. A configuration made only of good
//! values must load; one with any bad value must be refused with a message, never a
//! panic; whatever loads passes its own checks.

use proptest::prelude::*;
use proptest::sample::Index;

use super::*;
use taskd_testkit::config as run_config;
use taskd_tools::command::CommandTool;
use taskd_upstreams::Upstream;

/// One key: TOML literals that must be accepted, and ones that must be refused.
struct Key {
    name: &'static str,
    good: &'static [&'static str],
    bad: &'static [&'static str],
}

const fn key(
    name: &'static str,
    good: &'static [&'static str],
    bad: &'static [&'static str],
) -> Key {
    Key { name, good, bad }
}

const COUNT_BAD: &[&str] = &["0", "-1", "\"8\"", "1.5", "[]"];
const MS_GOOD: &[&str] = &["1", "60000", "9223372036854775807"];
const ANY_MS_GOOD: &[&str] = &["0", "1", "60000"];
const ANY_MS_BAD: &[&str] = &["-1", "\"5s\"", "true", "{}"];
const TEXT_GOOD: &[&str] = &["\"x\"", "''", "\"\\u00e9\\n\""];
const TEXT_BAD: &[&str] = &["1", "true", "[\"x\"]", "1979-05-27"];
/// `[[tools]]` entries are typed from a `toml::Value`, which hands a date to a string
/// field as its text: `title = 1979-05-27` is the title "1979-05-27" (harmless).
const TOOL_TEXT_BAD: &[&str] = &["1", "true", "[\"x\"]"];

/// `(table, repeated as [[table]], keys, required keys)`.
type Section = (&'static str, bool, &'static [Key], &'static [&'static str]);

const SECTIONS: &[Section] = &[
    (
        "server",
        false,
        &[
            key(
                "listen",
                &["\"127.0.0.1:8080\"", "\"[::1]:0\""],
                &[
                    "8080",
                    "\"localhost\"",
                    "\"127.0.0.1\"",
                    "\"127.0.0.1:70000\"",
                ],
            ),
            key("data_dir", &["\"data\"", "\"/tmp/x\""], &["1", "[]"]),
            key(
                "endpoint",
                &["\"/mcp\"", "\"/\""],
                &["\"mcp\"", "\"/healthz\"", "5"],
            ),
            key(
                "allowed_hosts",
                &["[]", "[\"a.example\"]"],
                &["\"a\"", "[1]"],
            ),
            key(
                "allowed_origins",
                &["[]", "[\"https://a.example\"]"],
                &["{}", "[true]"],
            ),
            key("handler_threads", &["1", "64"], COUNT_BAD),
            key(
                "allow_unauthenticated_remote",
                &["true", "false"],
                &["\"yes\"", "1"],
            ),
            key("name", TEXT_GOOD, TEXT_BAD),
            key("instructions", TEXT_GOOD, TEXT_BAD),
            key(
                "max_connections",
                &["0", "1", "100000"],
                &["-1", "\"8\"", "1.5"],
            ),
            key("idle_timeout_ms", MS_GOOD, &["0", "-1"]),
            key("request_timeout_ms", MS_GOOD, &["0", "\"10s\""]),
            key("write_timeout_ms", MS_GOOD, &["0", "[]"]),
            key("min_write_bytes_per_sec", &["1", "262144"], &["0", "-1"]),
        ],
        &[],
    ),
    (
        "limits",
        false,
        &[
            key(
                "max_body_bytes",
                &["1024", "4194304"],
                &["1023", "-5", "\"big\""],
            ),
            key("max_json_depth", &["8", "64", "100000"], &["7", "0", "-1"]),
            key("page_size", &["1", "100"], COUNT_BAD),
            key("cache_ttl_ms", ANY_MS_GOOD, ANY_MS_BAD),
            key("request_state_ttl_ms", ANY_MS_GOOD, ANY_MS_BAD),
            // At least `max_body_bytes`, whose largest good value is 4 MiB.
            key(
                "max_buffered_request_bytes",
                &["4194304", "67108864"],
                &["1023", "-1", "\"x\""],
            ),
            key("max_unsent_answer_bytes", &["0", "67108864"], ANY_MS_BAD),
        ],
        &[],
    ),
    (
        "store",
        false,
        &[
            key(
                "synchronous",
                &["\"full\"", "\"normal\""],
                &["\"FULL\"", "2", "\"off\""],
            ),
            key("busy_timeout_ms", ANY_MS_GOOD, ANY_MS_BAD),
            key(
                "read_connections",
                &["1", "8"],
                &["-1", "4294967296", "\"8\""],
            ),
            key("integrity_check_ms", ANY_MS_GOOD, ANY_MS_BAD),
            key("min_free_bytes", &["0", "1048576"], ANY_MS_BAD),
            key(
                "locking",
                &["\"exclusive\"", "\"shared\""],
                &["\"Shared\"", "1", "\"none\""],
            ),
            key(
                "checkpoints",
                &["\"internal\"", "\"external\""],
                &["\"off\"", "0", "\"External\""],
            ),
        ],
        &[],
    ),
    (
        "workers",
        false,
        &[
            key("threads", &["1", "8"], COUNT_BAD),
            key("lease_ms", &["300", "30000"], &["299", "0", "-1"]),
            key("shutdown_grace_ms", ANY_MS_GOOD, ANY_MS_BAD),
            key("janitor_interval_ms", MS_GOOD, &["0", "-1", "\"1s\""]),
        ],
        &[],
    ),
    (
        "tasks",
        false,
        &[
            key("ttl_ms", MS_GOOD, &["0", "-1"]),
            key("poll_interval_ms", MS_GOOD, &["0", "[1]"]),
            key(
                "max_payload_bytes_in_flight",
                &["0", "33554432"],
                ANY_MS_BAD,
            ),
        ],
        &[],
    ),
    (
        "notifications",
        false,
        &[
            key("max_subscriptions", &["1", "8192"], COUNT_BAD),
            key("max_subscriptions_per_identity", &["1", "32"], COUNT_BAD),
            key("max_task_ids", &["0", "1", "256"], &["-1", "\"x\""]),
            key("queue_len", &["1", "128"], COUNT_BAD),
            key("max_stall_ms", MS_GOOD, &["0", "-1"]),
            key("keep_alive_ms", MS_GOOD, &["0", "-1"]),
            key("max_stream_lifetime_ms", MS_GOOD, &["0", "{}"]),
        ],
        &[],
    ),
    (
        "builtin",
        false,
        &[key(
            "sets",
            &[
                "[]",
                "[\"demo\"]",
                "[\"conformance\", \"demo\", \"testing\"]",
            ],
            &["[\"nope\"]", "\"demo\"", "[1]"],
        )],
        &[],
    ),
    (
        "auth.tokens",
        true,
        &[
            key("principal", &["\"alice\""], &["\"\"", "3"]),
            key("tenant", &["\"\"", "\"t\""], &["1"]),
            key(
                "sha256",
                &["\"2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824\""],
                &[
                    "\"abc\"",
                    "\"zz4dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824\"",
                ],
            ),
        ],
        &["principal", "sha256"],
    ),
    (
        "tools",
        true,
        &[
            key("name", &["\"t\"", "\"a.b-c\""], &["1", "[]"]),
            key("title", TEXT_GOOD, TOOL_TEXT_BAD),
            key("description", TEXT_GOOD, TOOL_TEXT_BAD),
            key(
                "command",
                &["[\"/bin/sh\"]", "[\"sh\", \"-c\", \"true\"]"],
                &[
                    "[]",
                    "[\"\"]",
                    "[\"/nonexistent/x\"]",
                    "\"sh\"",
                    "[\"no-such-program-x\"]",
                ],
            ),
            key(
                "input_schema",
                &[
                    "{ type = \"object\" }",
                    "'{\"type\": \"object\", \"properties\": {}}'",
                ],
                &["'{\"type\": \"array\"}'", "'not json'", "5", "{ type = 1 }"],
            ),
            key(
                "output_schema",
                &["{ type = \"object\" }"],
                &["{ type = \"string\" }", "[]"],
            ),
            key(
                "annotations",
                &["{ readOnlyHint = true }", "'{}'"],
                &["3", "'[1]'"],
            ),
            key(
                "task_policy",
                &["\"inline\"", "\"optional\"", "\"required\""],
                &["\"sometimes\"", "1"],
            ),
            key(
                "working_dir",
                &["\".\"", "\"/\""],
                &["\"/nonexistent-dir\"", "1"],
            ),
            key(
                "env",
                &["{}", "{ A = \"1\" }"],
                &["{ \"A=B\" = \"1\" }", "{ A = 1 }", "[]"],
            ),
            key("timeout_ms", MS_GOOD, &["0", "-1"]),
            key("max_attempts", &["1", "4294967295"], &["0", "4294967296"]),
            key("backoff_ms", ANY_MS_GOOD, ANY_MS_BAD),
            key("max_concurrency", &["1"], COUNT_BAD),
            key("ttl_ms", MS_GOOD, &["0"]),
            key("poll_interval_ms", MS_GOOD, &["0"]),
            key("max_output_bytes", &["1", "4194304"], COUNT_BAD),
        ],
        &["name", "description", "command"],
    ),
];

/// One table as generated: which section, and per key `(key, good, which value)`.
type Choice = (Index, Vec<(Index, bool, Index)>, bool);

fn choices() -> impl Strategy<Value = (Vec<Choice>, bool, Option<(Index, String)>)> {
    let table = (
        any::<Index>(),
        prop::collection::vec(
            (any::<Index>(), prop::bool::weighted(0.9), any::<Index>()),
            0..6,
        ),
        prop::bool::weighted(0.05),
    );
    let damage = prop::option::weighted(0.2, (any::<Index>(), "[\\[\\]{}=\"'#\\n.,a-z0-9 ]{0,4}"));
    (
        prop::collection::vec(table, 0..6),
        prop::bool::weighted(0.05),
        damage,
    )
}

/// The configuration text, and whether it must load (`None` once damaged).
fn render(
    (tables, unknown, damage): &(Vec<Choice>, bool, Option<(Index, String)>),
) -> (String, Option<bool>) {
    let mut text = String::new();
    let mut good = !unknown;
    let mut seen_tables = Vec::new();
    if *unknown {
        text.push_str("surprise = 1\n");
    }
    for (section, keys, drop_required) in tables {
        let (name, repeated, all_keys, required) = section.get(SECTIONS);
        if *repeated {
            text.push_str(&format!("[[{name}]]\n"));
        } else {
            // A table may appear once.
            good &= !seen_tables.contains(name);
            seen_tables.push(*name);
            text.push_str(&format!("[{name}]\n"));
        }
        let mut written = Vec::new();
        for (key, value_good, value) in keys {
            let key = key.get(all_keys);
            let values = if *value_good && !key.good.is_empty() {
                key.good
            } else {
                key.bad
            };
            good &= *value_good && !written.contains(&key.name);
            written.push(key.name);
            text.push_str(&format!("{} = {}\n", key.name, value.get(values)));
        }
        for name in required.iter().filter(|name| !written.contains(name)) {
            if *drop_required {
                good = false;
            } else if let Some(key) = all_keys.iter().find(|key| key.name == *name) {
                text.push_str(&format!("{name} = {}\n", key.good[0]));
            }
        }
    }
    match damage {
        None => (text, Some(good)),
        Some((at, snippet)) => {
            let mut at = at.index(text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            text.insert_str(at, snippet);
            (text, None)
        }
    }
}

proptest! {
    #![proptest_config(run_config(256))]

    #[test]
    fn configurations_load_exactly_when_every_value_is_good(generated in choices()) {
        let (text, expected) = render(&generated);
        // Loaded as the server loads it: parsed, then each declaration built.
        let loaded = Config::parse_in(&text, Path::new("/")).map(|config| {
            let builds = config
                .tools
                .iter()
                .all(|tool| CommandTool::build(tool, &config.base_dir).is_ok())
                && config
                    .upstreams
                    .iter()
                    .all(|upstream| Upstream::build(upstream, &config.base_dir).is_ok());
            (config, builds)
        });
        match loaded {
            Ok((_, false)) => prop_assert!(expected != Some(true), "a declaration did not build:\n{text}"),
            Ok((config, true)) => {
                prop_assert!(expected != Some(false), "accepted:\n{text}");
                prop_assert!(config.check().is_ok());
                // Damage may respell a header (`[[tools]] `, `[[ tools]]`): count undamaged.
                if expected.is_some() {
                    let declared = text.lines().filter(|line| *line == "[[tools]]").count();
                    prop_assert_eq!(config.tools.len(), declared);
                }
            }
            Err(error) => {
                prop_assert!(expected != Some(true), "refused ({error}):\n{text}");
                prop_assert!(!error.to_string().trim().is_empty());
            }
        }
    }

    #[test]
    fn any_text_is_loaded_or_refused_with_a_message(text in any::<String>()) {
        if let Err(error) = Config::parse_in(&text, Path::new("/")) {
            prop_assert!(!error.to_string().trim().is_empty());
        }
    }
}
