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

use std::os::unix::io::RawFd;

/// `TCP_ESTABLISHED` from the kernel's `tcp_states.h` (not exported by `libc`).
const TCP_ESTABLISHED: u8 = 1;

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

    /// Whether the client closed or reset the connection. Not a TCP socket, or any
    /// error: `false` (the next write will tell).
    pub fn hung_up(self) -> bool {
        let mut info = std::mem::MaybeUninit::<libc::tcp_info>::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        // SAFETY: `fd` is open while the writer lives (see the type's doc); the kernel
        // writes at most `len` bytes into `info`, which is that large and zeroed.
        let rc = unsafe {
            libc::getsockopt(
                self.fd,
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

    /// Bytes written but not yet sent: while the client's receive window is open they
    /// leave at once, so this grows only when the client is not reading. `None` if the
    /// kernel cannot say.
    pub fn unsent_bytes(self) -> Option<u64> {
        let mut unsent: libc::c_int = 0;
        // SAFETY: `fd` is open (see the type's doc); SIOCOUTQNSD writes one int.
        if unsafe { libc::ioctl(self.fd, libc::SIOCOUTQNSD, &mut unsent) } != 0 {
            return None;
        }
        u64::try_from(unsent).ok()
    }

    /// The socket's send buffer, as the kernel reports it (twice the payload it holds).
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
}
