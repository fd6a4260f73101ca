//! Operating the service: what systemd sees of it ([`systemd`]: readiness, status and a
//! watchdog fed only while the loops in `liveness` make progress).

pub mod systemd;
