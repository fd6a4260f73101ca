//! The workspace's layout, as docs/code-map.md draws it: each crate under `crates/`
//! depends (for its library, dev-dependencies aside) only on the workspace crates its
//! floor allows. Cargo already refuses a cycle; this refuses what Cargo would accept: a
//! dependency that skips a layer's rule, such as a store on the other store, or the
//! engine on the authentication crate.

use std::collections::BTreeMap;
use std::path::Path;

/// What each crate may depend on among the workspace's crates (docs/code-map.md).
const ALLOWED: &[(&str, &[&str])] = &[
    ("taskd-protocol", &[]),
    ("taskd-base", &[]),
    ("taskd-testkit", &[]),
    ("taskd-telemetry", &["taskd-protocol", "taskd-base"]),
    ("taskd-notifications", &["taskd-protocol", "taskd-base"]),
    ("taskd-auth", &["taskd-protocol", "taskd-base"]),
    (
        "taskd-tools",
        &["taskd-protocol", "taskd-base", "taskd-telemetry"],
    ),
    (
        "taskd-engine",
        &[
            "taskd-protocol",
            "taskd-base",
            "taskd-telemetry",
            "taskd-notifications",
            "taskd-tools",
        ],
    ),
    (
        "taskd-upstreams",
        &[
            "taskd-protocol",
            "taskd-base",
            "taskd-telemetry",
            "taskd-tools",
        ],
    ),
    (
        "taskd-builtin",
        &[
            "taskd-protocol",
            "taskd-base",
            "taskd-notifications",
            "taskd-tools",
        ],
    ),
    (
        "taskd-sqlite",
        &["taskd-protocol", "taskd-base", "taskd-engine"],
    ),
    (
        "taskd-postgres",
        &["taskd-protocol", "taskd-base", "taskd-engine"],
    ),
    (
        "taskd-webhooks",
        &["taskd-protocol", "taskd-base", "taskd-engine"],
    ),
];

/// The workspace crates a manifest's `[dependencies]` name.
fn workspace_dependencies(manifest: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).expect("a crate's Cargo.toml");
    let parsed: toml::Table = text.parse().expect("Cargo.toml is TOML");
    parsed
        .get("dependencies")
        .and_then(toml::Value::as_table)
        .map(|table| {
            table
                .keys()
                .filter(|name| name.starts_with("taskd-"))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn every_crate_depends_only_on_the_crates_its_floor_allows() {
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut seen = Vec::new();
    let mut problems = Vec::new();
    for entry in std::fs::read_dir(&crates).expect("crates/") {
        let dir = entry.expect("an entry of crates/").path();
        let name = format!(
            "taskd-{}",
            dir.file_name()
                .and_then(|name| name.to_str())
                .unwrap_or_default()
        );
        seen.push(name.clone());
        if name == "taskd-server" {
            continue; // the top library: it assembles every crate below it
        }
        let Some(may) = allowed.get(name.as_str()) else {
            problems.push(format!("{name}: not in the layout table (tests/layout.rs)"));
            continue;
        };
        for dependency in workspace_dependencies(&dir.join("Cargo.toml")) {
            if !may.contains(&dependency.as_str()) {
                problems.push(format!("{name} depends on {dependency}"));
            }
        }
    }
    assert!(seen.contains(&"taskd-server".to_owned()), "{seen:?}");
    assert!(
        problems.is_empty(),
        "dependencies that run against the layout (docs/code-map.md):\n{}",
        problems.join("\n")
    );
}
