//! Failed logins, counted per client address.
//!
//! Past [`MAX_FAILURES`] failures in a [`WINDOW_S`]-second window, an address is refused
//! (`429`, with `Retry-After`) until its window ends, whatever token it shows, so a
//! guessed token cannot be confirmed during the lockout either. Bearer tokens are long
//! random strings; this bounds guessing through the login form, which a browser on the
//! far end of a tunnel may reach. The table is bounded by [`MAX_ADDRESSES`]: when it is
//! full, ended windows are dropped first, and if none has ended a new address goes
//! uncounted rather than growing memory without bound.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// Failed logins an address may make per window.
pub const MAX_FAILURES: u32 = 10;
/// Length of a window, in seconds, from an address's first failure in it.
pub const WINDOW_S: i64 = 60;
/// Addresses tracked at once.
const MAX_ADDRESSES: usize = 4096;

/// Failure windows by client address (`None`: an address tiny_http could not read).
#[derive(Default)]
pub struct LoginThrottle {
    windows: Mutex<HashMap<Option<IpAddr>, Window>>,
}

struct Window {
    started: i64,
    failures: u32,
}

impl LoginThrottle {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Option<IpAddr>, Window>> {
        // Entries are replaced whole: a poisoned table is still consistent.
        self.windows.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Seconds until `address` may try again, when it is refused at `now`.
    pub fn refused(&self, address: Option<IpAddr>, now: i64) -> Option<i64> {
        let windows = self.lock();
        let window = windows.get(&address)?;
        let ends = window.started + WINDOW_S;
        (window.failures >= MAX_FAILURES && now < ends).then(|| ends - now)
    }

    /// Counts a failed login from `address` at `now`.
    pub fn failed(&self, address: Option<IpAddr>, now: i64) {
        let mut windows = self.lock();
        if !windows.contains_key(&address) && windows.len() >= MAX_ADDRESSES {
            windows.retain(|_, window| now < window.started + WINDOW_S);
            if windows.len() >= MAX_ADDRESSES {
                return;
            }
        }
        let window = windows.entry(address).or_insert(Window {
            started: now,
            failures: 0,
        });
        if now >= window.started + WINDOW_S {
            *window = Window {
                started: now,
                failures: 0,
            };
        }
        window.failures += 1;
        if window.failures == MAX_FAILURES {
            log::warn!("dashboard: logins from one address refused for a minute after {MAX_FAILURES} failures");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_refused_after_its_failures_until_its_window_ends() {
        let throttle = LoginThrottle::default();
        let address = Some(IpAddr::from([127, 0, 0, 1]));
        let other = Some(IpAddr::from([127, 0, 0, 2]));
        for _ in 0..MAX_FAILURES - 1 {
            throttle.failed(address, 100);
        }
        assert_eq!(throttle.refused(address, 100), None, "one failure left");
        throttle.failed(address, 110);
        assert_eq!(throttle.refused(address, 110), Some(50));
        assert_eq!(throttle.refused(other, 110), None, "per address");
        assert_eq!(
            throttle.refused(address, 100 + WINDOW_S),
            None,
            "window over"
        );
        throttle.failed(address, 100 + WINDOW_S);
        assert_eq!(
            throttle.refused(address, 100 + WINDOW_S),
            None,
            "a new window"
        );
    }
}
