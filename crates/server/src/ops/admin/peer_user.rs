//! Who is at the other end of the admin socket: the effective user id the kernel
//! recorded when the peer connected. POSIX has no call for it, so each system has its
//! own (and a build with `--features portable` keeps Linux's, there being no portable
//! one to test instead):
//! - Linux: `SO_PEERCRED`;
//! - macOS and the BSDs: `getpeereid` (`LOCAL_PEERCRED` underneath).

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// The peer's effective user id.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn peer_uid(stream: &UnixStream) -> std::io::Result<libc::uid_t> {
    let mut credentials = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: u32::MAX,
    };
    let mut length = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the buffer is a ucred of the length passed; the fd is open for the call.
    let got = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut credentials as *mut libc::ucred).cast(),
            &mut length,
        )
    };
    if got != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(credentials.uid)
}

/// The peer's effective user id.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn peer_uid(stream: &UnixStream) -> std::io::Result<libc::uid_t> {
    let mut uid: libc::uid_t = libc::uid_t::MAX;
    let mut gid: libc::gid_t = libc::gid_t::MAX;
    // SAFETY: writes the two ids we own; the fd is open for the call.
    if unsafe { libc::getpeereid(stream.as_raw_fd(), &mut uid, &mut gid) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(uid)
}
