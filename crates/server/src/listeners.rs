//! The sockets the server listens on: passed by systemd (socket activation,
//! `LISTEN_FDS`, with `LISTEN_FDNAMES`), or bound here when it passed none.
//!
//! A passed socket outlives the process: while the service restarts (a `systemctl
//! restart`, a package upgrade) the kernel queues the connections that arrive, and the
//! next process accepts them. Nothing is refused in the gap, and a stopping server
//! leaves that queue alone (`tiny_http::Server::drain`). A socket bound here dies with
//! the process: connections in the gap are refused.
//!
//! Names (`FileDescriptorName=` in the socket unit): `http` is the MCP listener; an
//! unnamed stream socket (systemd's default name, `unknown`, or a `LISTEN_FDNAMES` left
//! out) is taken for it too when it is the only one. Any other passed descriptor is
//! refused by name, so that a unit's mistake shows at start instead of being ignored.

use std::net::{SocketAddr, TcpListener};

/// Why the passed sockets cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("LISTEN_FDS: {0}")]
    Environment(std::io::Error),
    #[error("the passed socket {name:?} (descriptor {fd}) is not a listening TCP socket")]
    NotTcpListener { name: String, fd: i32 },
    #[error("a passed socket is named {name:?}: expected \"http\" (FileDescriptorName=)")]
    UnknownName { name: String },
    #[error("{count} sockets were passed: name the MCP listener \"http\" (FileDescriptorName=)")]
    Ambiguous { count: usize },
    #[error("the passed socket has no address: {0}")]
    Address(std::io::Error),
}

/// The MCP listener systemd passed, if it passed one.
pub struct Inherited {
    pub listener: TcpListener,
    pub address: SocketAddr,
}

/// Takes the sockets systemd passed this process and removes `LISTEN_FDS`,
/// `LISTEN_PID` and `LISTEN_FDNAMES` from the environment, so that no program the
/// server starts believes they are its own.
///
/// # Safety
///
/// Changes the environment: call it before the process starts any thread.
#[cfg(unix)]
pub unsafe fn take_inherited() -> Result<Option<Inherited>, ListenError> {
    // SAFETY: the caller promises no other thread runs yet.
    let passed: Vec<(i32, String)> = unsafe { sd_notify::listen_fds_with_names_and_unset_env() }
        .map_err(ListenError::Environment)?
        .collect();
    let count = passed.len();
    let mut http = None;
    for (fd, name) in passed {
        let unnamed = name.is_empty() || name == "unknown";
        let is_http = name == "http" || (unnamed && count == 1);
        if !is_http {
            return Err(if unnamed {
                ListenError::Ambiguous { count }
            } else {
                ListenError::UnknownName { name }
            });
        }
        if !is_listening_stream(fd) {
            return Err(ListenError::NotTcpListener { name, fd });
        }
        // SAFETY: systemd passed this descriptor to this process (LISTEN_PID), it is an
        // open listening stream socket (checked above), and nothing else owns it.
        let listener = unsafe { <TcpListener as std::os::unix::io::FromRawFd>::from_raw_fd(fd) };
        let address = listener.local_addr().map_err(ListenError::Address)?;
        http = Some(Inherited { listener, address });
    }
    Ok(http)
}

/// Whether `fd` is a listening stream socket of an internet family.
#[cfg(unix)]
fn is_listening_stream(fd: i32) -> bool {
    let option = |name: libc::c_int| -> Option<libc::c_int> {
        let mut value: libc::c_int = 0;
        let mut length = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `value` and `length` are valid for the call; a bad descriptor fails.
        let status = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                name,
                (&mut value as *mut libc::c_int).cast(),
                &mut length,
            )
        };
        (status == 0).then_some(value)
    };
    let mut address: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut length = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `address` is large enough for any socket address; a bad descriptor fails.
    let named = unsafe {
        libc::getsockname(
            fd,
            (&mut address as *mut libc::sockaddr_storage).cast(),
            &mut length,
        )
    } == 0;
    let internet = named
        && matches!(
            libc::c_int::from(address.ss_family),
            libc::AF_INET | libc::AF_INET6
        );
    internet
        && option(libc::SO_TYPE) == Some(libc::SOCK_STREAM)
        && option(libc::SO_ACCEPTCONN) == Some(1)
}
