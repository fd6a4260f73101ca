//! The connection bounds handed to the HTTP listener: how many connections, how long a
//! request may take to arrive, how fast an answer must be read, and how many bytes may
//! wait in memory server-wide (see docs/protocol.md, "Connection limits").

use std::time::Duration;

use crate::config::Config;

/// Descriptors kept back from connections: a fixed part plus an eighth of the limit,
/// for the database (pool connections, WAL and shm files), command tools' pipes, the
/// listener, logs and whatever the process opens later.
fn reserved_descriptors(limit: u64) -> u64 {
    64 + limit / 8
}

/// Connections the listener accepts by default: each takes two descriptors (tiny_http
/// holds a read and a write handle), so `(soft limit − (64 + soft limit / 8)) / 2`, and
/// at least 16. With the common soft limit of 1024 that is 416; with the unit's
/// `LimitNOFILE=65536`, 28640.
pub fn default_max_connections(soft_limit: u64) -> usize {
    let usable = soft_limit.saturating_sub(reserved_descriptors(soft_limit)) / 2;
    usable.max(16) as usize
}

/// This process's soft `RLIMIT_NOFILE`, or 1024 (systemd's default) if unknown.
pub fn descriptor_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given.
    let status = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    if status == 0 && limit.rlim_cur != libc::RLIM_INFINITY {
        limit.rlim_cur
    } else {
        1024
    }
}

/// Connections the listener takes at once: `server.max_connections`, or derived from
/// the descriptor limit when it is 0.
pub fn max_connections(config: &Config) -> usize {
    match config.server.max_connections {
        0 => default_max_connections(descriptor_limit()),
        set => set,
    }
}

/// The listener's bounds from `[server]` and `[limits]`.
pub fn bounds(config: &Config) -> tiny_http::Bounds {
    let server = &config.server;
    tiny_http::Bounds {
        max_connections: max_connections(config),
        idle_timeout: Duration::from_millis(server.idle_timeout_ms),
        request_timeout: Duration::from_millis(server.request_timeout_ms),
        max_body_bytes: config.limits.max_body_bytes,
        max_buffered_request_bytes: config.limits.max_buffered_request_bytes,
        write_timeout: Duration::from_millis(server.write_timeout_ms),
        min_write_bytes_per_sec: server.min_write_bytes_per_sec,
        max_unsent_answer_bytes: config.limits.max_unsent_answer_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::default_max_connections;

    #[test]
    fn the_default_cap_leaves_room_for_everything_else() {
        assert_eq!(default_max_connections(1024), 416);
        assert_eq!(default_max_connections(256), 80);
        assert_eq!(default_max_connections(65536), 28640);
        assert_eq!(default_max_connections(64), 16);
    }
}
