"""Processes of the soak and the partition test: mcp-taskd nodes (started, killed,
paused, restarted), a throwaway PostgreSQL cluster, a tmpfs, and the TCP proxy that
cuts a node's connections to the database (proxy.py)."""

import http.client
import os
import pwd
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def healthy(host, port, timeout=2.0):
    try:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        response.read()
        conn.close()
        return response.status == 200
    except (OSError, http.client.HTTPException):
        return False


class Server:
    """One mcp-taskd node: `serve` on a fixed address and data dir, restarted at will.
    `prefix` runs it inside a network namespace (["ip", "netns", "exec", NS])."""

    def __init__(self, name, binary, config, data_dir, host, port, log_dir, prefix=(), env=None):
        self.name, self.binary, self.config, self.data_dir = name, binary, config, data_dir
        self.host, self.port, self.prefix = host, port, list(prefix)
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self.proc = None
        self.starts = 0
        self.stopped = False  # SIGSTOPped
        self.env = dict(os.environ, **(env or {}))
        self.env.setdefault("RUST_LOG", "warn")
        self.lock = threading.Lock()

    def spawn(self):
        self.starts += 1
        logf = open(self.log_path, "ab")
        logf.write(f"\n=== start {self.starts} at {time.strftime('%H:%M:%S')}\n".encode())
        logf.flush()
        command = self.prefix + [self.binary, "serve", "--config", self.config,
                                 "--data-dir", self.data_dir, "--listen", f"{self.host}:{self.port}"]
        self.proc = subprocess.Popen(command, stdout=logf, stderr=logf, stdin=subprocess.DEVNULL,
                                     env=self.env, start_new_session=True)
        logf.close()
        self.stopped = False

    def start(self, limit=90.0):
        """Starts it and waits until /healthz answers 200; a process that exits (a full
        disk, a database that is down) is started again, as systemd's Restart= would.
        Returns the seconds it took, or None."""
        began = time.monotonic()
        with self.lock:
            self.spawn()
            while time.monotonic() - began < limit:
                if healthy(self.host, self.port, 1.0):
                    return time.monotonic() - began
                if self.proc.poll() is not None:
                    time.sleep(0.5)
                    self.spawn()
                time.sleep(0.1)
            return None

    def pid(self):
        return self.proc.pid if self.proc else None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum):
        if self.alive():
            try:
                os.kill(self.proc.pid, signum)
            except ProcessLookupError:
                pass

    def kill9(self):
        with self.lock:
            if self.stopped:
                self.signal(signal.SIGCONT)
            self.signal(signal.SIGKILL)
            if self.proc:
                self.proc.wait()
            self.stopped = False

    def pause(self):
        self.signal(signal.SIGSTOP)
        self.stopped = True

    def resume(self):
        self.signal(signal.SIGCONT)
        self.stopped = False

    def terminate(self, grace=20.0):
        """A clean stop (SIGTERM), then SIGKILL past `grace`. True when it stopped by
        itself."""
        if not self.alive():
            return True
        if self.stopped:
            self.resume()
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace)
            return True
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.proc.wait()
            return False

    def log_count(self, needle):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace").count(needle)
        except OSError:
            return 0

    def metrics(self):
        try:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=5)
            conn.request("GET", "/metrics")
            response = conn.getresponse()
            text = response.read().decode()
            conn.close()
            return text if response.status == 200 else ""
        except (OSError, http.client.HTTPException):
            return ""


def metric_sum(text, name):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {"):
            try:
                total += float(line.rsplit(" ", 1)[1])
            except (ValueError, IndexError):
                pass
    return total


class Tmpfs:
    """A tmpfs mounted at `path` (root only), filled to the last byte and freed."""

    def __init__(self, path, size):
        self.path = path
        os.makedirs(path, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", path],
                       check=True)
        self.filler = os.path.join(path, "filler")

    def fill(self):
        chunk = b"\0" * (1 << 20)
        with open(self.filler, "wb", buffering=0) as f:
            for size in (1 << 20, 1 << 16, 4096, 512, 1):
                try:
                    while True:
                        f.write(chunk[:size])
                except OSError:
                    pass

    def free(self):
        try:
            os.remove(self.filler)
        except FileNotFoundError:
            pass

    def unmount(self):
        subprocess.run(["umount", "-l", self.path], check=False)


def unprivileged():
    """(uid, gid) PostgreSQL runs as when we are root (it refuses root)."""
    if os.getuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(name)
            return entry.pw_uid, entry.pw_gid
        except KeyError:
            continue
    raise RuntimeError("no postgres or nobody user to run PostgreSQL as")


def pg_bin():
    found = os.environ.get("MCP_TASKD_PG_BIN")
    if found:
        return found
    try:
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True)
        if os.path.exists(os.path.join(out.stdout.strip(), "initdb")):
            return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    base = "/usr/lib/postgresql"
    if os.path.isdir(base):
        versions = sorted((v for v in os.listdir(base) if v.isdigit()), key=int)
        for v in reversed(versions):
            if os.path.exists(os.path.join(base, v, "bin", "initdb")):
                return os.path.join(base, v, "bin")
    return None


class Postgres:
    """A throwaway cluster in `root` (data, socket, log), on `host:port`, its WAL kept
    small (it may live on a small tmpfs). `prefix` runs it in a network namespace."""

    def __init__(self, binary_dir, root, host, port, prefix=(), log_path=None, trust=None):
        self.bin, self.root, self.host, self.port = binary_dir, root, host, port
        self.prefix = list(prefix)
        self.log_path = log_path or os.path.join(root, "postgres.log")
        self.lock = threading.Lock()  # one start or stop at a time
        self.owner = unprivileged()
        self.data = os.path.join(root, "data")
        os.makedirs(root, exist_ok=True)
        if self.owner:
            os.chown(root, *self.owner)
        made = self.as_owner(["initdb", "-D", self.data, "-U", "taskd", "-A", "trust", "-E", "UTF8",
                              "--no-locale", "--no-sync", "--wal-segsize=1"], check=False)
        if made.returncode != 0:
            raise RuntimeError(f"initdb failed: {made.stderr.strip()}")
        if trust:
            # Clients from `trust` (a subnet of the test's own namespaces), no password.
            with open(os.path.join(self.data, "pg_hba.conf"), "a") as f:
                f.write(f"host all all {trust} trust\n")
        self.starts = 0

    def as_owner(self, argv, check=True, **kw):
        command = [os.path.join(self.bin, argv[0])] + argv[1:]
        if self.owner:
            command = ["setpriv", f"--reuid={self.owner[0]}", f"--regid={self.owner[1]}",
                       "--clear-groups"] + command
        return subprocess.run(self.prefix + command, check=check, capture_output=True, text=True,
                              env=dict(os.environ, LC_ALL="C"), **kw)

    def start(self):
        self.starts += 1
        options = (f"-c listen_addresses={self.host} -p {self.port} -k {self.root} "
                   "-c max_connections=300 -c shared_buffers=32MB -c fsync=off "
                   "-c full_page_writes=off -c max_wal_size=32MB -c min_wal_size=4MB "
                   "-c wal_keep_size=0 -c checkpoint_timeout=30s")
        with self.lock:
            return self.as_owner(["pg_ctl", "-D", self.data, "-l", self.log_path,
                                  "-w", "-t", "60", "-o", options, "start"], check=False)

    def stop(self, mode="fast"):
        with self.lock:
            return self.as_owner(["pg_ctl", "-D", self.data, "-m", mode, "-w", "-t", "60", "stop"],
                                 check=False)

    def ensure_running(self, limit=60.0):
        """Starts it until it runs (a start fails while its disk is full, say); returns
        how many starts it took."""
        deadline = time.monotonic() + limit
        starts = 0
        while not self.running() and time.monotonic() < deadline:
            starts += 1
            if self.start().returncode != 0:
                time.sleep(0.5)
        return starts

    def running(self):
        return self.as_owner(["pg_ctl", "-D", self.data, "status"], check=False).returncode == 0

    def psql_command(self, database):
        return [os.path.join(self.bin, "psql"), "-h", self.root, "-p", str(self.port),
                "-U", "taskd", "-d", database]

    def sql(self, sql, database="postgres"):
        return subprocess.run(self.psql_command(database) + ["-X", "-q", "-A", "-t", "-c", sql],
                              check=True, capture_output=True, text=True).stdout.strip()

    def url(self, database, host=None, port=None):
        return f"postgresql://taskd@{host or self.host}:{port or self.port}/{database}"


class Proxy:
    """benches/soak/proxy.py in a process of its own: forwards LISTEN to TARGET, and
    cuts (holds every byte, both ways, and new connections) or heals on command."""

    def __init__(self, listen_port, target_host, target_port):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "proxy.py"), str(listen_port), target_host,
             str(target_port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = self.proc.stdout.readline()
        if ready.strip() != "ready":
            raise RuntimeError(f"proxy did not start: {ready!r}")
        self.port = listen_port

    def command(self, word):
        self.proc.stdin.write(word + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def cut(self):
        return self.command("cut")

    def heal(self):
        return self.command("heal")

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
