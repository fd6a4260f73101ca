//! Asks the kernel about a stream's connection without reading from it: has the client
//! hung up, and how much of what the server wrote is still waiting to be sent because the
//! client stopped reading.
//!
//! A listen stream only writes, so without this a client that went away is noticed at the
//! next write (a keep-alive, up to `keep_alive_ms` later) and holds its subscription slot
//! until then. Reading the socket is no answer: the connection's reader half may have
//! been shut down by the HTTP layer, which makes it look closed whether the client is
//! there or not. The TCP state is unambiguous: a FIN or RST from the client moves it
//! out of `ESTABLISHED`.
//!
//! Each system asks in its own words:
//! - Linux: `TCP_INFO` for the state, `SIOCOUTQNSD` for the bytes not sent yet;
//! - macOS: `TCP_CONNECTION_INFO` for the state, `SO_NWRITE` for the bytes not yet
//!   acknowledged (unsent, or sent and in flight: on a client that stopped reading it
//!   is the same figure);
//! - elsewhere, and on Linux built with `--features portable` (as CI runs it): neither
//!   can be asked. A hang-up is noticed at the next write, and the unsent bytes are
//!   unknown, which the listen stream treats conservatively (see
//!   `listen::Outlet::behind`): it pauses whenever the socket has no room.

use std::os::unix::io::RawFd;

#[cfg(all(target_vendor = "apple", not(feature = "portable")))]
use apple as imp;
#[cfg(all(target_os = "linux", not(feature = "portable")))]
use linux as imp;
#[cfg(not(all(
    any(target_os = "linux", target_vendor = "apple"),
    not(feature = "portable")
)))]
use portable as imp;

/// A connection's descriptor, borrowed from the response writer that owns it: use it
/// only while that writer lives.
#[derive(Clone, Copy)]
pub struct Peer {
    fd: RawFd,
}

impl Peer {
    pub fn new(fd: RawFd) -> Peer {
        Peer { fd }
    }

    /// Whether the client closed or reset the connection. Not a TCP socket, any error,
    /// or a system that cannot say: `false` (the next write will tell).
    pub fn hung_up(self) -> bool {
        imp::hung_up(self.fd)
    }

    /// Bytes written but not yet sent: while the client's receive window is open they
    /// leave at once, so this grows only when the client is not reading. `None` if the
    /// kernel cannot say.
    pub fn unsent_bytes(self) -> Option<u64> {
        imp::unsent_bytes(self.fd)
    }

    /// The socket's send buffer, as the kernel reports it (Linux: twice the payload it
    /// holds).
    pub fn send_buffer(self) -> Option<u64> {
        let mut size: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `fd` is open (see the type's doc); SO_SNDBUF writes one int of `len`
        // bytes.
        let rc = unsafe {
            libc::getsockopt(
                self.fd,
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&mut size as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return None;
        }
        u64::try_from(size).ok()
    }

    /// Whether the socket would take a write now without blocking: it has no room when
    /// its send buffer is (nearly) full of bytes the client has not read. An error:
    /// `true` (the write will tell).
    pub fn has_room(self) -> bool {
        let mut poll = libc::pollfd {
            fd: self.fd,
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one pollfd of ours, no wait; `fd` is open (see the type's doc).
        let ready = unsafe { libc::poll(&mut poll, 1, 0) };
        ready != 0
    }
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
mod linux {
    use std::os::unix::io::RawFd;

    /// `TCP_ESTABLISHED` from the kernel's `tcp_states.h` (not exported by `libc`).
    const TCP_ESTABLISHED: u8 = 1;

    pub fn hung_up(fd: RawFd) -> bool {
        let mut info = std::mem::MaybeUninit::<libc::tcp_info>::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        // SAFETY: `fd` is open (see `Peer`); the kernel writes at most `len` bytes into
        // `info`, which is that large and zeroed.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                info.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if rc != 0 || len == 0 {
            return false;
        }
        // SAFETY: zero-initialised plain integers, partly overwritten by the kernel.
        let info = unsafe { info.assume_init() };
        info.tcpi_state != TCP_ESTABLISHED
    }

    pub fn unsent_bytes(fd: RawFd) -> Option<u64> {
        let mut unsent: libc::c_int = 0;
        // SAFETY: `fd` is open (see `Peer`); SIOCOUTQNSD writes one int.
        if unsafe { libc::ioctl(fd, libc::SIOCOUTQNSD, &mut unsent) } != 0 {
            return None;
        }
        u64::try_from(unsent).ok()
    }
}

#[cfg(all(target_vendor = "apple", not(feature = "portable")))]
mod apple {
    use std::os::unix::io::RawFd;

    /// `TCPS_ESTABLISHED` from XNU's `netinet/tcp_fsm.h` (not exported by `libc`).
    const TCPS_ESTABLISHED: u8 = 4;

    pub fn hung_up(fd: RawFd) -> bool {
        let mut info = std::mem::MaybeUninit::<libc::tcp_connection_info>::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_connection_info>() as libc::socklen_t;
        // SAFETY: `fd` is open (see `Peer`); the kernel writes at most `len` bytes into
        // `info`, which is that large and zeroed.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_CONNECTION_INFO,
                info.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if rc != 0 || len == 0 {
            return false;
        }
        // SAFETY: zero-initialised plain integers, partly overwritten by the kernel.
        let info = unsafe { info.assume_init() };
        info.tcpi_state != TCPS_ESTABLISHED
    }

    pub fn unsent_bytes(fd: RawFd) -> Option<u64> {
        let mut unsent: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `fd` is open (see `Peer`); SO_NWRITE writes one int of `len` bytes.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_NWRITE,
                (&mut unsent as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return None;
        }
        u64::try_from(unsent).ok()
    }
}

#[cfg(not(all(
    any(target_os = "linux", target_vendor = "apple"),
    not(feature = "portable")
)))]
mod portable {
    use std::os::unix::io::RawFd;

    pub fn hung_up(_fd: RawFd) -> bool {
        false
    }

    pub fn unsent_bytes(_fd: RawFd) -> Option<u64> {
        None
    }
}
