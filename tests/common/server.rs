//! The process harness: starts the real binary on an ephemeral loopback port with a
//! temporary (or given) data dir, and stops it gently, abruptly, or on drop.
//!
//! The server's stderr (its log) is captured, not inherited: tests provoke errors on
//! purpose (a panicking tool, a full disk, a killed server), and their log lines in the
//! `cargo test` output looked like failures. The log is printed when the test fails
//! (the harness is dropped while the test panics), where it helps.
//!
//! On the postgres test backend (`MCP_TASKD_TEST_BACKEND=postgres`) each data dir
//! gets a database of its own on the shared cluster (see [`super::postgres`]).

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use super::postgres;

pub struct Server {
    child: Child,
    /// The server's stderr so far, line by line.
    log: Arc<Mutex<Vec<String>>>,
    pub addr: SocketAddr,
    pub dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

impl Server {
    /// Starts the binary on `config` (TOML; listen address and data dir are overridden).
    pub fn start(config: &str) -> Server {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = temp.path().to_path_buf();
        let mut server = Server::start_in(&dir, config);
        server._temp = Some(temp);
        server
    }

    /// Starts the binary with its data in `dir` (reused across restarts).
    pub fn start_in(dir: &Path, config: &str) -> Server {
        Server::start_in_with_env(dir, config, &[])
    }

    /// As [`Server::start_in`], with extra environment variables for the server.
    pub fn start_in_with_env(dir: &Path, config: &str, env: &[(&str, &OsStr)]) -> Server {
        let mut command = super::binary();
        command.envs(env.iter().copied());
        Server::start_command(dir, config, command, "127.0.0.1:0")
    }

    /// As [`Server::start_in`], listening on `addr` (a restart where clients expect it).
    pub fn start_in_on(dir: &Path, config: &str, addr: std::net::SocketAddr) -> Server {
        Server::start_command(dir, config, super::binary(), &addr.to_string())
    }

    /// Starts the binary with its data in `dir` on `listener`, passed as systemd passes
    /// a socket unit's (descriptor 3, `LISTEN_FDS=1`, `LISTEN_FDNAMES=http`, and
    /// `LISTEN_PID` naming the server's own process). The test keeps its own copy of
    /// the socket open, as systemd does across restarts of the service.
    pub fn start_in_with_listener(
        dir: &Path,
        config: &str,
        listener: &TcpListener,
        env: &[(&str, &OsStr)],
    ) -> Server {
        use std::os::unix::io::AsRawFd;
        use std::os::unix::process::CommandExt;
        let fd = listener.as_raw_fd();
        let mut wrapper = Command::new("sh");
        wrapper
            .arg("-c")
            // The shell's process id is the server's: it execs it.
            .arg("LISTEN_PID=$$ exec \"$0\" \"$@\"")
            .arg(super::binary_path())
            .env("LISTEN_FDS", "1")
            .env("LISTEN_FDNAMES", "http")
            .envs(env.iter().copied());
        // SAFETY: dup2 is async-signal-safe; it only copies a descriptor this process
        // holds to 3 in the child (without close-on-exec), before exec.
        unsafe {
            wrapper.pre_exec(move || {
                // dup2 onto itself would keep close-on-exec: clear it instead.
                let done = if fd == 3 {
                    libc::fcntl(3, libc::F_SETFD, 0)
                } else {
                    libc::dup2(fd, 3)
                };
                if done < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Server::start_command(dir, config, wrapper, "127.0.0.1:0")
    }

    /// Starts the binary under a descriptor limit (`ulimit -n`, soft and hard).
    pub fn start_with_fd_limit(config: &str, limit: u64) -> Server {
        let temp = tempfile::tempdir().expect("temp dir");
        let mut wrapper = Command::new("sh");
        wrapper
            .arg("-c")
            .arg(format!("ulimit -n {limit} && exec \"$0\" \"$@\""))
            .arg(super::binary_path());
        let mut server = Server::start_command(temp.path(), config, wrapper, "127.0.0.1:0");
        server._temp = Some(temp);
        server
    }

    /// Runs `command` (the binary, or a wrapper that execs it) as `serve` on `config`.
    fn start_command(dir: &Path, config: &str, command: Command, listen: &str) -> Server {
        Server::start_command_with(dir, config, command, listen, &[])
    }

    /// As [`Server::start_in`], with `args` after `serve`'s own (such as
    /// `--accept-data-loss`).
    pub fn start_in_with_args(dir: &Path, config: &str, args: &[&str]) -> Server {
        Server::start_command_with(dir, config, super::binary(), "127.0.0.1:0", args)
    }

    fn start_command_with(
        dir: &Path,
        config: &str,
        mut command: Command,
        listen: &str,
        args: &[&str],
    ) -> Server {
        std::fs::create_dir_all(dir).expect("data dir");
        let config_path = dir.join("config.toml");
        std::fs::write(&config_path, postgres::server_config(dir, config)).expect("write config");
        // Quiet by default; a test that reads info lines passes its own RUST_LOG.
        if !command.get_envs().any(|(name, _)| name == "RUST_LOG") {
            command.env("RUST_LOG", "warn");
        }
        let mut child = command
            .arg("serve")
            .arg("--config")
            .arg(&config_path)
            .arg("--listen")
            .arg(listen)
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn mcp-taskd");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().expect("stderr");
        let kept = Arc::clone(&log);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                kept.lock().unwrap_or_else(|p| p.into_inner()).push(line);
            }
        });
        let stdout = child.stdout.take().expect("stdout");
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = sender.send(line);
            }
        });
        let Ok(line) = receiver.recv_timeout(Duration::from_secs(20)) else {
            let _ = child.kill();
            let _ = child.wait();
            let _ = reader.join();
            let log = log.lock().unwrap_or_else(|p| p.into_inner()).join("\n");
            panic!("the server did not print its address; its stderr:\n{log}");
        };
        let url = line
            .strip_prefix("mcp-taskd listening on http://")
            .expect("address line");
        let addr = url
            .trim_end_matches("/mcp")
            .parse()
            .expect("socket address");
        Server {
            child,
            log,
            addr,
            dir: dir.to_path_buf(),
            _temp: None,
        }
    }

    /// SIGKILL: no chance to clean up.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits for exit (up to `limit`); returns whether it exited.
    pub fn terminate(&mut self, limit: Duration) -> bool {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// The configuration file the server was started with (and reloads).
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("config.toml")
    }

    /// Replaces the server's configuration file with `config` (as [`Server::start`]
    /// writes it), for a reload to read.
    pub fn rewrite_config(&self, config: &str) {
        let text = postgres::server_config(&self.dir, config);
        std::fs::write(self.config_path(), text).expect("rewrite config");
    }

    /// Sends the server a signal by name (`HUP`, `TERM`, ...).
    pub fn signal(&self, name: &str) {
        let sent = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -{name}");
    }

    /// The server's log (stderr) so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
            eprintln!(
                "--- stderr of the mcp-taskd on {} ({} line(s)) ---",
                self.addr,
                log.len()
            );
            for line in log.iter() {
                eprintln!("{line}");
            }
        }
    }
}
