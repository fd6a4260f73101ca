//! Reload: re-reads the configuration file the server started with, on SIGHUP or
//! `mcp-taskd reload` (the admin socket; the systemd unit's `ExecReload=`), and applies
//! it without a restart.
//!
//! A reload is all or nothing. The file is loaded and checked as `check-config` checks
//! it, and everything it serves is built ([`Settings::build`]); any error leaves the
//! server on the configuration it runs, logs one line naming the key, and is the answer
//! `mcp-taskd reload` prints (exiting non-zero, so `systemctl reload` fails too).
//! Otherwise the keys that need a restart keep their running values (and are named in
//! the log and the answer), the new settings are swapped in whole ([`Live`]), and what
//! outlives a request is told what changed:
//! - listen streams, legacy sessions and their streams opened with a token the new
//!   configuration no longer grants end (dashboard logins end at their next request);
//! - open listen streams and legacy sessions get `notifications/tools/list_changed`
//!   (and `prompts/list_changed`) when the lists changed;
//! - concurrency slots carry over to the new definitions of the same tools, and the
//!   metrics start series for new tools;
//! - the hub takes the new `[notifications]` limits.
//!
//! Reloads run one at a time. systemd hears `RELOADING=1` (with `MONOTONIC_USEC=`)
//! when one starts and `READY=1` when it ends, whatever its outcome.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use serde_json::{json, Value};
use taskd_auth::Authenticator;

use crate::config::{Config, ConfigError};
use crate::live::{keep_running, Live, Settings, SettingsError};
use crate::metrics::Metrics;
use crate::registration;
use taskd_notifications::{Hub, ListKind};
use taskd_upstreams::Upstreams;

/// Where the running configuration came from: the file `serve` read and the
/// command-line options that override it. A reload reads the same file and applies the
/// same overrides.
#[derive(Debug, Clone, Default)]
pub struct ConfigSource {
    /// `--config`, made absolute at start; `None`: the embedded default.
    pub file: Option<PathBuf>,
    /// `--listen`.
    pub listen: Option<SocketAddr>,
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `--accept-data-loss` (see `StoreConfig::accept_data_loss`).
    pub accept_data_loss: bool,
}

impl ConfigSource {
    /// Loads and checks the configuration, overrides applied. Its upstreams must build
    /// (they are restart-only: a reload would otherwise never look at them); its
    /// command tools are built when the settings are (`live::Settings::build`).
    pub fn load(&self) -> Result<Config, ConfigError> {
        let mut config = Config::load(self.file.as_deref())?;
        if let Some(listen) = self.listen {
            config.server.listen = listen;
        }
        if let Some(data_dir) = &self.data_dir {
            config.server.data_dir = data_dir.clone();
        }
        config.store.accept_data_loss = self.accept_data_loss;
        config.check()?;
        registration::upstreams(&config)
            .map_err(|error| crate::config::in_file(self.file.as_deref(), error))?;
        Ok(config)
    }
}

/// Why a reload was refused; the running configuration is unchanged. Each is one
/// sentence, as the log, the systemd status and `mcp-taskd reload` show it.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("the server was started without --config: there is no configuration file to re-read")]
    NoFile,
    /// The file does not load, said on one line (naming the key where it can).
    #[error("{0}")]
    File(String),
    /// The configuration that would run (restart-only keys at their running values)
    /// fails a check.
    #[error(transparent)]
    Check(#[from] ConfigError),
    #[error(transparent)]
    Settings(#[from] SettingsError),
}

/// What a successful reload changed.
#[derive(Debug, Default)]
pub struct Report {
    pub file: PathBuf,
    /// Restart-only keys the file changed: they kept their running values.
    pub restart_needed: Vec<&'static str>,
    pub tools_added: Vec<String>,
    pub tools_removed: Vec<String>,
    pub tools_changed: Vec<String>,
    /// `[[schedules]]` by name (the scheduler takes them up at its next pass).
    pub schedules_added: Vec<String>,
    pub schedules_removed: Vec<String>,
    pub schedules_changed: Vec<String>,
    pub tokens_added: usize,
    pub tokens_removed: usize,
    /// Listen streams and legacy sessions ended because their token was revoked.
    pub streams_ended: usize,
    pub sessions_ended: usize,
}

impl Report {
    /// The admin socket's answer.
    pub fn to_json(&self) -> Value {
        json!({
            "file": self.file,
            "restartNeeded": self.restart_needed,
            "tools": {
                "added": self.tools_added,
                "removed": self.tools_removed,
                "changed": self.tools_changed,
            },
            "schedules": {
                "added": self.schedules_added,
                "removed": self.schedules_removed,
                "changed": self.schedules_changed,
            },
            "tokens": { "added": self.tokens_added, "removed": self.tokens_removed },
            "ended": { "listenStreams": self.streams_ended, "sessions": self.sessions_ended },
        })
    }

    /// One line for the log (names and counts only: nothing sensitive).
    fn summary(&self) -> String {
        let mut parts = Vec::new();
        let names = |names: &[String]| names.join(", ");
        if !self.tools_added.is_empty() {
            parts.push(format!("tools added: {}", names(&self.tools_added)));
        }
        if !self.tools_removed.is_empty() {
            parts.push(format!("tools removed: {}", names(&self.tools_removed)));
        }
        if !self.tools_changed.is_empty() {
            parts.push(format!("tools changed: {}", names(&self.tools_changed)));
        }
        for (names_of, what) in [
            (&self.schedules_added, "schedules added"),
            (&self.schedules_removed, "schedules removed"),
            (&self.schedules_changed, "schedules changed"),
        ] {
            if !names_of.is_empty() {
                parts.push(format!("{what}: {}", names(names_of)));
            }
        }
        if self.tokens_added + self.tokens_removed > 0 {
            parts.push(format!(
                "tokens: {} added, {} removed ({} listen stream(s) and {} session(s) ended)",
                self.tokens_added, self.tokens_removed, self.streams_ended, self.sessions_ended
            ));
        }
        if !self.restart_needed.is_empty() {
            parts.push(format!(
                "needs a restart, kept running values: {}",
                self.restart_needed.join(", ")
            ));
        }
        if parts.is_empty() {
            parts.push("no tool or token changed".into());
        }
        format!("reloaded {}: {}", self.file.display(), parts.join("; "))
    }
}

/// Applies reloads to a running server.
/// What holds connections opened with credentials a reload may revoke (the HTTP
/// frontend: its listen streams and legacy sessions). Owned here, implemented by the
/// transport, so that operating the server never reaches up into it.
pub trait Revoke: Send + Sync {
    /// Ends every stream and session whose credential `auth` no longer grants its
    /// identity; how many streams and sessions ended.
    fn revoke(&self, auth: &Authenticator) -> (usize, usize);
}

pub struct Reloader {
    source: ConfigSource,
    live: Arc<Live>,
    hub: Arc<Hub>,
    metrics: Arc<Metrics>,
    /// Their tools as last listed are part of what a reload builds.
    upstreams: Arc<Upstreams>,
    /// Not kept alive by the reloader (which the admin socket holds): a drain drops
    /// the frontend, and the store with it, while the socket may still answer.
    frontend: Weak<dyn Revoke>,
    /// One reload at a time.
    running: Mutex<()>,
}

impl Reloader {
    pub fn new(
        source: ConfigSource,
        live: Arc<Live>,
        hub: Arc<Hub>,
        metrics: Arc<Metrics>,
        upstreams: Arc<Upstreams>,
        frontend: Weak<dyn Revoke>,
    ) -> Reloader {
        Reloader {
            source,
            live,
            hub,
            metrics,
            upstreams,
            frontend,
            running: Mutex::new(()),
        }
    }

    /// Re-reads and applies the configuration file; `trigger` (`SIGHUP`, `mcp-taskd
    /// reload`) is for the log. An error is one sentence, the running configuration
    /// unchanged.
    pub fn reload(&self, trigger: &str) -> Result<Report, ReloadError> {
        let _one_at_a_time = self.running.lock().unwrap_or_else(|p| p.into_inner());
        super::systemd::reloading();
        let outcome = self.apply();
        match &outcome {
            Ok(report) => {
                log::info!("{} ({trigger})", report.summary());
                super::systemd::reloaded("reloaded the configuration");
            }
            Err(why) => {
                log::error!(
                    "reload ({trigger}) refused, still running on the previous configuration: {why}"
                );
                super::systemd::reloaded(&format!(
                    "reload refused, previous configuration kept: {why}"
                ));
            }
        }
        outcome
    }

    fn apply(&self) -> Result<Report, ReloadError> {
        let Some(frontend) = self.frontend.upgrade() else {
            return Err(ReloadError::ShuttingDown);
        };
        let Some(file) = self.source.file.clone() else {
            return Err(ReloadError::NoFile);
        };
        let mut config = self
            .source
            .load()
            .map_err(|error| ReloadError::File(one_line(&error, &file)))?;
        let _updating = self.live.updating();
        let running = self.live.load_full();
        let restart_needed = keep_running(&mut config, &running.config);
        // Not a key of the file: the listener keeps the address it bound.
        config.server.bound = running.config.server.bound;
        // The configuration that will run (restart-only keys at their running values)
        // must pass the checks too: say, tokens removed while listening beyond loopback.
        config.check()?;
        let mut settings = Settings::build(config, &self.hub, &self.upstreams)?;
        if let Some(tools) = Arc::get_mut(&mut settings.tools) {
            tools.adopt_slots(&running.tools);
        }
        let (tokens_added, tokens_removed) = token_changes(&running.config, &settings.config);
        let (tools_added, tools_removed, tools_changed) = tool_changes(&running, &settings);
        let (schedules_added, schedules_removed, schedules_changed) =
            schedule_changes(&running.config, &settings.config);
        let tools_list_changed = tools_list(&running) != tools_list(&settings);
        let prompts_list_changed = prompts_list(&running) != prompts_list(&settings);
        let notification_limits = settings.config.notifications.clone();
        let new_tools: Vec<String> = tools_added.clone();

        self.live.swap(settings);

        let current = self.live.load_full();
        let (streams_ended, sessions_ended) = frontend.revoke(&current.auth);
        self.hub.set_limits(notification_limits);
        self.metrics.add_tools(new_tools.iter().map(String::as_str));
        if tools_list_changed {
            self.hub.publish_list_changed(ListKind::Tools);
        }
        if prompts_list_changed {
            self.hub.publish_list_changed(ListKind::Prompts);
        }
        Ok(Report {
            file,
            restart_needed,
            tools_added,
            tools_removed,
            tools_changed,
            schedules_added,
            schedules_removed,
            schedules_changed,
            tokens_added,
            tokens_removed,
            streams_ended,
            sessions_ended,
        })
    }
}

/// The schedules (by name) added, removed and changed (any key of their entry).
fn schedule_changes(old: &Config, new: &Config) -> (Vec<String>, Vec<String>, Vec<String>) {
    let entries = |config: &Config| -> BTreeMap<String, String> {
        config
            .schedules
            .iter()
            .map(|entry| (entry.name.clone(), format!("{entry:?}")))
            .collect()
    };
    let (old, new) = (entries(old), entries(new));
    let added = new
        .keys()
        .filter(|name| !old.contains_key(*name))
        .cloned()
        .collect();
    let removed = old
        .keys()
        .filter(|name| !new.contains_key(*name))
        .cloned()
        .collect();
    let changed = new
        .iter()
        .filter(|(name, entry)| old.get(*name).is_some_and(|was| was != *entry))
        .map(|(name, _)| name.clone())
        .collect();
    (added, removed, changed)
}

/// The tokens (by digest) added and removed.
fn token_changes(old: &Config, new: &Config) -> (usize, usize) {
    let digests = |config: &Config| -> BTreeSet<String> {
        config
            .auth
            .tokens
            .iter()
            .map(|token| token.sha256.to_ascii_lowercase())
            .collect()
    };
    let (old, new) = (digests(old), digests(new));
    (new.difference(&old).count(), old.difference(&new).count())
}

/// Each tool's definition as text, for telling a changed tool from an unchanged one:
/// its spec and, for a command tool, its declaration (program, arguments, environment).
/// Compared only, never logged.
fn definitions(settings: &Settings) -> BTreeMap<String, String> {
    settings
        .tools
        .all()
        .iter()
        .map(|tool| {
            let name = &tool.spec.name;
            let command = settings
                .config
                .tools
                .iter()
                .find(|command| &command.name == name)
                .map(|command| format!("{command:?}"));
            (name.clone(), format!("{:?} {command:?}", tool.spec))
        })
        .collect()
}

/// The tools added, removed and changed, by name.
fn tool_changes(old: &Settings, new: &Settings) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (old, new) = (definitions(old), definitions(new));
    let added = new.keys().filter(|name| !old.contains_key(*name)).cloned();
    let removed = old.keys().filter(|name| !new.contains_key(*name)).cloned();
    let changed = new
        .iter()
        .filter(|(name, definition)| old.get(*name).is_some_and(|old| old != *definition))
        .map(|(name, _)| name.clone());
    (added.collect(), removed.collect(), changed.collect())
}

/// What `tools/list` shows, in order.
fn tools_list(settings: &Settings) -> Vec<Value> {
    settings
        .tools
        .all()
        .iter()
        .map(|tool| tool.spec.to_json())
        .collect()
}

/// What `prompts/list` shows, in order.
fn prompts_list(settings: &Settings) -> Vec<Value> {
    settings
        .catalog
        .prompts
        .iter()
        .map(|prompt| prompt.to_json())
        .collect()
}

/// A configuration error as one log line that names the key: TOML's own errors point
/// at a line of the file (a snippet), from which the key and its table are read; the
/// snippet and quoted values are left out (a value may be a secret, an environment
/// variable's).
fn one_line(error: &ConfigError, file: &Path) -> String {
    let mut error = error;
    while let ConfigError::InFile { source, .. } = error {
        error = source;
    }
    let key = match error {
        ConfigError::Toml(toml) => toml.span().and_then(|span| {
            let text = std::fs::read_to_string(file).ok()?;
            key_at(&text, span.start)
        }),
        _ => None,
    };
    let flatten = |text: &str| -> String {
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !is_snippet(line))
            .collect();
        lines.join(": ")
    };
    let message = match error {
        ConfigError::Toml(toml) => without_quoted(&flatten(toml.message())),
        ConfigError::ToolEntry { label, detail } => {
            format!("{label}: {}", without_quoted(&flatten(detail)))
        }
        other => flatten(&other.to_string()),
    };
    match key {
        Some(key) => format!("{}: {key}: {message}", file.display()),
        None => format!("{}: {message}", file.display()),
    }
}

/// `text` with what it quotes left out: serde quotes the value it could not take
/// (`invalid type: string "…"`), and a value may be a secret.
fn without_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut quoted = false;
    for c in text.chars() {
        if c == '"' {
            if !quoted {
                out.push_str("\"…\"");
            }
            quoted = !quoted;
        } else if !quoted {
            out.push(c);
        }
    }
    out
}

/// A line of a TOML error's snippet: `  |`, `3 | key = …`, `  |   ^^^`.
fn is_snippet(line: &str) -> bool {
    let rest = line
        .trim_start_matches(|c: char| c.is_ascii_digit())
        .trim_start();
    rest.starts_with('|')
}

/// The dotted key whose line holds byte `at` of `text`, inside the nearest table
/// header above it (`limits.max_body_bytes`, `tools.timeout_ms`).
fn key_at(text: &str, at: usize) -> Option<String> {
    let before = text.get(..at)?;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("");
    let key = line
        .split_once('=')
        .map(|(key, _)| key.trim().trim_matches('"').to_owned());
    let table = before[..line_start].lines().rev().find_map(|line| {
        let line = line.trim();
        let name = line
            .strip_prefix("[[")
            .and_then(|rest| rest.strip_suffix("]]"))
            .or_else(|| line.strip_prefix('[').and_then(|r| r.strip_suffix(']')))?;
        Some(name.trim().to_owned())
    });
    match (table, key) {
        (Some(table), Some(key)) => Some(format!("{table}.{key}")),
        (None, Some(key)) => Some(key),
        (Some(table), None) => Some(table),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_toml_error_becomes_one_line_naming_the_key_without_the_value() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        let text = "[server]\nname = \"x\"\n\n[limits]\npage_size = \"secret-ish\"\n";
        std::fs::write(&file, text).unwrap();
        let error = Config::load(Some(&file)).unwrap_err();
        let line = one_line(&error, &file);
        assert!(!line.contains('\n'), "{line}");
        assert!(line.contains("limits.page_size"), "{line}");
        assert!(!line.contains("secret-ish"), "{line}");
    }

    #[test]
    fn keys_are_found_under_their_table() {
        let text = "top = 1\n[[tools]]\nname = \"a\"\ntimeout_ms = 5\n";
        assert_eq!(key_at(text, 2).as_deref(), Some("top"));
        let at = text.find("timeout_ms").unwrap() + 3;
        assert_eq!(key_at(text, at).as_deref(), Some("tools.timeout_ms"));
    }
}
