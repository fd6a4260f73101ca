//! The `mcp-taskd` command line.

use std::error::Error;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use mcp_taskd::config::Config;
use mcp_taskd::notifications::Hub;

/// A single-binary MCP server whose long-running tool calls are durable tasks.
#[derive(Parser)]
#[command(name = "mcp-taskd", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve MCP over HTTP until SIGTERM/SIGINT.
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
    },
    /// Check a configuration file and exit (0 when valid).
    CheckConfig {
        /// TOML configuration file; without it the embedded default is checked.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve {
            config,
            listen,
            data_dir,
        } => serve(config.as_deref(), listen, data_dir),
        Command::CheckConfig { config } => check_config(config.as_deref()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("mcp-taskd: {error}");
            ExitCode::FAILURE
        }
    }
}

fn serve(
    path: Option<&Path>,
    listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
) -> Result<(), Box<dyn Error>> {
    let mut config = Config::load(path)?;
    if let Some(listen) = listen {
        config.server.listen = listen;
    }
    if let Some(data_dir) = data_dir {
        config.server.data_dir = data_dir;
    }
    config.check()?;
    Ok(mcp_taskd::server::run(config)?)
}

/// Loads the configuration (which builds its command tools) and registers every tool,
/// as `serve` would, without opening the store or listening.
fn check_config(path: Option<&Path>) -> Result<(), Box<dyn Error>> {
    let config = Config::load(path)?;
    let hub = Arc::new(Hub::new(config.notifications.clone()));
    mcp_taskd::server::build_catalog(&config, &hub)?;
    println!("configuration is valid");
    Ok(())
}
