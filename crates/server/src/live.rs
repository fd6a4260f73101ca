//! The live configuration: what a reload (SIGHUP, `mcp-taskd reload`) can change while
//! the server runs, held as one [`Settings`] value that is swapped whole.
//!
//! Whatever serves a request reads `live.load()` once and uses that snapshot to the end
//! of the request, so a request never sees half of one configuration and half of the
//! next; a running task attempt keeps the tool definition it started with (it holds
//! its `Arc<Registered>`). Nothing is threaded through the modules but this handle:
//! a reload builds a complete new [`Settings`] (failing as `check-config` would,
//! before anything changes), swaps it in, and `ops::reload` then tells the few holders
//! of long-lived state what changed (streams and sessions of revoked tokens, the
//! `list_changed` notifications, metrics for new tools).
//!
//! # Making a configuration section reloadable
//!
//! Every key the configuration accepts is either in [`RESTART_ONLY`] or reloadable; the
//! test `every_key_is_reloadable_or_restart_only` fails for a key in neither (or both),
//! naming it. To make a key reloadable:
//!
//! 1. read it where it is used from `live.load().config` (or from a value built from it
//!    in [`Settings::build`], like the authenticator), not from a copy taken at start;
//! 2. if something long-lived must react when it changes, do that in
//!    `ops::reload::Reloader::apply`;
//! 3. add its key to [`LIVE`] and to the table in `docs/reload.md`.
//!
//! A key that cannot change safely while serving goes into [`RESTART_ONLY`] (and the
//! table): a reload then keeps its running value and reports the key as needing a
//! restart.

use std::sync::Arc;

use arc_swap::{ArcSwap, Guard};

use taskd_auth::oauth::OAuth;
use taskd_auth::Authenticator;
use taskd_engine::config::TaskDefaults;
use taskd_engine::history::HistoryConfig;
use taskd_engine::output::OutputRules;
use taskd_engine::schedules::Schedule;
use taskd_engine::shares::Share;
use taskd_engine::{EngineSettings, SettingsSource};
use taskd_notifications::Hub;
use taskd_protocol::Identity;
use taskd_tools::catalog::Catalog;
use taskd_tools::command::CommandTool;
use taskd_tools::{RegistrationError, Registry};
use taskd_upstreams::Upstreams;

use crate::config::{Config, ConfigError};
use crate::origins::OriginPolicy;
use crate::registration::{build_catalog, command_tools};
use crate::shares::Shares;

/// Why a configuration cannot be put in force.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// A `[[tools]]` declaration that does not build.
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Registration(#[from] RegistrationError),
}

/// One complete configuration as the server applies it.
pub struct Settings {
    /// The configuration as loaded (command-line overrides applied), with every
    /// restart-only key at its running value.
    pub config: Config,
    /// The tokens of `[[auth.tokens]]` and `[auth.oauth]` (shared by settings that
    /// differ only in their tools: its key set and caches live on).
    pub auth: Arc<Authenticator>,
    /// `server.allowed_hosts` and `server.allowed_origins`.
    pub origins: Arc<OriginPolicy>,
    /// The command tools of `[[tools]]`, built (registered into `tools` too).
    pub commands: Arc<[Arc<CommandTool>]>,
    /// The tools served: built-in sets and `[[tools]]`.
    pub tools: Arc<Registry>,
    /// Resources and prompts of the built-in sets.
    pub catalog: Arc<Catalog>,
    /// Each identity's weight and priority in the queue (`[[auth.tokens]]`).
    pub shares: Arc<Shares>,
    /// `[output]`, its patterns compiled.
    pub output: Arc<OutputRules>,
    /// `[[schedules]]`, built and checked against the tools.
    pub schedules: Arc<[Schedule]>,
}

impl Settings {
    /// Everything `config` serves, built and checked as `check-config` does; an error
    /// leaves nothing changed.
    pub fn build(
        config: Config,
        hub: &Arc<Hub>,
        upstreams: &Upstreams,
    ) -> Result<Settings, SettingsError> {
        let commands: Arc<[Arc<CommandTool>]> = command_tools(&config)?.into();
        let (tools, catalog) = build_catalog(&config, &commands, hub, upstreams)?;
        let schedules = crate::registration::schedules(&config, &tools)?.into();
        Ok(Settings {
            schedules,
            commands,
            auth: Arc::new(authenticator(&config)),
            origins: Arc::new(OriginPolicy::new(
                &config.server.allowed_hosts,
                &config.server.allowed_origins,
            )),
            tools: Arc::new(tools),
            catalog: Arc::new(catalog),
            shares: Arc::new(Shares::new(&config)),
            output: Arc::new(OutputRules::new(&config.output).map_err(ConfigError::from)?),
            config,
        })
    }
}

impl Settings {
    /// These settings with the listener's bound address known (the OAuth resource URL
    /// of a loopback listener names its port); tools and catalog are shared.
    pub fn with_bound_address(&self, address: std::net::SocketAddr) -> Settings {
        let mut config = self.config.clone();
        config.server.bound = Some(address);
        Settings {
            auth: Arc::new(authenticator(&config)),
            origins: Arc::new(OriginPolicy::new(
                &config.server.allowed_hosts,
                &config.server.allowed_origins,
            )),
            commands: Arc::clone(&self.commands),
            tools: Arc::clone(&self.tools),
            catalog: Arc::clone(&self.catalog),
            shares: Arc::clone(&self.shares),
            output: Arc::clone(&self.output),
            schedules: Arc::clone(&self.schedules),
            config,
        }
    }
}

impl Settings {
    /// These settings serving what `upstreams` list now (an upstream's lists changed);
    /// everything else is shared, the authenticator's caches included.
    pub fn with_upstream_lists(
        &self,
        hub: &Arc<Hub>,
        upstreams: &Upstreams,
    ) -> Result<Settings, RegistrationError> {
        let (mut tools, catalog) = build_catalog(&self.config, &self.commands, hub, upstreams)?;
        tools.adopt_slots(&self.tools);
        Ok(Settings {
            config: self.config.clone(),
            commands: Arc::clone(&self.commands),
            auth: Arc::clone(&self.auth),
            origins: Arc::clone(&self.origins),
            tools: Arc::new(tools),
            catalog: Arc::new(catalog),
            shares: Arc::clone(&self.shares),
            output: Arc::clone(&self.output),
            schedules: Arc::clone(&self.schedules),
        })
    }
}

/// The static tokens of `[[auth.tokens]]` and the access tokens of `[auth.oauth]`.
fn authenticator(config: &Config) -> Authenticator {
    let oauth = config.auth.oauth.as_ref().and_then(|oauth| {
        // `Config::check` refuses [auth.oauth] where there is no resource URL.
        let resource = config.resource_url()?;
        let (origin, _) = taskd_auth::oauth::discovery::split_origin(&resource);
        let sign_in_redirect = format!("{origin}{}/sign-in/callback", config.dashboard.path);
        Some(OAuth::new(
            oauth,
            config.auth.client_secret.as_ref(),
            &resource,
            &config.server.endpoint,
            &config.server.name,
            sign_in_redirect,
        ))
    });
    Authenticator::new(&config.server.endpoint, &config.auth.tokens).with_oauth(oauth)
}

/// The current [`Settings`], swapped atomically by a reload.
pub struct Live {
    current: ArcSwap<Settings>,
    /// Held by whoever builds new settings from the current ones (a reload, an
    /// upstream's new tool list), so that one never swaps out what another swapped in.
    updating: std::sync::Mutex<()>,
}

impl Live {
    pub fn new(settings: Settings) -> Live {
        Live {
            current: ArcSwap::from_pointee(settings),
            updating: std::sync::Mutex::new(()),
        }
    }

    /// The settings in force now: cheap (no lock, no allocation). Hold it for one
    /// request or one step, not across waits: a reload cannot free what a guard holds.
    pub fn load(&self) -> Guard<Arc<Settings>> {
        self.current.load()
    }

    /// The settings in force now, to keep.
    pub fn load_full(&self) -> Arc<Settings> {
        self.current.load_full()
    }

    /// The right to build new settings from the current ones and swap them in: hold it
    /// from [`Live::load_full`] to [`Live::swap`].
    pub fn updating(&self) -> std::sync::MutexGuard<'_, ()> {
        self.updating
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Puts `settings` in force; returns the ones they replace.
    pub(crate) fn swap(&self, settings: Settings) -> Arc<Settings> {
        self.current.swap(Arc::new(settings))
    }
}

/// The engine reads the tools, `[tasks]`, the shares, `[output]` and `[history]` in force
/// through these.
impl EngineSettings for Settings {
    fn tools(&self) -> &Arc<Registry> {
        &self.tools
    }

    fn tasks(&self) -> &TaskDefaults {
        &self.config.tasks
    }

    fn share(&self, identity: &Identity) -> &Share {
        self.shares.of(identity)
    }

    fn output(&self) -> &OutputRules {
        &self.output
    }

    fn schedules(&self) -> &[Schedule] {
        &self.schedules
    }

    fn history(&self) -> &HistoryConfig {
        &self.config.history
    }
}

impl SettingsSource for Live {
    fn current(&self) -> Arc<dyn EngineSettings> {
        self.load_full()
    }
}

/// Declares the restart-only keys: [`RESTART_ONLY`] lists them, and [`keep_running`]
/// puts back the running value of each one a new configuration changes.
macro_rules! restart_only {
    ($($key:literal => $($field:ident).+;)*) => {
        /// Keys that take effect only at start: a reload keeps their running values and
        /// reports the ones the file changed.
        pub const RESTART_ONLY: &[&str] = &[$($key),*];

        /// Sets every restart-only key of `new` back to its value in `running`; returns
        /// the keys whose value differed, in [`RESTART_ONLY`] order.
        pub fn keep_running(new: &mut Config, running: &Config) -> Vec<&'static str> {
            let mut kept = Vec::new();
            $(
                // The values' Debug forms compare them: these are plain values, and
                // not every configuration type derives PartialEq.
                if format!("{:?}", new.$($field).+) != format!("{:?}", running.$($field).+) {
                    new.$($field).+ = running.$($field).+.clone();
                    kept.push($key);
                }
            )*
            kept
        }
    };
}

restart_only! {
    // The listener, its bounds and the identity endpoint tasks are bound to.
    "server.listen" => server.listen;
    "server.data_dir" => server.data_dir;
    "server.endpoint" => server.endpoint;
    "server.handler_threads" => server.handler_threads;
    "server.max_connections" => server.max_connections;
    "server.idle_timeout_ms" => server.idle_timeout_ms;
    "server.request_timeout_ms" => server.request_timeout_ms;
    "server.write_timeout_ms" => server.write_timeout_ms;
    "server.min_write_bytes_per_sec" => server.min_write_bytes_per_sec;
    // The listener's buffers are sized at start.
    "limits.max_body_bytes" => limits.max_body_bytes;
    "limits.max_buffered_request_bytes" => limits.max_buffered_request_bytes;
    "limits.max_unsent_answer_bytes" => limits.max_unsent_answer_bytes;
    // Sealed request states must keep opening under the lifetime they were sealed for.
    "limits.request_state_ttl_ms" => limits.request_state_ttl_ms;
    // The store is opened once.
    "store.backend" => store.backend;
    "store.url" => store.url;
    "store.password_file" => store.password_file;
    "store.pool_size" => store.pool_size;
    "store.synchronous" => store.synchronous;
    "store.busy_timeout_ms" => store.busy_timeout_ms;
    "store.read_connections" => store.read_connections;
    "store.cache_bytes" => store.cache_bytes;
    "store.integrity_check_ms" => store.integrity_check_ms;
    "store.min_free_bytes" => store.min_free_bytes;
    "store.locking" => store.locking;
    "store.checkpoints" => store.checkpoints;
    // Threads, leases and timers of the workers and the janitor.
    "workers.threads" => workers.threads;
    "workers.lease_ms" => workers.lease_ms;
    "workers.shutdown_grace_ms" => workers.shutdown_grace_ms;
    "workers.janitor_interval_ms" => workers.janitor_interval_ms;
    "tasks.max_payload_bytes_in_flight" => tasks.max_payload_bytes_in_flight;
    "tasks.bridge" => tasks.bridge;
    "tasks.inline_wait_ms" => tasks.inline_wait_ms;
    // Legacy sessions' table.
    "sessions.max_sessions" => sessions.max_sessions;
    "sessions.idle_timeout_ms" => sessions.idle_timeout_ms;
    "sessions.client_request_timeout_ms" => sessions.client_request_timeout_ms;
    "sessions.replay_events" => sessions.replay_events;
    // The dashboard's routes are set up at start.
    "dashboard.enabled" => dashboard.enabled;
    "dashboard.path" => dashboard.path;
    // The exporter (its thread, endpoint and resource) and the logger are set up once.
    "telemetry.otlp_endpoint" => telemetry.otlp_endpoint;
    "telemetry.service_name" => telemetry.service_name;
    "telemetry.batch_delay_ms" => telemetry.batch_delay_ms;
    "telemetry.max_spans_per_second" => telemetry.max_spans_per_second;
    "telemetry.metrics_interval_ms" => telemetry.metrics_interval_ms;
    "log.format" => log.format;
    // Upstream servers run as long as the server: their sessions hold callers' state.
    "upstreams" => upstreams;
}

/// Keys (or whole tables, by their name) a reload applies while serving.
pub const LIVE: &[&str] = &[
    "server.allowed_hosts",
    "server.allowed_origins",
    "server.allow_unauthenticated_remote",
    "server.name",
    "server.instructions",
    "limits.max_json_depth",
    "limits.page_size",
    "limits.cache_ttl_ms",
    "tasks.ttl_ms",
    "tasks.poll_interval_ms",
    // Read from the shares at each creation.
    "tasks.max_live_tasks_per_identity",
    "tasks.creations_per_sec_per_identity",
    "tasks.creation_burst_per_identity",
    // Read from the shares as each bridged call starts waiting.
    "tasks.max_inline_waits_per_identity",
    // Read from the shares at each login: logins already open stay open.
    "dashboard.max_logins_per_identity",
    "notifications.max_subscriptions",
    // Read from the shares at each `initialize`: sessions already open stay open.
    "sessions.max_sessions_per_identity",
    "notifications.max_subscriptions_per_identity",
    "notifications.max_task_ids",
    "notifications.queue_len",
    "notifications.max_stall_ms",
    "notifications.keep_alive_ms",
    "notifications.max_stream_lifetime_ms",
    // Read as each attempt starts: a running attempt keeps the rules it started with.
    "output",
    "auth.tokens",
    // A reload builds a new verifier: its key set is fetched again at the next token.
    "auth.oauth",
    "server.public_url",
    "builtin.sets",
    "tools",
    // Read by the scheduler at each pass: added, changed and removed while serving.
    "schedules",
    // The dashboard reads it per page load.
    "telemetry.trace_url",
    // Followed within a second: webhooks added, changed (their secrets read again) and
    // removed; deliveries already recorded stay.
    "webhooks",
    // Read by the janitor at each round: summaries already written keep their time.
    "history",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_only_keys_keep_their_running_values_and_are_named() {
        let running = Config::parse("[server]\nlisten = \"127.0.0.1:9000\"\n").unwrap();
        let mut new = Config::parse(
            "[server]\nlisten = \"127.0.0.1:9001\"\nname = \"renamed\"\n\
             [workers]\nthreads = 3\n[limits]\npage_size = 7\n",
        )
        .unwrap();
        let kept = keep_running(&mut new, &running);
        assert_eq!(kept, vec!["server.listen", "workers.threads"]);
        assert_eq!(new.server.listen, running.server.listen);
        assert_eq!(new.workers.threads, running.workers.threads);
        assert_eq!(new.server.name, "renamed", "live keys keep the new value");
        assert_eq!(new.limits.page_size, 7);
        let mut same = running.clone();
        assert!(keep_running(&mut same, &running).is_empty());
    }

    #[test]
    fn every_key_is_reloadable_or_restart_only() {
        let covers = |entry: &str, key: &str| key == entry || key.starts_with(&format!("{entry}."));
        let mut problems = Vec::new();
        for key in crate::config::reference::accepted_keys() {
            let live = LIVE.iter().filter(|entry| covers(entry, &key)).count();
            let restart = RESTART_ONLY
                .iter()
                .filter(|entry| covers(entry, &key))
                .count();
            match (live, restart) {
                (1, 0) | (0, 1) => {}
                (0, 0) => problems.push(format!(
                    "{key}: neither reloadable nor restart-only; add it to LIVE or \
                     RESTART_ONLY in crates/server/src/live.rs (see its module doc) and to docs/reload.md"
                )),
                _ => problems.push(format!("{key}: listed more than once in crates/server/src/live.rs")),
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}
