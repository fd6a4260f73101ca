//! Assembly and lifecycle: builds every stage from the configuration ([`Engine`]: the
//! store, workers, upkeep, admin socket and the MCP service, shared by `serve` and
//! `stdio`), serves HTTP until SIGTERM or SIGINT, then drains in order — stop admitting
//! requests, close listen streams gracefully, let in-flight requests finish, give running
//! task attempts their grace period (then release them to the queue), kill what their
//! programs left behind, stop upkeep, and let the writer commit what is queued. Tasks are
//! never failed or cancelled by a shutdown.

use std::error::Error;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use taskd_engine::config::Backend;
use taskd_engine::schedules::Scheduler;
use taskd_engine::upkeep::{StartError, Upkeep, UpkeepCounters};
use taskd_engine::webhooks::WebhookStore;
use taskd_engine::workers::{AttemptObserver, Inflight, WorkerPool};
use taskd_engine::{QuotaCounter, SettingsSource, TaskService, TaskStore};
use taskd_notifications::Hub;
use taskd_sqlite::{OpenError, Opened, Store};
use taskd_tools::command;
use taskd_upstreams::Upstreams;
use taskd_webhooks::{DeliveryCounters, Webhooks};

use crate::config::{Config, ConfigError};
use crate::handlers::bridge::Bridge;
use crate::handlers::request_state::StateSigner;
use crate::handlers::Service;
use crate::listeners::Inherited;
use crate::live::{Live, Settings, SettingsError};
use crate::metrics::{Metrics, Snapshot};
use crate::ops::admin::{Admin, AdminSocket};
use crate::ops::reload::{ConfigSource, Reloader};
use crate::ops::systemd::{Notifier, Serving};
use crate::registration;
use crate::transport::Frontend;

/// How long a drain waits for requests being handled (inline tool runs included) to
/// answer; past it the drain goes on, and the process exits under them.
const HANDLER_DRAIN: Duration = Duration::from_secs(30);

/// How long an open connection may still bring its next request once a drain starts
/// (answered here, with `Connection: close`): a client's next request, sent as soon as
/// it read its last answer, is not cut off; a connection idle for longer is closed.
const IDLE_GRACE: Duration = Duration::from_millis(250);

/// How long a drain waits for the open connections to close (each after its last
/// answer, or after `IDLE_GRACE` without a request).
const CONNECTION_DRAIN: Duration = Duration::from_secs(10);
/// Longest wait at the end of a shutdown for the store's writer to close the store.
const WRITER_CLOSE_WAIT: Duration = Duration::from_secs(3);

/// The name of the key that seals MRTR `requestState` in a shared store.
const REQUEST_STATE_KEY: &str = "request-state";

/// Why the server could not start (or wait for its termination signal).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("data dir {}: {source}", path.display())]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error("request-state key in {}: {source}", data_dir.display())]
    RequestState {
        data_dir: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] OpenError),
    #[error(transparent)]
    Postgres(#[from] taskd_postgres::OpenError),
    #[error("request-state key from the task store: {0}")]
    SharedKey(taskd_engine::StoreError),
    #[error(transparent)]
    Upkeep(#[from] StartError),
    #[error(transparent)]
    Webhooks(#[from] taskd_webhooks::StartError),
    #[error("cannot start the run guard of command tools: {0}")]
    RunGuard(std::io::Error),
    #[error("admin socket in {}: {source}", data_dir.display())]
    AdminSocket {
        data_dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: SocketAddr,
        source: Box<dyn Error + Send + Sync>,
    },
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    #[error(transparent)]
    Telemetry(#[from] taskd_telemetry::TelemetryError),
}

/// Everything behind a transport: the store (holding the data dir's lock), the workers,
/// upkeep, the admin socket, and the MCP service the transports answer through.
pub struct Engine {
    /// The upstream MCP servers and their sessions.
    pub upstreams: Arc<Upstreams>,
    /// The configuration in force (a reload swaps it).
    pub live: Arc<Live>,
    pub service: Arc<Service>,
    pub hub: Arc<Hub>,
    pub metrics: Arc<Metrics>,
    pub store: Arc<dyn TaskStore>,
    pub inflight: Arc<Inflight>,
    workers: WorkerPool,
    upkeep: Upkeep,
    /// Starts the tasks of `[[schedules]]` at their slots.
    scheduler: Scheduler,
    /// Webhook deliveries (`[[webhooks]]`).
    webhooks: Webhooks,
    /// Taken by [`Engine::stop_admitting`].
    admin: Option<AdminSocket>,
    /// What the admin socket answers with, for the dashboard too.
    pub operator: Arc<Admin>,
    writer: JoinHandle<()>,
    /// The OTLP export of the metrics page, when telemetry is on.
    metrics_export: Option<taskd_telemetry::metrics::MetricsExport>,
    shutdown_grace: Duration,
    /// The data dir's lock, when the store does not hold it (PostgreSQL).
    _data_dir_lock: Option<std::fs::File>,
}

impl Engine {
    /// Opens the store (taking the data dir's lock) and starts upkeep (which recovers
    /// interrupted attempts in the background), the workers
    /// and the admin socket.
    pub fn start(config: &Config) -> Result<Engine, ServeError> {
        let data_dir = &config.server.data_dir;
        std::fs::create_dir_all(data_dir).map_err(|source| ServeError::DataDir {
            path: data_dir.clone(),
            source,
        })?;
        if let Some(traces) = taskd_telemetry::start(&config.telemetry)? {
            log::info!("telemetry on: spans go to {traces}");
        }
        let hub = Arc::new(Hub::new(config.notifications.clone()));
        // Upstream tools as cached at their last listing: served (and their queued tasks
        // run) before the upstreams have started.
        let upstreams = Arc::new(Upstreams::new(&registration::upstreams(config)?, data_dir));
        let live = Arc::new(Live::new(Settings::build(
            config.clone(),
            &hub,
            &upstreams,
        )?));
        // Before any program runs: descendants that leave their process group must come
        // back to the server, not to init, to be found and killed when their run ends.
        command::become_subreaper();
        // Before any program runs: programs must die with the server, `kill -9` included.
        if !config.tools.is_empty() || !upstreams.is_empty() {
            command::guard::keep().map_err(ServeError::RunGuard)?;
        }
        let mut data_dir_lock = None;
        // The engine sees the store through its interface only.
        let (store, webhook_store, writer): (Arc<dyn TaskStore>, Arc<dyn WebhookStore>, _) =
            match config.store.backend {
                Backend::Sqlite => {
                    let Opened { store, writer } = Store::open(data_dir, &config.store)?;
                    (store.clone(), store, writer)
                }
                Backend::Postgres => {
                    // One server per data dir still (its admin socket, its request-state
                    // key file); the tasks are the database's.
                    data_dir_lock = Some(lock_data_dir(data_dir)?);
                    let taskd_postgres::Opened { store, listener } =
                        taskd_postgres::Store::open(&config.store, data_dir)?;
                    (store.clone(), store, listener)
                }
            };
        let ttl_ms = config.limits.request_state_ttl_ms;
        // Nodes sharing a store share the key, so that any node opens a requestState
        // another sealed; a store of one node leaves it in the data dir.
        let signer = match store.shared_key(REQUEST_STATE_KEY) {
            Ok(Some(key)) => StateSigner::with_key(key, ttl_ms),
            Ok(None) => {
                StateSigner::open(data_dir, ttl_ms).map_err(|source| ServeError::RequestState {
                    data_dir: data_dir.clone(),
                    source,
                })?
            }
            Err(error) => return Err(ServeError::SharedKey(error)),
        };
        let inflight = Arc::new(Inflight::default());
        let (wake, woken) = crossbeam_channel::bounded(1);
        let metrics = Arc::new(Metrics::new(
            live.load()
                .tools
                .all()
                .iter()
                .map(|tool| tool.spec.name.as_str()),
        ));
        let tasks = Arc::new(TaskService::new(
            Arc::clone(&live) as Arc<dyn SettingsSource>,
            Arc::clone(&store),
            Arc::clone(&inflight),
            wake.clone(),
            Arc::clone(&metrics) as Arc<dyn QuotaCounter>,
        ));
        let upkeep = Upkeep::start(
            Arc::clone(&store),
            Arc::clone(&live) as Arc<dyn SettingsSource>,
            Arc::clone(&hub),
            Arc::clone(&inflight),
            Arc::clone(&metrics) as Arc<dyn UpkeepCounters>,
            Duration::from_millis(config.workers.janitor_interval_ms),
        )?;
        let webhooks = Webhooks::start(
            Arc::clone(&webhook_store),
            Arc::clone(&metrics) as Arc<dyn DeliveryCounters>,
            {
                let live = Arc::clone(&live);
                Box::new(move || live.load().config.webhooks.clone())
            },
        )?;
        let workers = WorkerPool::start(
            Arc::clone(&store),
            Arc::clone(&live) as Arc<dyn SettingsSource>,
            Arc::clone(&inflight),
            &config.workers,
            Arc::clone(&metrics) as Arc<dyn AttemptObserver>,
            wake,
            woken,
        );
        let scheduler = Scheduler::start(
            Arc::clone(&tasks),
            Arc::clone(&live) as Arc<dyn SettingsSource>,
        )
        .map_err(|error| ServeError::Upkeep(StartError::Thread(error)))?;

        let operator = Arc::new(Admin {
            store: Arc::clone(&store),
            tasks: Arc::clone(&tasks),
            metrics: Arc::clone(&metrics),
            data_dir: data_dir.clone(),
            worker_threads: Some(config.workers.threads),
            reloader: Default::default(),
            webhooks: crate::ops::admin::WebhookOps {
                store: webhook_store,
                live: Arc::clone(&live),
            },
        });
        let admin = AdminSocket::start(Arc::clone(&operator)).map_err(|source| {
            ServeError::AdminSocket {
                data_dir: data_dir.clone(),
                source,
            }
        })?;

        let service = Arc::new(Service {
            live: Arc::clone(&live),
            signer,
            hub: Arc::clone(&hub),
            tasks,
            bridge: Bridge::from_config(config, max_waiting_calls(config)),
        });
        let metrics_export = {
            let (metrics, tasks, hub) = (
                Arc::clone(&metrics),
                Arc::clone(&service.tasks),
                Arc::clone(&hub),
            );
            taskd_telemetry::start_metrics(move || metrics.render(&Snapshot::now(&tasks, &hub)))
        };
        upstreams.start(tools_refresher(&live, &hub, &metrics, &upstreams));
        Ok(Engine {
            upstreams,
            live,
            service,
            hub,
            metrics,
            store,
            inflight,
            workers,
            upkeep,
            scheduler,
            webhooks,
            admin: Some(admin),
            operator,
            writer,
            metrics_export,
            shutdown_grace: Duration::from_millis(config.workers.shutdown_grace_ms),
            _data_dir_lock: data_dir_lock,
        })
    }

    /// First step of a shutdown: the admin socket stops answering operator commands.
    pub fn stop_admitting(&mut self) {
        if let Some(admin) = self.admin.take() {
            admin.stop();
        }
    }

    /// Last step of a shutdown, once the transport admits nothing more: answers owed
    /// for committed creations, running attempts' grace (then back to the queue,
    /// uncounted), leftover processes, upkeep, and the writer's queue.
    pub fn finish(self) {
        // Task creations already committed (or committing) are still owed their answer.
        if !self.store.wait_for_continuations(Duration::from_secs(5)) {
            log::warn!("some task creations were not answered before shutdown");
        }
        // No new scheduled task once the shutdown has begun.
        self.scheduler.stop();
        self.workers.shutdown(self.shutdown_grace);
        // After the workers: attempts in their grace period still talk to upstreams.
        self.upstreams.stop();
        // Runs have ended (or been given up on): whatever they left behind goes too, even
        // descendants whose run could not be told from their environment.
        command::sweep_all();
        self.webhooks.stop();
        self.upkeep.stop();
        // The metrics as they ended; its page reads the store, so before the store goes.
        if let Some(export) = self.metrics_export {
            export.stop();
        }
        let writer = self.writer;
        self.store.close();
        drop(self.service);
        drop(self.store);
        // The writer commits its queue and closes the store cleanly (SQLite: the log
        // checkpointed, the open mark removed). Should it not have in a few seconds
        // (a checkpoint stuck behind a reader), the process exits all the same: the
        // store then counts as not closed cleanly, which costs nothing while its log is
        // there.
        let deadline = Instant::now() + WRITER_CLOSE_WAIT;
        while !writer.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if writer.is_finished() {
            let _ = writer.join();
        }
        // Last: the spans of everything above go out too.
        taskd_telemetry::shutdown();
        log::info!("stopped");
    }
}

/// What an upstream's new tool list does: the settings in force are rebuilt with it
/// (as a reload would, under the same lock), and listeners hear `list_changed`.
fn tools_refresher(
    live: &Arc<Live>,
    hub: &Arc<Hub>,
    metrics: &Arc<Metrics>,
    upstreams: &Arc<Upstreams>,
) -> Box<dyn Fn() + Send + Sync> {
    let (live, hub, metrics) = (Arc::clone(live), Arc::clone(hub), Arc::clone(metrics));
    // Weak: the upstreams hold this closure.
    let upstreams = Arc::downgrade(upstreams);
    Box::new(move || {
        let Some(upstreams) = upstreams.upgrade() else {
            return;
        };
        let _updating = live.updating();
        let running = live.load_full();
        let settings = match running.with_upstream_lists(&hub, &upstreams) {
            Ok(settings) => settings,
            Err(error) => {
                log::error!("an upstream's new tool list could not be served: {error}");
                return;
            }
        };
        let names: Vec<String> = settings
            .tools
            .all()
            .iter()
            .map(|tool| tool.spec.name.clone())
            .collect();
        metrics.add_tools(names.iter().map(String::as_str));
        let prompts = |settings: &Settings| -> Vec<serde_json::Value> {
            settings
                .catalog
                .prompts
                .iter()
                .map(|p| p.to_json())
                .collect()
        };
        let prompts_changed = prompts(&running) != prompts(&settings);
        live.swap(settings);
        hub.publish_list_changed(taskd_notifications::ListKind::Tools);
        if prompts_changed {
            hub.publish_list_changed(taskd_notifications::ListKind::Prompts);
        }
    })
}

/// Takes `data_dir/lock` for the process lifetime, as the SQLite store does.
fn lock_data_dir(data_dir: &std::path::Path) -> Result<std::fs::File, OpenError> {
    let path = data_dir.join("lock");
    let lock = std::fs::File::create(&path).map_err(|e| OpenError::File {
        path: path.clone(),
        source: Box::new(e),
    })?;
    lock.try_lock().map_err(|_| OpenError::InUse {
        data_dir: data_dir.to_owned(),
    })?;
    Ok(lock)
}

/// The dashboard, when this configuration serves one.
fn dashboard(config: &Config, engine: &Engine) -> Option<Arc<crate::dashboard::Dashboard>> {
    if !config.dashboard_enabled() {
        return None;
    }
    let dashboard = crate::dashboard::Dashboard::new(
        &config.dashboard.path,
        Arc::clone(&engine.operator),
        Arc::clone(&engine.hub),
        Arc::clone(&engine.live),
        Arc::clone(&engine.metrics),
        Arc::clone(&engine.upstreams),
    );
    if dashboard.is_none() {
        log::error!("dashboard: no randomness for its session key; not served");
    }
    dashboard.map(Arc::new)
}

/// Runs the server until a termination signal, then shuts down gracefully. SIGHUP
/// re-reads the configuration from `source` (see [`crate::ops::reload`]). With
/// `inherited` (systemd socket activation, [`crate::listeners`]) it serves on that
/// socket instead of binding `server.listen`.
pub fn run(
    mut config: Config,
    mut source: ConfigSource,
    inherited: Option<Inherited>,
) -> Result<(), ServeError> {
    if let Some(passed) = &inherited {
        // The socket's address is where clients reach this server: the checks that
        // depend on it (a non-loopback listener needs tokens and allowed hosts) and
        // every reload apply to it, whatever `server.listen` says.
        if passed.address != config.server.listen {
            log::info!(
                "serving on the socket systemd passed ({}), not server.listen ({})",
                passed.address,
                config.server.listen
            );
        }
        config.server.listen = passed.address;
        source.listen = Some(passed.address);
        config.check()?;
    }
    // Before anything can tell the world we serve (the address line, `READY=1`): a
    // SIGTERM that arrives after those must start the drain, not take the default
    // action and end the process on the spot.
    let mut termination = termination_signals()?;
    let mut engine = Engine::start(&config)?;
    let bounds = crate::transport::limits::bounds(&config);
    let http = match inherited {
        Some(passed) => {
            tiny_http::Server::from_listener_on_connection_threads(passed.listener, bounds)
        }
        None => tiny_http::Server::http_on_connection_threads(config.server.listen, bounds),
    }
    .map_err(|source| ServeError::Listen {
        address: config.server.listen,
        source,
    })?;
    let address = http
        .server_addr()
        .to_ip()
        .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)));
    if config.auth.oauth.is_some() && config.server.public_url.is_none() {
        // The resource URL names the port bound (`--listen 127.0.0.1:0`): known now.
        let bound = engine.live.load_full().with_bound_address(address);
        engine.live.swap(bound);
    }
    let legacy = crate::legacy::Legacy::start(
        Arc::clone(&engine.service),
        Arc::clone(&engine.hub),
        config.sessions.clone(),
        Arc::clone(&engine.metrics),
    );
    let frontend = Arc::new(Frontend {
        service: Arc::clone(&engine.service),
        hub: Arc::clone(&engine.hub),
        live: Arc::clone(&engine.live),
        endpoint: config.server.endpoint.clone(),
        draining: Default::default(),
        open_streams: Default::default(),
        stream_credentials: Default::default(),
        handling: Default::default(),
        metrics: Arc::clone(&engine.metrics),
        legacy,
        listener: http.health(),
        dashboard: dashboard(&config, &engine),
        upstreams: Arc::clone(&engine.upstreams),
    });
    frontend.serve(&http);
    if config.server.handler_threads.is_some() {
        log::warn!(
            "server.handler_threads is obsolete and ignored: each connection's requests are \
             answered on its own thread (see server.max_connections)"
        );
    }
    // The one line on stdout: tests and scripts read the bound address from it.
    println!(
        "mcp-taskd listening on http://{address}{}",
        config.server.endpoint
    );
    log::info!("serving {} on {address}", config.server.endpoint);
    let systemd = Notifier::ready(Serving {
        address,
        store: Arc::clone(&engine.store),
        inflight: Arc::clone(&engine.inflight),
    });

    let reloader = Arc::new(Reloader::new(
        source,
        Arc::clone(&engine.live),
        Arc::clone(&engine.hub),
        Arc::clone(&engine.metrics),
        Arc::clone(&engine.upstreams),
        Arc::downgrade(&frontend) as std::sync::Weak<dyn crate::ops::reload::Revoke>,
    ));
    let _ = engine.operator.reloader.set(Arc::clone(&reloader));
    for signal in termination.forever() {
        if signal != signal_hook::consts::SIGHUP {
            break;
        }
        // The outcome is logged (and told to systemd) by the reloader.
        let _ = reloader.reload("SIGHUP");
    }

    systemd.stopping();
    // No connection is accepted from now on: those that arrive wait in the kernel's
    // queue for the next process when systemd holds the socket (and are refused once
    // this process closes a socket it bound). Requests on connections already open are
    // still answered, each with `Connection: close`, so that a client's next request
    // goes to a new connection (see `tiny_http::Server::drain`).
    http.drain(IDLE_GRACE);
    log::info!("shutting down");
    frontend.draining.store(true, Ordering::Release);
    engine.stop_admitting();
    // Listen streams end gracefully; calls waiting for their task answer its handle.
    engine.hub.close_all();
    if !wait_for_connections(&frontend.listener, CONNECTION_DRAIN) {
        log::warn!("some connections were still open when the drain went on");
    }
    if !frontend.wait_for_handlers(HANDLER_DRAIN) {
        log::warn!("some requests were still being handled when the drain went on");
    }
    frontend.wait_for_streams(Duration::from_secs(5));
    // Legacy sessions outlive the process: their latest use and followed tasks too.
    frontend.legacy.record_sessions();
    drop(frontend);
    engine.finish();
    Ok(())
}

/// Waits up to `limit` until no connection is open; whether none is.
fn wait_for_connections(listener: &tiny_http::ListenerHealth, limit: Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while listener.open_connections() > 0 {
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// How many bridged calls may wait for their task at once. Each waits on the thread of
/// its connection (over stdio, a thread of its own), so half the connections the
/// listener takes: waiting calls never take every connection a client could open.
fn max_waiting_calls(config: &Config) -> usize {
    (crate::transport::limits::max_connections(config) / 2).max(1)
}

/// The signals that start a graceful shutdown, and SIGHUP (a reload), caught from now
/// on: SIGHUP's default action would end the process.
fn termination_signals() -> Result<signal_hook::iterator::Signals, ServeError> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP]).map_err(ServeError::Signals)
}
