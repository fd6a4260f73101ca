//! Assembly and lifecycle: builds every stage from the configuration, serves until
//! SIGTERM or SIGINT, then drains in order — stop admitting requests, close listen
//! streams gracefully, let in-flight requests finish, give running task attempts their
//! grace period (then release them to the queue), kill what their programs left behind,
//! stop upkeep, and let the writer commit what is queued. Tasks are never failed or cancelled by a shutdown.

use std::error::Error;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::auth::Authenticator;
use crate::config::Config;
use crate::handlers::request_state::StateSigner;
use crate::handlers::{ServerInfo, Service};
use crate::metrics::Metrics;
use crate::notifications::Hub;
use crate::ops::admin::{Admin, AdminSocket};
use crate::ops::systemd::{Notifier, Serving};
use crate::registration::build_catalog;
use crate::tasks::sqlite::{OpenError, Opened, Store};
use crate::tasks::upkeep::{self, StartError, Upkeep, UpkeepCounters};
use crate::tasks::workers::{AttemptObserver, Inflight, WorkerPool};
use crate::tasks::{TaskService, TaskStore};
use crate::tools::{command, RegistrationError};
use crate::transport::{Frontend, OriginPolicy};

/// Why the server could not start (or wait for its termination signal).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("data dir {}: {source}", path.display())]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Registration(#[from] RegistrationError),
    #[error("request-state key in {}: {source}", data_dir.display())]
    RequestState {
        data_dir: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] OpenError),
    #[error(transparent)]
    Upkeep(#[from] StartError),
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
}

/// Runs the server until a termination signal, then shuts down gracefully.
pub fn run(config: Config) -> Result<(), ServeError> {
    let data_dir = &config.server.data_dir;
    std::fs::create_dir_all(data_dir).map_err(|source| ServeError::DataDir {
        path: data_dir.clone(),
        source,
    })?;
    let hub = Arc::new(Hub::new(config.notifications.clone()));
    let (tools, catalog) = build_catalog(&config, &hub)?;
    let tools = Arc::new(tools);
    // Before any program runs: descendants that leave their process group must come
    // back to the server, not to init, to be found and killed when their run ends.
    if !command::become_subreaper() {
        log::warn!("cannot become a child subreaper: descendants that leave a command tool's process group may outlive its run");
    }
    let signer =
        StateSigner::open(data_dir, config.limits.request_state_ttl_ms).map_err(|source| {
            ServeError::RequestState {
                data_dir: data_dir.clone(),
                source,
            }
        })?;

    let Opened { store, writer } = Store::open(data_dir, &config.store)?;
    // The engine sees the store through its interface only.
    let store: Arc<dyn TaskStore> = store;
    upkeep::recover(store.as_ref());
    let inflight = Arc::new(Inflight::default());
    let (wake, woken) = crossbeam_channel::bounded(1);
    let tasks = Arc::new(TaskService::new(
        config.tasks.clone(),
        Arc::clone(&store),
        Arc::clone(&tools),
        Arc::clone(&inflight),
        wake.clone(),
    ));
    let metrics = Arc::new(Metrics::new(
        tools.all().iter().map(|tool| tool.spec.name.as_str()),
    ));
    let upkeep = Upkeep::start(
        Arc::clone(&store),
        Arc::clone(&hub),
        Arc::clone(&inflight),
        Arc::clone(&metrics) as Arc<dyn UpkeepCounters>,
        Duration::from_millis(config.workers.janitor_interval_ms),
    )?;
    let workers = WorkerPool::start(
        Arc::clone(&store),
        Arc::clone(&tools),
        Arc::clone(&inflight),
        &config.workers,
        Arc::clone(&metrics) as Arc<dyn AttemptObserver>,
        wake,
        woken,
    );

    let admin = AdminSocket::start(Arc::new(Admin {
        store: Arc::clone(&store),
        tasks: Arc::clone(&tasks),
        data_dir: data_dir.clone(),
        worker_threads: Some(config.workers.threads),
    }))
    .map_err(|source| ServeError::AdminSocket {
        data_dir: data_dir.clone(),
        source,
    })?;

    let service = Arc::new(Service {
        info: ServerInfo {
            name: config.server.name.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            instructions: config.server.instructions.clone(),
        },
        page_size: config.limits.page_size,
        cache_ttl_ms: config.limits.cache_ttl_ms,
        tools,
        catalog,
        signer,
        hub: Arc::clone(&hub),
        tasks,
    });
    let http = tiny_http::Server::http_with_bounds(
        config.server.listen,
        crate::transport::limits::bounds(&config),
    )
    .map_err(|source| ServeError::Listen {
        address: config.server.listen,
        source,
    })?;
    let http = Arc::new(http);
    let legacy = crate::legacy::Legacy::start(
        Arc::clone(&service),
        Arc::clone(&hub),
        config.sessions.clone(),
        Arc::clone(&metrics),
    );
    let frontend = Arc::new(Frontend {
        service,
        hub: Arc::clone(&hub),
        auth: Authenticator::new(&config.server.endpoint, &config.auth.tokens),
        origins: OriginPolicy::new(&config.server.allowed_hosts, &config.server.allowed_origins),
        endpoint: config.server.endpoint.clone(),
        limits: config.limits.clone(),
        draining: Default::default(),
        open_streams: Default::default(),
        metrics,
        legacy,
        listener: http.health(),
    });
    let threads = frontend.spawn(&http, config.server.handler_threads);
    let address = http
        .server_addr()
        .to_ip()
        .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)));
    // The one line on stdout: tests and scripts read the bound address from it.
    println!(
        "mcp-taskd listening on http://{address}{}",
        config.server.endpoint
    );
    log::info!("serving {} on {address}", config.server.endpoint);
    let systemd = Notifier::ready(Serving {
        address,
        store: Arc::clone(&store),
        inflight: Arc::clone(&inflight),
    });

    wait_for_termination()?;

    log::info!("shutting down");
    systemd.stopping();
    admin.stop();
    frontend.draining.store(true, Ordering::Release);
    hub.close_all();
    for _ in &threads {
        http.unblock();
    }
    for thread in threads {
        let _ = thread.join();
    }
    // Task creations already committed (or committing) are still owed their answer.
    if !store.wait_for_continuations(Duration::from_secs(5)) {
        log::warn!("some task creations were not answered before shutdown");
    }
    frontend.wait_for_streams(Duration::from_secs(5));
    workers.shutdown(Duration::from_millis(config.workers.shutdown_grace_ms));
    // Runs have ended (or been given up on): whatever they left behind goes too, even
    // descendants whose run could not be told from their environment.
    command::sweep_all();
    upkeep.stop();
    drop(frontend);
    drop(store);
    // The writer exits once every store handle is gone (a hung attempt may still hold
    // one; its writes are fenced, so the process can exit without waiting for it).
    if writer.is_finished() {
        let _ = writer.join();
    }
    log::info!("stopped");
    Ok(())
}

fn wait_for_termination() -> Result<(), ServeError> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals =
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT]).map_err(ServeError::Signals)?;
    signals.forever().next();
    Ok(())
}
