//! The `mcp-taskd` command line.

use std::error::Error;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{CommandFactory, Parser, Subcommand};
use taskd_notifications::Hub;
use taskd_server::config::{self, Config};
use taskd_server::ops::cli::{
    self, Location, SchedulesCommand, TasksCommand, ToolsCommand, WebhooksCommand,
};
use taskd_server::ops::reload::ConfigSource;
use taskd_server::registration;
use taskd_telemetry::logs;
use taskd_telemetry::LogFormat;

/// `mcp-taskd --version`: the release, and the commit it was built from (`build.rs`).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("MCP_TASKD_COMMIT"),
    ")"
);

/// A single-binary MCP server whose long-running tool calls are durable tasks.
#[derive(Parser)]
#[command(name = "mcp-taskd", version = VERSION, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve MCP over HTTP until SIGTERM/SIGINT; SIGHUP re-reads the configuration file.
    Serve {
        /// TOML configuration file; without it the embedded default is used
        /// (loopback only, ./mcp-taskd-data, demo tools).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Address to listen on, overriding server.listen (port 0 picks a free port).
        #[arg(long, value_name = "ADDR:PORT")]
        listen: Option<SocketAddr>,
        /// Data directory, overriding server.data_dir.
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// Open the SQLite store although the last server stopped without closing it
        /// and its write-ahead log has gone or been replaced (tasks only the log held
        /// are lost; see docs/durability.md).
        #[arg(long)]
        accept_data_loss: bool,
    },
    /// Serve one host (a desktop or IDE client) over stdin/stdout until end of input or
    /// SIGTERM/SIGINT/SIGHUP; with --connect, relay it to a running server instead.
    Stdio {
        /// TOML configuration file; without it the embedded default is used.
        #[arg(long, value_name = "FILE", conflicts_with = "connect")]
        config: Option<PathBuf>,
        /// Data directory, overriding server.data_dir.
        #[arg(long, value_name = "DIR", conflicts_with = "connect")]
        data_dir: Option<PathBuf>,
        /// Relay to the running server at this MCP endpoint URL
        /// (e.g. http://127.0.0.1:8080/mcp, or an https:// one) instead of serving here.
        #[arg(long, value_name = "URL")]
        connect: Option<String>,
        /// File holding the bearer token the relay presents (with --connect).
        #[arg(long, value_name = "FILE", requires = "connect")]
        token_file: Option<PathBuf>,
    },
    /// Inspect and steer tasks (through the running server, or on the database when
    /// none runs).
    Tasks {
        #[command(subcommand)]
        command: TasksCommand,
    },
    /// List the webhooks and their deliveries; retry undelivered ones.
    Webhooks {
        #[command(subcommand)]
        command: WebhooksCommand,
    },
    /// List the tools served with their flow control; pause and resume them.
    Tools {
        #[command(subcommand)]
        command: ToolsCommand,
    },
    /// The schedules of `[[schedules]]`: next run, last outcome.
    Schedules {
        #[command(subcommand)]
        command: SchedulesCommand,
    },
    /// Counts by status and tool, queue age, busy workers, recent throughput.
    Stats {
        #[command(flatten)]
        at: Location,
        #[arg(long)]
        json: bool,
    },
    /// Write a consistent copy of the task store to FILE (online while serving) and
    /// verify it.
    Backup {
        #[command(flatten)]
        at: Location,
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Restore the task store from a backup FILE; the server must be stopped.
    Restore {
        #[command(flatten)]
        at: Location,
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Replace an existing task store.
        #[arg(long)]
        force: bool,
    },
    /// Copy a stopped SQLite task store into an empty PostgreSQL database (to move a
    /// node to `store.backend = "postgres"`).
    CopyStore {
        /// Where the SQLite store is: its configuration and data dir, as for `serve`.
        #[command(flatten)]
        from: Location,
        /// The configuration naming the PostgreSQL store (`store.backend = "postgres"`).
        #[arg(long, value_name = "FILE")]
        to_config: PathBuf,
    },
    /// Make the running server re-read its configuration file (as SIGHUP does) and
    /// print what changed; exits non-zero with the reason when the file is refused
    /// (the server then keeps its running configuration).
    Reload {
        #[command(flatten)]
        at: Location,
    },
    /// Check a configuration file and exit (0 when valid).
    ///
    /// The file is named either way: `check-config FILE` or `check-config --config FILE`.
    CheckConfig {
        /// TOML configuration file; without it the embedded default is checked.
        #[arg(long, value_name = "FILE", conflicts_with = "file")]
        config: Option<PathBuf>,
        /// The same as `--config FILE`.
        #[arg(value_name = "FILE")]
        file: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    // The run guard, which kills command tools' programs if the server dies, is this
    // binary in a hidden mode.
    taskd_tools::command::guard::run_if_guard();
    // For packages: `mcp-taskd package-files DIR`, outside the definition above so that
    // the pages and completions it writes do not list it.
    if let Some(dir) = package_files_dir() {
        return match package_files(&dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("mcp-taskd: package-files: {error}");
                ExitCode::FAILURE
            }
        };
    }
    // Before any thread starts, so that every thread inherits it.
    taskd_tools::command::block_child_exit_signal();
    let cli = Cli::parse();
    // The operator commands print their answers, and a host shows stdio's stderr as
    // its log: only warnings go to the log.
    // `serve` and `stdio` install it once their configuration (`[log] format`) is read.
    if !matches!(
        cli.command,
        Command::Serve { .. } | Command::Stdio { connect: None, .. }
    ) {
        logs::init("warn", LogFormat::Text);
    }
    // A tool that panics is logged as one line where it is caught, not as a backtrace.
    taskd_tools::panics::install_hook();
    let result = match cli.command {
        Command::Serve {
            config,
            listen,
            data_dir,
            accept_data_loss,
        } => serve(config.as_deref(), listen, data_dir, accept_data_loss),
        Command::Stdio {
            config,
            data_dir,
            connect,
            token_file,
        } => match connect {
            Some(url) => {
                taskd_server::stdio::relay::run(&url, token_file.as_deref()).map_err(Into::into)
            }
            None => stdio(config.as_deref(), data_dir),
        },
        Command::CopyStore { from, to_config } => {
            taskd_server::ops::copy_store::run(&from, &to_config)
                .map(|copied| println!("{copied}"))
                .map_err(Into::into)
        }
        Command::CheckConfig { config, file } => check_config(config.or(file).as_deref()),
        Command::Tasks { command } => cli::tasks(command).map_err(Into::into),
        Command::Tools { command } => cli::tools(command).map_err(Into::into),
        Command::Schedules { command } => cli::schedules(command).map_err(Into::into),
        Command::Webhooks { command } => cli::webhooks(command).map_err(Into::into),
        Command::Stats { at, json } => cli::stats(&at, json).map_err(Into::into),
        Command::Backup { at, file } => cli::backup(&at, &file).map_err(Into::into),
        Command::Reload { at } => cli::reload(&at).map_err(Into::into),
        Command::Restore { at, file, force } => {
            cli::restore_file(&at, &file, force).map_err(Into::into)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("mcp-taskd: {error}");
            // `tasks start --wait` ends with its task's outcome.
            match error.downcast_ref::<cli::CommandFailed>() {
                Some(failed) => ExitCode::from(failed.exit_code()),
                None => ExitCode::FAILURE,
            }
        }
    }
}

fn serve(
    path: Option<&Path>,
    listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    accept_data_loss: bool,
) -> Result<(), Box<dyn Error>> {
    // SAFETY: no thread has started yet (the environment is changed: `LISTEN_*` goes).
    let inherited = unsafe { taskd_server::listeners::take_inherited() }?;
    // A reload reads the same file, with the same overrides, whatever the working
    // directory has become.
    let file = path.map(std::path::absolute).transpose()?;
    let source = ConfigSource {
        file,
        listen,
        data_dir,
        accept_data_loss,
    };
    let config = source.load()?;
    logs::init("info", config.log.format);
    Ok(taskd_server::server::run(config, source, inherited)?)
}

fn stdio(path: Option<&Path>, data_dir: Option<PathBuf>) -> Result<(), Box<dyn Error>> {
    let mut config = Config::load(path)?;
    logs::init("warn", config.log.format);
    if let Some(data_dir) = data_dir {
        config.server.data_dir = data_dir;
    }
    config.check()?;
    Ok(taskd_server::stdio::local::serve(config)?)
}

/// Loads the configuration, builds its command tools and upstreams and registers every
/// tool, as `serve` would, without opening the store or listening.
fn check_config(path: Option<&Path>) -> Result<(), Box<dyn Error>> {
    let config = Config::load(path)?;
    let in_file = |error| config::in_file(path, error);
    let commands = registration::command_tools(&config).map_err(in_file)?;
    registration::upstreams(&config).map_err(in_file)?;
    let hub = Arc::new(Hub::new(config.notifications.clone()));
    let (tools, _) = registration::build_catalog(
        &config,
        &commands,
        &hub,
        &taskd_upstreams::Upstreams::none(),
    )?;
    // Each schedule's tool takes its arguments (as the server checks at start).
    registration::schedules(&config, &tools).map_err(in_file)?;
    println!("configuration is valid");
    Ok(())
}

/// DIR, when the command line is exactly `package-files DIR`.
fn package_files_dir() -> Option<PathBuf> {
    let mut args = std::env::args_os().skip(1);
    let (mode, dir) = (args.next()?, args.next()?);
    (mode == "package-files" && args.next().is_none()).then(|| PathBuf::from(dir))
}

/// Writes what a package installs besides the binary, generated from the definition
/// above so that it cannot drift from it: `DIR/man/*.1` (one page per command and
/// subcommand) and `DIR/completions/{mcp-taskd.bash,_mcp-taskd,mcp-taskd.fish}`.
fn package_files(dir: &Path) -> Result<(), Box<dyn Error>> {
    use clap_complete::Shell;
    // The pages name the release only: the commit would make every build's pages differ.
    let command = Cli::command().version(env!("CARGO_PKG_VERSION"));
    let man = dir.join("man");
    std::fs::create_dir_all(&man)?;
    clap_mangen::generate_to(command.clone(), &man)?;
    let completions = dir.join("completions");
    std::fs::create_dir_all(&completions)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut command.clone(), "mcp-taskd", &completions)?;
    }
    Ok(())
}
