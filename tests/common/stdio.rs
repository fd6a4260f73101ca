//! The stdio harness: runs `mcp-taskd stdio` (serving a data dir, or relaying with
//! `--connect`) with piped stdin and stdout, as a desktop host launches it. Every line
//! it writes on stdout must be a JSON-RPC message; a test reads them as they come.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio as Piped};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::VERSION;

/// How long a test waits for one answer.
const ANSWER_LIMIT: Duration = Duration::from_secs(20);

pub struct Stdio {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Stdout, line by line: parsed messages, or the raw line when it is not JSON.
    lines: mpsc::Receiver<Result<Value, String>>,
    /// Messages read while waiting for another one.
    pending: Vec<Value>,
}

/// The command line that runs the binary as `stdio` on `dir` (config `dir/config.toml`,
/// data `dir/data`, the same layout as [`super::Server::start_in`]).
pub fn stdio_command(dir: &Path, config: &str) -> Command {
    std::fs::create_dir_all(dir).expect("data dir");
    let config_path = dir.join("config.toml");
    std::fs::write(&config_path, super::postgres::server_config(dir, config))
        .expect("write config");
    let mut command = super::binary();
    command
        .arg("stdio")
        .arg("--config")
        .arg(&config_path)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env("RUST_LOG", "warn");
    command
}

/// Runs the binary with `args` and no input to its end (for refusals at start-up).
pub fn run_to_end(mut command: Command) -> Output {
    command
        .stdin(Piped::null())
        .output()
        .expect("run mcp-taskd")
}

impl Stdio {
    /// `mcp-taskd stdio` serving `dir` with `config`.
    pub fn start_in(dir: &Path, config: &str) -> Stdio {
        Stdio::spawn(stdio_command(dir, config))
    }

    /// `mcp-taskd stdio --connect url [--token-file token_file]`.
    pub fn connect(url: &str, token_file: Option<&PathBuf>) -> Stdio {
        let mut command = super::binary();
        command.arg("stdio").arg("--connect").arg(url);
        if let Some(file) = token_file {
            command.arg("--token-file").arg(file);
        }
        command.env("RUST_LOG", "warn");
        Stdio::spawn(command)
    }

    fn spawn(mut command: Command) -> Stdio {
        let mut child = command
            .stdin(Piped::piped())
            .stdout(Piped::piped())
            .stderr(Piped::inherit())
            .spawn()
            .expect("spawn mcp-taskd stdio");
        let stdout = child.stdout.take().expect("stdout");
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let parsed = serde_json::from_str::<Value>(&line)
                    .ok()
                    .filter(|message| message["jsonrpc"] == "2.0")
                    .ok_or(line);
                let _ = sender.send(parsed);
            }
        });
        Stdio {
            stdin: child.stdin.take(),
            child,
            lines,
            pending: Vec::new(),
        }
    }

    /// Writes one message as one line.
    pub fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        let mut line = message.to_string();
        line.push('\n');
        stdin.write_all(line.as_bytes()).expect("write to stdio");
        stdin.flush().expect("flush stdio");
    }

    /// The next message on stdout; panics on a line that is not a JSON-RPC message.
    fn next(&mut self, deadline: Instant) -> Option<Value> {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.lines.recv_timeout(left) {
            Ok(Ok(message)) => Some(message),
            Ok(Err(line)) => {
                panic!("stdout carried a line that is not a JSON-RPC message: {line:?}")
            }
            Err(_) => None,
        }
    }

    /// Waits for the message `wanted` selects (keeping the others for later).
    pub fn wait_for(&mut self, mut wanted: impl FnMut(&Value) -> bool) -> Value {
        if let Some(at) = self.pending.iter().position(&mut wanted) {
            return self.pending.remove(at);
        }
        let deadline = Instant::now() + ANSWER_LIMIT;
        while let Some(message) = self.next(deadline) {
            if wanted(&message) {
                return message;
            }
            self.pending.push(message);
        }
        panic!(
            "no such message within {ANSWER_LIMIT:?}; got {:?}",
            self.pending
        );
    }

    /// The messages read so far that no wait has taken yet.
    pub fn seen(&self) -> &[Value] {
        &self.pending
    }

    /// Sends a request and returns the response with its id (result or error).
    pub fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.answer(id)
    }

    /// The response to request `id`.
    pub fn answer(&mut self, id: u64) -> Value {
        self.wait_for(|message| {
            message["id"] == id
                && (message.get("result").is_some() || message.get("error").is_some())
        })
    }

    /// A 2026-07-28 request (modern `_meta` with `capabilities`); returns its `result`.
    pub fn modern(
        &mut self,
        id: u64,
        method: &str,
        mut params: Value,
        capabilities: Value,
    ) -> Value {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": capabilities,
        });
        let answer = self.request(id, method, params);
        assert!(answer.get("result").is_some(), "{method} failed: {answer}");
        answer["result"].clone()
    }

    /// Closes stdin: the host is done.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits (up to `limit`) for the process to exit.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Every stdout line up to the end of the process: all must be JSON-RPC messages.
    pub fn drain_stdout(&mut self) -> Vec<Value> {
        let mut all = std::mem::take(&mut self.pending);
        let deadline = Instant::now() + ANSWER_LIMIT;
        while let Some(message) = self.next(deadline) {
            all.push(message);
        }
        all
    }

    /// Sends `signal` (a `kill` name such as `TERM`).
    pub fn signal(&self, signal: &str) {
        // kill(2) itself, not the kill command: a fork under the suite's load could
        // fail, and the signal would silently never be sent.
        let number = match signal {
            "TERM" => libc::SIGTERM,
            "INT" => libc::SIGINT,
            "HUP" => libc::SIGHUP,
            other => panic!("no such signal in these tests: {other}"),
        };
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid");
        // SAFETY: kill(2) with the pid of our own child, which we have not reaped.
        let sent = unsafe { libc::kill(pid, number) };
        assert_eq!(sent, 0, "SIG{signal}: {}", std::io::Error::last_os_error());
    }

    /// SIGKILL: no chance to clean up.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Stdio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
