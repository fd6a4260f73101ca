//! Hearing that a program has exited, without reaping it: while it is unreaped its pid,
//! which is also its process group's id, cannot be reused, so signalling the group and
//! sweeping what it left stay safe until the run reaps it (`reap_program`).
//!
//! - Linux: a pidfd (5.3+), readable once the program has exited. The supervision loop
//!   polls it together with the program's pipes, so an exit wakes it at once.
//! - Portable (macOS and every system but Linux, and Linux with `--features portable`,
//!   as CI runs it; also Linux before 5.3): no descriptor. The loop looks with
//!   [`has_exited`] (`waitid` with `WNOWAIT`) between pauses of 1 ms doubling up to
//!   20 ms; output, and the end of output when the program exits, wake it sooner.
//!   (macOS's kqueue `EVFILT_PROC` would wake it at once; it is not used, because no
//!   machine here could run it.)

use std::os::fd::OwnedFd;

/// A descriptor that becomes readable once our unreaped child `pid` has exited, where
/// the system has them.
pub fn descriptor(pid: libc::pid_t) -> Option<OwnedFd> {
    #[cfg(all(target_os = "linux", not(feature = "portable")))]
    {
        use std::os::fd::FromRawFd;
        // SAFETY: plain system call; a non-negative result is a descriptor we own.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        // SAFETY: the descriptor was just created and is owned by nothing else.
        (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
    }
    #[cfg(any(not(target_os = "linux"), feature = "portable"))]
    {
        let _ = pid;
        None
    }
}

/// Whether our child `pid` has exited, without reaping it.
pub fn has_exited(pid: libc::pid_t) -> bool {
    // SAFETY: siginfo_t is plain data; waitid writes into the struct we own.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let options = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        if libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, options) != 0 {
            // Only ECHILD is possible here: nothing left to wait for.
            return true;
        }
        // macOS has been seen to report a stopped child here, which has not exited.
        info.si_pid() != 0
            && matches!(
                info.si_code,
                libc::CLD_EXITED | libc::CLD_KILLED | libc::CLD_DUMPED
            )
    }
}
