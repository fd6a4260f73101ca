//! Throwaway PostgreSQL for the tests (issue 18): a cluster of Debian's `postgresql`
//! package (`initdb`, `pg_ctl`) in a temporary directory, owned by an unprivileged user,
//! on a free loopback port with trust authentication, its unix socket in the same
//! directory. Nothing here needs a server that is already running.
//!
//! One shared cluster serves the whole test binary ([`shared`]); each test server gets a
//! fresh database of its own ([`database_for`], keyed by the server's data dir, so that
//! a restarted server finds its tasks). A test that stops the database starts a private
//! cluster instead ([`Cluster::start`]), so that no other test sees it go down.
//!
//! Cleanup cannot rely on destructors: statics are never dropped, and a test binary may
//! die by a signal. Each cluster therefore has a watchdog process (its own process
//! group, so Ctrl-C on the terminal does not reach it) that blocks reading a pipe whose
//! only writer is this process; when the pipe closes — the cluster is dropped, or the
//! process exits for any reason — it stops the postmaster (SIGQUIT: immediate shutdown)
//! and removes the directory. A sweep at start-up also removes clusters whose test
//! process is gone (a watchdog killed along with it, say).
//!
//! Without PostgreSQL, tests that need it say `SKIPPED` on stderr and pass, unless
//! `MCP_TASKD_REQUIRE_POSTGRES=1` (set by `.ci/run`): then they fail.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The superuser `initdb` creates; the servers connect as it (trust on 127.0.0.1).
pub const USER: &str = "taskd";

/// Prefix of every cluster directory under the temporary directory (the sweep's key).
const DIR_PREFIX: &str = "mcp-taskd-pg-";

/// A running PostgreSQL cluster of its own directory.
pub struct Cluster {
    bin: PathBuf,
    root: PathBuf,
    pub port: u16,
    owner: Option<Owner>,
    /// Closing it (on drop, or when the process ends) sets the watchdog off.
    watchdog_pipe: Option<ChildStdin>,
    watchdog: Child,
}

/// The unprivileged user the cluster runs as when the tests run as root (`initdb` and
/// `postgres` refuse root).
#[derive(Clone, Copy)]
struct Owner {
    uid: u32,
    gid: u32,
}

/// The backend the integration suite runs on: `MCP_TASKD_TEST_BACKEND` is unset or
/// `sqlite` (the default), or `postgres`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub fn backend() -> Backend {
    match std::env::var("MCP_TASKD_TEST_BACKEND").as_deref() {
        Err(_) | Ok("") | Ok("sqlite") => Backend::Sqlite,
        Ok("postgres") => Backend::Postgres,
        Ok(other) => panic!("MCP_TASKD_TEST_BACKEND={other:?}: expected sqlite or postgres"),
    }
}

/// For a test of something only the SQLite store has (its file, its disk, Litestream):
/// on the postgres backend, says so on stderr and returns `true` (the test returns).
pub fn sqlite_only(reason: &str) -> bool {
    if backend() == Backend::Postgres {
        eprintln!("SKIPPED on postgres (SQLite only: {reason})");
        return true;
    }
    false
}

/// The configuration a test server runs on: `config` itself on SQLite, or when it names
/// its own `store.backend`; on the postgres backend, `config` with `[store]` pointing at
/// the database of `dir` on the shared cluster.
pub fn server_config(dir: &Path, config: &str) -> String {
    if backend() == Backend::Sqlite {
        return config.to_string();
    }
    let mut table: toml::Table = config.parse().expect("test configuration is TOML");
    let store = table
        .entry("store")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .expect("[store] is a table");
    if store.contains_key("backend") {
        return config.to_string();
    }
    let cluster = shared().unwrap_or_else(|| {
        panic!("MCP_TASKD_TEST_BACKEND=postgres and no PostgreSQL found (see .ci/postgres.sh)")
    });
    store.insert("backend".into(), "postgres".into());
    store.insert("url".into(), cluster.url(&database_for(dir)).into());
    toml::to_string(&table).expect("configuration serializes")
}

/// The database of the test server whose data dir is `dir`, created on the shared
/// cluster the first time it is asked for.
pub fn database_for(dir: &Path) -> String {
    static DATABASES: OnceLock<Mutex<HashMap<PathBuf, String>>> = OnceLock::new();
    let databases = DATABASES.get_or_init(Default::default);
    let mut databases = databases.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(name) = databases.get(dir) {
        return name.clone();
    }
    let cluster = shared().expect("a PostgreSQL cluster");
    let name = cluster.create_database();
    databases.insert(dir.to_path_buf(), name.clone());
    name
}

/// The cluster shared by every test of this binary, started on first use; `None` (with
/// a loud `SKIPPED` line naming `why`) when PostgreSQL is not installed. Panics when it
/// is required (`MCP_TASKD_REQUIRE_POSTGRES`) and missing, or installed and broken.
pub fn shared() -> Option<&'static Cluster> {
    static SHARED: OnceLock<Result<Option<Cluster>, String>> = OnceLock::new();
    let started = SHARED.get_or_init(|| match bin_dir() {
        None => Ok(None),
        Some(bin) => Cluster::start_with(&bin).map(Some),
    });
    match started {
        Ok(Some(cluster)) => Some(cluster),
        Ok(None) => None,
        Err(error) => panic!("the shared PostgreSQL cluster did not start: {error}"),
    }
}

/// [`shared`] for a test that needs PostgreSQL whatever the backend: `None` after the
/// `SKIPPED` line, when it is absent and not required.
pub fn required_by(test: &str) -> Option<&'static Cluster> {
    let cluster = shared();
    if cluster.is_none() {
        absent(test);
    }
    cluster
}

/// Says that `test` cannot run without PostgreSQL: a failure when it is required.
fn absent(test: &str) {
    assert!(
        std::env::var_os("MCP_TASKD_REQUIRE_POSTGRES").is_none(),
        "MCP_TASKD_REQUIRE_POSTGRES is set and no PostgreSQL (initdb) was found; \
         .ci/postgres.sh installs it"
    );
    eprintln!(
        "SKIPPED {test}: no PostgreSQL found (initdb under `pg_config --bindir`, \
         /usr/lib/postgresql/*/bin or MCP_TASKD_PG_BIN); install Debian's postgresql"
    );
}

/// Where `initdb`, `pg_ctl` and `psql` are: `MCP_TASKD_PG_BIN`, else `pg_config
/// --bindir`, else the newest `/usr/lib/postgresql/*/bin`.
fn bin_dir() -> Option<PathBuf> {
    let has_initdb = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(dir) = std::env::var_os("MCP_TASKD_PG_BIN") {
        let dir = PathBuf::from(dir);
        assert!(
            has_initdb(&dir),
            "MCP_TASKD_PG_BIN={dir:?} holds no initdb and pg_ctl"
        );
        return Some(dir);
    }
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()));
    if let Some(dir) = from_pg_config.filter(|dir| has_initdb(dir)) {
        return Some(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, dir)| has_initdb(dir))
        .collect();
    versions.sort();
    versions.pop().map(|(_, dir)| dir)
}

impl Cluster {
    /// A private cluster (for a test that stops and starts the database); `None` after
    /// the `SKIPPED` line when PostgreSQL is absent and not required. Stopped and
    /// removed when dropped.
    pub fn start(test: &str) -> Option<Cluster> {
        let Some(bin) = bin_dir() else {
            absent(test);
            return None;
        };
        match Cluster::start_with(&bin) {
            Ok(cluster) => Some(cluster),
            Err(error) => panic!("a PostgreSQL cluster did not start: {error}"),
        }
    }

    fn start_with(bin: &Path) -> Result<Cluster, String> {
        sweep_stale_clusters();
        let root = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?
            .keep();
        std::fs::write(root.join("test.pid"), std::process::id().to_string())
            .map_err(|e| format!("test.pid: {e}"))?;
        let owner = unprivileged_owner()?;
        if let Some(owner) = owner {
            std::os::unix::fs::chown(&root, Some(owner.uid), Some(owner.gid))
                .map_err(|e| format!("chown {root:?}: {e}"))?;
        }
        let (watchdog, watchdog_pipe) = spawn_watchdog(&root)?;
        let mut cluster = Cluster {
            bin: bin.to_path_buf(),
            root,
            port: 0,
            owner,
            watchdog_pipe: Some(watchdog_pipe),
            watchdog,
        };
        let data = cluster.data_dir();
        // No fsync: the tests kill servers, not the machine; PostgreSQL's own crash
        // recovery (WAL replay) is unaffected. Saves seconds per test on a busy box.
        cluster.run_as_owner(
            Command::new(cluster.bin.join("initdb"))
                .arg("--pgdata")
                .arg(&data)
                .args(["--username", USER, "--auth", "trust", "--encoding", "UTF8"])
                .args(["--no-locale", "--no-sync"]),
        )?;
        // A port is free when asked and may be taken before the postmaster binds it.
        let mut last_error = String::new();
        for _ in 0..5 {
            cluster.port = free_port()?;
            match cluster.start_postmaster() {
                Ok(()) => return Ok(cluster),
                Err(error) => last_error = error,
            }
        }
        Err(last_error)
    }

    /// `postgresql://taskd@127.0.0.1:PORT/DATABASE`, the form `store.url` takes.
    pub fn url(&self, database: &str) -> String {
        format!("postgresql://{USER}@127.0.0.1:{}/{database}", self.port)
    }

    /// Creates a fresh, empty database and returns its name.
    pub fn create_database(&self) -> String {
        static NEXT: Mutex<u64> = Mutex::new(0);
        let number = {
            let mut next = NEXT.lock().unwrap_or_else(|p| p.into_inner());
            *next += 1;
            *next
        };
        let name = format!("taskd_{}_{number}", std::process::id());
        self.sql("postgres", &format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        name
    }

    /// Runs `sql` on `database` through `psql` (over the unix socket) and returns its
    /// unaligned, tuples-only output: one line per row, columns separated by `|`.
    pub fn sql(&self, database: &str, sql: &str) -> Result<String, String> {
        let output = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .arg("-h")
            .arg(self.socket_dir())
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                USER,
                "-d",
                database,
                "-c",
                sql,
            ])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("psql: {e}"))?;
        if !output.status.success() {
            return Err(String::from_utf8_lossy(&output.stderr).into_owned());
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    }

    /// Stops the postmaster; `fast` disconnects clients and shuts down cleanly,
    /// otherwise immediately (as a crash would, with WAL replay at the next start).
    pub fn stop(&self, fast: bool) {
        let mode = if fast { "fast" } else { "immediate" };
        self.run_as_owner(
            Command::new(self.bin.join("pg_ctl"))
                .arg("--pgdata")
                .arg(self.data_dir())
                .args(["--mode", mode, "--wait", "stop"]),
        )
        .unwrap_or_else(|e| panic!("pg_ctl stop: {e}"));
    }

    /// Starts the stopped postmaster again on the same port.
    pub fn restart(&self) {
        self.start_postmaster()
            .unwrap_or_else(|e| panic!("pg_ctl start: {e}"));
    }

    fn start_postmaster(&self) -> Result<(), String> {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {port} -k {socket} -c max_connections=400 \
             -c shared_buffers=32MB -c fsync=off -c full_page_writes=off",
            port = self.port,
            socket = self.socket_dir().display(),
        );
        self.run_as_owner(
            Command::new(self.bin.join("pg_ctl"))
                .arg("--pgdata")
                .arg(self.data_dir())
                .arg("--log")
                .arg(self.root.join("postgres.log"))
                .args(["--wait", "--timeout", "60", "-o", &options, "start"]),
        )
        .map_err(|e| format!("{e}\n--- postgres.log ---\n{}", self.log()))
    }

    /// The postmaster's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root.join("postgres.log")).unwrap_or_default()
    }

    /// The cluster's directory (data, socket, log), removed when the cluster is.
    pub fn dir(&self) -> &Path {
        &self.root
    }

    fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }

    fn socket_dir(&self) -> &Path {
        &self.root
    }

    /// Runs `command` to its end as the cluster's owner.
    fn run_as_owner(&self, command: &mut Command) -> Result<(), String> {
        let shown = format!("{command:?}");
        let mut command = match self.owner {
            None => std::mem::replace(command, Command::new("true")),
            Some(owner) => {
                let mut wrapped = Command::new("setpriv");
                wrapped
                    .arg(format!("--reuid={}", owner.uid))
                    .arg(format!("--regid={}", owner.gid))
                    .arg("--clear-groups")
                    .arg(command.get_program())
                    .args(command.get_args());
                wrapped
            }
        };
        // pg_ctl's postmaster keeps no descriptor of ours: the log goes to its file.
        let output = command
            .stdin(Stdio::null())
            .env("LC_ALL", "C")
            .output()
            .map_err(|e| format!("{shown}: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{shown}: {}\n{}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // The watchdog stops the postmaster and removes the directory; wait for it.
        drop(self.watchdog_pipe.take());
        let _ = self.watchdog.wait();
    }
}

/// The shell script of the watchdog: waits for end of input, then stops the postmaster
/// of `$1/data` (SIGQUIT: immediate shutdown) and removes `$1`.
const WATCHDOG: &str = r#"
cat >/dev/null
pid=$(head -n 1 "$1/data/postmaster.pid" 2>/dev/null)
if [ -n "$pid" ] && kill -QUIT "$pid" 2>/dev/null; then
  i=0
  while kill -0 "$pid" 2>/dev/null && [ "$i" -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL "$pid" 2>/dev/null
fi
rm -rf "$1"
"#;

fn spawn_watchdog(root: &Path) -> Result<(Child, ChildStdin), String> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(WATCHDOG)
        .arg("watchdog")
        .arg(root)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("watchdog: {e}"))?;
    let pipe = child.stdin.take().ok_or("watchdog without stdin")?;
    Ok((child, pipe))
}

/// Removes the clusters of test processes that are gone (their watchdog died with
/// them): stops a postmaster still running there, then removes the directory.
fn sweep_stale_clusters() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with(DIR_PREFIX) {
            continue;
        }
        let root = entry.path();
        let owner_alive = std::fs::read_to_string(root.join("test.pid"))
            .ok()
            .and_then(|pid| pid.trim().parse::<u32>().ok())
            .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if owner_alive {
            continue;
        }
        let postmaster = std::fs::read_to_string(root.join("data/postmaster.pid"))
            .ok()
            .and_then(|text| text.lines().next()?.trim().parse::<i32>().ok());
        if let Some(pid) = postmaster {
            // Only a postgres process: the pid may have been reused since.
            let command = std::fs::read(format!("/proc/{pid}/comm")).unwrap_or_default();
            if String::from_utf8_lossy(&command).trim() == "postgres" {
                // SAFETY: kill(2) with a plain pid and signal has no memory effects.
                unsafe { libc::kill(pid, libc::SIGQUIT) };
                let gone = || !Path::new(&format!("/proc/{pid}")).exists();
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while !gone() && std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
        let _ = std::fs::remove_dir_all(&root);
    }
}

/// The user to run the cluster as: none (ourselves) unless we are root; then
/// `postgres` (the package's user) if it exists, else `nobody`.
fn unprivileged_owner() -> Result<Option<Owner>, String> {
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    for name in ["postgres", "nobody"] {
        if let Some(owner) = lookup_user(name) {
            return Ok(Some(owner));
        }
    }
    Err("running as root, and neither a postgres nor a nobody user exists".into())
}

fn lookup_user(name: &str) -> Option<Owner> {
    let output = Command::new("id").arg("-u").arg(name).output().ok()?;
    let uid = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .ok()?;
    let output = Command::new("id").arg("-g").arg(name).output().ok()?;
    let gid = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .ok()?;
    Some(Owner { uid, gid })
}

fn free_port() -> Result<u16, String> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("free port: {e}"))?;
    listener
        .local_addr()
        .map(|addr| addr.port())
        .map_err(|e| format!("free port: {e}"))
}
