//! `docs/configuration.md`, the configuration reference, checked against the keys the
//! configuration structs accept, so that the reference cannot drift from the code nor
//! repeat itself: every accepted key has exactly one row, and every row names a key
//! that is accepted.
//!
//! The accepted keys are read from serde itself, not from a second hand-kept list: every
//! struct here is `deny_unknown_fields`, so parsing a table holding one unknown key
//! fails with serde's "unknown field `…`, expected one of `a`, `b`, …", which names
//! every field the struct takes. Probing each field the same way tells a nested table
//! (recursed into) from an array of tables (likewise) and from a value (a row).
//! `[[tools]]` entries are kept raw by [`Config`] and typed later: they are probed as
//! [`CommandToolConfig`].
//!
//! The reference's format, which the check reads: a heading whose text holds a
//! backticked table name (`` ## `[server]` `` or `` ### `[[auth.tokens]]` ``) opens a
//! section; the rows of a Markdown table whose header starts with `key`, under it, name
//! that section's keys, backticked, in their first cell (several per cell are allowed).
//! A row may also name a sub-key of a free-form table (`env.PATH` under `env`).

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;

use super::Config;
use taskd_tools::command::CommandToolConfig;
use taskd_upstreams::UpstreamConfig;

/// Where the reference lives, relative to the crate root.
const REFERENCE: &str = "docs/configuration.md";

/// A key no struct accepts; its rejection lists the keys that are accepted.
const PROBE: &str = "__reference_probe__";

/// What the configuration accepts at one place.
enum Probe {
    /// A struct: these keys, and nothing else.
    Fields(Vec<String>),
    /// Any key (a map or a free-form TOML value).
    Open,
    /// Not a table at all (a value).
    Value,
}

/// What a documented or accepted key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A value: one row.
    Value,
    /// A free-form table (a map): one row, and rows for sub-keys are allowed.
    Open,
}

/// Parses `header` followed by the probe key as `T`, and reads what serde says about
/// the key. A free-form table may take values of one type only (`env`: strings), so
/// the probe key is tried with a value of each kind.
fn probe<T: DeserializeOwned>(header: &str) -> Probe {
    let mut found = Probe::Value;
    for value in ["\"text\"", "1", "{}"] {
        match probe_with::<T>(&format!("{header}{PROBE} = {value}\n")) {
            Probe::Value => {}
            other => found = other,
        }
        if !matches!(found, Probe::Value) {
            break;
        }
    }
    found
}

/// Parses `text` as `T` and reads what serde says about the probe key in it.
fn probe_with<T: DeserializeOwned>(text: &str) -> Probe {
    let Err(error) = toml::from_str::<T>(text) else {
        return Probe::Open;
    };
    let message = error.message();
    if message.starts_with("missing field") {
        // The probe was taken (serde rejects unknown fields as it meets them, and
        // checks for missing ones at the end): other fields of the struct are required.
        return Probe::Open;
    }
    let Some(rest) = message.strip_prefix(&format!("unknown field `{PROBE}`")) else {
        return Probe::Value;
    };
    // ", expected one of `a`, `b`", ", expected `a` or `b`", ", there are no fields".
    let fields = rest
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    Probe::Fields(fields)
}

/// One table the configuration accepts: `[name]`, or `[[name]]` when `array`.
#[derive(Debug, Default)]
struct Table {
    array: bool,
    /// Its keys; table-valued keys are tables of their own, not keys.
    keys: BTreeMap<String, Kind>,
}

impl Table {
    /// How its heading is written.
    fn heading(&self, name: &str) -> String {
        if self.array {
            format!("[[{name}]]")
        } else {
            format!("[{name}]")
        }
    }
}

/// The accepted tables, by name (`server`, `auth.tokens`, `tools`).
type Accepted = BTreeMap<String, Table>;

/// A table found inside another: its name, whether it is an array of tables, its
/// fields, and the TOML text that opens it.
struct Nested {
    name: String,
    array: bool,
    fields: Vec<String>,
    preamble: String,
}

/// Records the array of tables `path` that `Config` keeps raw, as the type `T` it is
/// typed as later.
fn walk_raw<T: DeserializeOwned + 'static>(path: &str, out: &mut Accepted) {
    let Probe::Fields(fields) = probe::<T>("") else {
        panic!("{path} entries no longer reject unknown keys");
    };
    let mut entry = Accepted::new();
    walk::<T>("", "", true, fields, &mut entry);
    for (inner, table) in entry {
        let inner = if inner.is_empty() {
            path.to_owned()
        } else {
            format!("{path}.{inner}")
        };
        out.insert(inner, table);
    }
}

/// Records the table `name` (opened by the TOML `preamble`; `T` is the type the whole
/// text parses as) with its `fields`, and walks the tables among them.
fn walk<T: DeserializeOwned + 'static>(
    preamble: &str,
    name: &str,
    array: bool,
    fields: Vec<String>,
    out: &mut Accepted,
) {
    let mut nested = Vec::new();
    let mut keys = BTreeMap::new();
    for field in fields {
        let path = if name.is_empty() {
            field.clone()
        } else {
            format!("{name}.{field}")
        };
        // `[[tools]]` and `[[upstreams]]` are kept raw by `Config`, and typed later (a
        // `tools` key of another table, `[[webhooks]]`'s, is only a value).
        let top =
            name.is_empty() && std::any::TypeId::of::<T>() == std::any::TypeId::of::<Config>();
        if top && field == "tools" {
            walk_raw::<CommandToolConfig>(&path, out);
            continue;
        }
        if top && field == "upstreams" {
            walk_raw::<UpstreamConfig>(&path, out);
            continue;
        }
        let as_table = format!("{preamble}[{path}]\n");
        let as_array = format!("{preamble}[[{path}]]\n");
        match probe::<T>(&as_table) {
            Probe::Fields(fields) => nested.push(Nested {
                name: path,
                array: false,
                fields,
                preamble: as_table,
            }),
            Probe::Open => {
                keys.insert(field, Kind::Open);
            }
            Probe::Value => match probe::<T>(&as_array) {
                Probe::Fields(fields) => nested.push(Nested {
                    name: path,
                    array: true,
                    fields,
                    preamble: as_array,
                }),
                Probe::Open => panic!(
                    "`[[{path}]]` takes any keys (kept raw, typed later?): teach \
                     crates/server/src/config/reference.rs its type, as it knows `[[tools]]`'s"
                ),
                Probe::Value => {
                    keys.insert(field, Kind::Value);
                }
            },
        }
    }
    out.insert(name.to_owned(), Table { array, keys });
    for table in nested {
        walk::<T>(&table.preamble, &table.name, table.array, table.fields, out);
    }
}

/// Every table the configuration accepts that has keys of its own, by name.
fn accepted() -> Accepted {
    let Probe::Fields(top) = probe::<Config>("") else {
        panic!("Config no longer rejects unknown keys");
    };
    let mut out = Accepted::new();
    walk::<Config>("", "", false, top, &mut out);
    out.retain(|_, table| !table.keys.is_empty());
    out
}

/// Every key the configuration accepts, as `table.key` (`server.listen`,
/// `auth.tokens.sha256`, `tools.command`): for checks that classify every key, as
/// `live` does for reloads.
pub(crate) fn accepted_keys() -> Vec<String> {
    accepted()
        .into_iter()
        .flat_map(|(table, keys)| {
            keys.keys.into_keys().map(move |key| match table.as_str() {
                "" => key,
                _ => format!("{table}.{key}"),
            })
        })
        .collect()
}

/// One documented key.
struct Row {
    table: String,
    key: String,
    line: usize,
}

/// The rows of the reference, and the tables it has a heading for. Errors: rows outside
/// any section.
fn documented(text: &str) -> (Vec<Row>, BTreeMap<String, usize>, Vec<String>) {
    let mut rows = Vec::new();
    let mut headings = BTreeMap::new();
    let mut problems = Vec::new();
    let mut table: Option<String> = None;
    let mut in_key_table = false;
    for (index, line) in text.lines().enumerate() {
        let line_no = index + 1;
        let trimmed = line.trim();
        if trimmed.starts_with('#') {
            in_key_table = false;
            let named = backticked(trimmed).into_iter().find_map(|span| {
                span.strip_prefix("[[")
                    .and_then(|s| s.strip_suffix("]]"))
                    .or_else(|| span.strip_prefix('[').and_then(|s| s.strip_suffix(']')))
                    .map(str::to_owned)
            });
            if let Some(name) = &named {
                headings.insert(name.clone(), line_no);
            }
            // A heading that names no table closes the section.
            table = named;
            continue;
        }
        if !trimmed.starts_with('|') {
            in_key_table = false;
            continue;
        }
        let first_cell = trimmed
            .trim_start_matches('|')
            .split('|')
            .next()
            .unwrap_or("");
        if first_cell.trim() == "key" {
            in_key_table = true;
            continue;
        }
        if !in_key_table || first_cell.trim().starts_with("---") {
            continue;
        }
        let Some(table) = &table else {
            problems.push(format!(
                "{REFERENCE}:{line_no}: a key row before any heading naming its table"
            ));
            continue;
        };
        for key in backticked(first_cell) {
            rows.push(Row {
                table: table.clone(),
                key: key.to_owned(),
                line: line_no,
            });
        }
    }
    (rows, headings, problems)
}

/// The `backticked` spans of a line.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// Compares the reference with the structs; returns every problem, each saying what
/// to change in the reference.
fn problems(text: &str, accepted: &Accepted) -> Vec<String> {
    let (rows, headings, mut problems) = documented(text);
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    for row in &rows {
        let full = format!("{}.{}", row.table, row.key);
        if let Some(first) = seen.insert((row.table.clone(), row.key.clone()), row.line) {
            problems.push(format!(
                "{REFERENCE}:{}: `{full}` is documented twice (lines {first} and {}): keep one row",
                row.line, row.line
            ));
        }
        let known = accepted.get(&row.table).is_some_and(|table| {
            table.keys.contains_key(&row.key)
                || row
                    .key
                    .split_once('.')
                    .is_some_and(|(parent, _)| table.keys.get(parent) == Some(&Kind::Open))
        });
        if !known {
            problems.push(format!(
                "{REFERENCE}:{}: `{full}` is documented, but the configuration does not accept \
                 it: remove the row (or fix the key's spelling, or its heading)",
                row.line
            ));
        }
    }
    for (table, accepted) in accepted {
        let heading = accepted.heading(table);
        for key in accepted.keys.keys() {
            if seen.contains_key(&(table.clone(), key.clone())) {
                continue;
            }
            let row = format!("| `{key}` | <default> | <what it does> |");
            let place = match headings.get(table) {
                Some(line) => format!("to the table under the heading `{heading}` (line {line})"),
                None => format!(
                    "under a new heading \"## `{heading}`\" with a table \
                     \"| key | default | meaning |\""
                ),
            };
            problems.push(format!(
                "{REFERENCE}: no row for `{table}.{key}`, which the configuration accepts: \
                 add the row \"{row}\" {place}"
            ));
        }
    }
    problems
}

#[test]
fn every_accepted_key_has_exactly_one_row_in_the_reference() {
    // The workspace root: this crate is crates/server.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(REFERENCE);
    let text = std::fs::read_to_string(&path).expect("docs/configuration.md");
    let problems = problems(&text, &accepted());
    assert!(
        problems.is_empty(),
        "the configuration reference and the configuration structs disagree:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_walk_finds_nested_tables_arrays_and_free_form_maps() {
    let accepted = accepted();
    assert_eq!(accepted["server"].keys.get("listen"), Some(&Kind::Value));
    assert!(!accepted["server"].array);
    assert_eq!(
        accepted["auth.tokens"].keys.get("sha256"),
        Some(&Kind::Value)
    );
    assert!(accepted["auth.tokens"].array);
    assert_eq!(accepted["tools"].keys.get("env"), Some(&Kind::Open));
    assert_eq!(accepted["tools"].keys.get("command"), Some(&Kind::Value));
    assert!(accepted["tools"].array);
    assert!(
        !accepted.contains_key("auth"),
        "a table of tables only has no rows"
    );
    assert!(!accepted["server"].keys.contains_key(PROBE));
}

#[test]
fn a_missing_a_duplicated_and_an_unknown_row_are_each_named() {
    let accepted = accepted();
    let text = "\
## `[server]`

| key | default | meaning |
|---|---|---|
| `listen` | x | y |
| `listen` | x | y |
| `no_such_key` | x | y |
";
    let found = problems(text, &accepted);
    let said = |needle: &str| found.iter().any(|p| p.contains(needle));
    assert!(
        said("`server.listen` is documented twice (lines 5 and 6)"),
        "{found:#?}"
    );
    assert!(
        said("`server.no_such_key` is documented, but"),
        "{found:#?}"
    );
    assert!(
        said("no row for `server.data_dir`, which the configuration accepts: add the row \"| `data_dir` | <default> | <what it does> |\" to the table under the heading `[server]` (line 1)"),
        "{found:#?}"
    );
    assert!(said("no row for `tools.env`"), "{found:#?}");
    assert!(
        said("under a new heading \"## `[[tools]]`\" with a table"),
        "{found:#?}"
    );
}
