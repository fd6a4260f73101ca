//! When a schedule's slots fall: a cron pattern in a time zone, or a fixed period.
//!
//! - `cron`: five fields (minute, hour, day of month, month, day of week) or a shorthand
//!   (`@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight`, `@hourly`),
//!   evaluated by `croner` on `jiff`'s zoned times in the schedule's `timezone`. Across
//!   a daylight-saving change, a wall-clock time that does not exist (the gap) runs
//!   once, at the first instant after the gap; one that exists twice (the fold) runs
//!   once, at its first occurrence, for a pattern with fixed hours and minutes; a
//!   pattern that runs every so many minutes or hours keeps its pace through both.
//! - `every`: a period of whole seconds (`"90s"`, `"5m"`, `"1h30m"`, `"1d"`), its slots at
//!   whole multiples of it since the Unix epoch, so every node and every restart agrees
//!   on them: `"5m"` at :00, :05, …; `"1d"` at midnight UTC.

use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};

/// Longest `every`: a year.
const MAX_PERIOD_MS: i64 = 366 * 86_400_000;

/// How far [`Timing::count_between`] counts a cron schedule's slots before it stops.
pub const COUNT_AT_MOST: i64 = 10_000;

/// A schedule's slots.
#[derive(Debug, Clone)]
pub enum Timing {
    Every {
        period_ms: i64,
    },
    Cron {
        cron: Box<Cron>,
        zone: TimeZone,
        /// The pattern and zone as written, to describe and compare it.
        text: String,
        zone_name: String,
    },
}

/// Why a timing was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TimingError {
    #[error("cron {0:?}: {1}")]
    Cron(String, String),
    #[error("cron {0:?} never matches a time")]
    Never(String),
    #[error("timezone {0:?} is not in the time zone database (use a name such as \"Europe/Berlin\" or \"UTC\")")]
    Zone(String),
    #[error("every {0:?}: {1}")]
    Every(String, &'static str),
}

impl Timing {
    /// A cron pattern in the time zone `zone` (an IANA name).
    pub fn cron(pattern: &str, zone: &str) -> Result<Timing, TimingError> {
        let tz = TimeZone::get(zone).map_err(|_| TimingError::Zone(zone.to_owned()))?;
        let parser = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build();
        let cron = parser
            .parse(pattern.trim())
            .map_err(|error| TimingError::Cron(pattern.to_owned(), error.to_string()))?;
        let timing = Timing::Cron {
            cron: Box::new(cron),
            zone: tz,
            text: pattern.trim().to_owned(),
            zone_name: zone.to_owned(),
        };
        // A pattern such as "0 0 31 2 *" parses, and never runs.
        if timing.next_after(taskd_base::clock::now_ms()).is_none() {
            return Err(TimingError::Never(pattern.to_owned()));
        }
        Ok(timing)
    }

    /// A period: whole numbers with units `s`, `m`, `h`, `d`, one after another
    /// (`"1h30m"`), at least a second.
    pub fn every(text: &str) -> Result<Timing, TimingError> {
        let fail = |why| TimingError::Every(text.to_owned(), why);
        let mut rest = text.trim();
        if rest.is_empty() {
            return Err(fail(
                "a period such as \"30s\", \"5m\", \"1h30m\" or \"1d\"",
            ));
        }
        let mut period_ms: i64 = 0;
        while !rest.is_empty() {
            let digits = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            if digits == 0 {
                return Err(fail(
                    "a period such as \"30s\", \"5m\", \"1h30m\" or \"1d\"",
                ));
            }
            let number: i64 = rest[..digits].parse().map_err(|_| fail("too long"))?;
            let unit = rest[digits..].chars().next();
            let unit_ms = match unit {
                Some('s') => 1_000,
                Some('m') => 60_000,
                Some('h') => 3_600_000,
                Some('d') => 86_400_000,
                _ => return Err(fail("each number needs a unit: s, m, h or d")),
            };
            period_ms = number
                .checked_mul(unit_ms)
                .and_then(|ms| period_ms.checked_add(ms))
                .ok_or_else(|| fail("too long"))?;
            rest = &rest[digits + 1..];
        }
        if period_ms < 1_000 {
            return Err(fail("at least one second"));
        }
        if period_ms > MAX_PERIOD_MS {
            return Err(fail("at most 366 days"));
        }
        Ok(Timing::Every { period_ms })
    }

    /// The first slot strictly after `ms` (Unix ms); `None` if there is none.
    pub fn next_after(&self, ms: i64) -> Option<i64> {
        match self {
            Timing::Every { period_ms } => ms
                .div_euclid(*period_ms)
                .checked_add(1)?
                .checked_mul(*period_ms),
            Timing::Cron { cron, zone, .. } => {
                let at = zoned(ms, zone)?;
                let next = cron.find_next_occurrence(&at, false).ok()?;
                Some(next.timestamp().as_millisecond())
            }
        }
    }

    /// The last slot at or before `ms`; `None` if there is none.
    pub fn latest_at_or_before(&self, ms: i64) -> Option<i64> {
        match self {
            Timing::Every { period_ms } => ms.div_euclid(*period_ms).checked_mul(*period_ms),
            Timing::Cron { cron, zone, .. } => {
                let at = zoned(ms, zone)?;
                let previous = cron.find_previous_occurrence(&at, true).ok()?;
                Some(previous.timestamp().as_millisecond())
            }
        }
    }

    /// How many slots fall after `after` and at or before `upto` (for a cron pattern,
    /// counted no further than [`COUNT_AT_MOST`]).
    pub fn count_between(&self, after: i64, upto: i64) -> i64 {
        if upto <= after {
            return 0;
        }
        match self {
            Timing::Every { period_ms } => {
                upto.div_euclid(*period_ms) - after.div_euclid(*period_ms)
            }
            Timing::Cron { .. } => {
                let mut count = 0;
                let mut at = after;
                while count < COUNT_AT_MOST {
                    match self.next_after(at) {
                        Some(next) if next <= upto => {
                            count += 1;
                            at = next;
                        }
                        _ => break,
                    }
                }
                count
            }
        }
    }

    /// How it reads: `every 5m` (in seconds when not whole minutes), `cron "0 3 * * *"
    /// in Europe/Berlin`. Two timings that read alike have the same slots.
    pub fn describe(&self) -> String {
        match self {
            Timing::Every { period_ms } => {
                let seconds = period_ms / 1000;
                match seconds {
                    s if s % 86_400 == 0 => format!("every {}d", s / 86_400),
                    s if s % 3_600 == 0 => format!("every {}h", s / 3_600),
                    s if s % 60 == 0 => format!("every {}m", s / 60),
                    s => format!("every {s}s"),
                }
            }
            Timing::Cron {
                text, zone_name, ..
            } => format!("cron \"{text}\" in {zone_name}"),
        }
    }
}

/// The instant `ms` in `zone`.
fn zoned(ms: i64, zone: &TimeZone) -> Option<Zoned> {
    Some(Timestamp::from_millisecond(ms).ok()?.to_zoned(zone.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unix ms of an RFC 3339 instant.
    fn ms(text: &str) -> i64 {
        text.parse::<Timestamp>().unwrap().as_millisecond()
    }

    #[test]
    fn every_takes_whole_units_and_aligns_to_the_epoch() {
        let Timing::Every { period_ms } = Timing::every("1h30m").unwrap() else {
            panic!("not a period");
        };
        assert_eq!(period_ms, 5_400_000);
        for bad in ["", "5", "m", "5w", "0s", "500ms", "400d", "1h 30m"] {
            assert!(Timing::every(bad).is_err(), "{bad:?}");
        }
        let five = Timing::every("5m").unwrap();
        let at = ms("2026-03-01T10:07:12Z");
        assert_eq!(five.next_after(at), Some(ms("2026-03-01T10:10:00Z")));
        assert_eq!(
            five.latest_at_or_before(at),
            Some(ms("2026-03-01T10:05:00Z"))
        );
        let slot = ms("2026-03-01T10:05:00Z");
        assert_eq!(five.next_after(slot), Some(ms("2026-03-01T10:10:00Z")));
        assert_eq!(five.latest_at_or_before(slot), Some(slot));
        assert_eq!(five.count_between(slot, ms("2026-03-01T10:30:00Z")), 5);
        assert_eq!(five.describe(), "every 5m");
        assert_eq!(Timing::every("90s").unwrap().describe(), "every 90s");
    }

    #[test]
    fn cron_takes_five_fields_and_shorthands() {
        for bad in [
            "* * * *",
            "0 * * * * *",
            "61 * * * *",
            "@reboot",
            "nonsense",
        ] {
            assert!(Timing::cron(bad, "UTC").is_err(), "{bad:?}");
        }
        assert!(matches!(
            Timing::cron("0 0 31 2 *", "UTC"),
            Err(TimingError::Never(_))
        ));
        assert!(matches!(
            Timing::cron("@hourly", "Mars/Olympus"),
            Err(TimingError::Zone(_))
        ));
        let hourly = Timing::cron("@hourly", "UTC").unwrap();
        let at = ms("2026-03-01T10:07:12Z");
        assert_eq!(hourly.next_after(at), Some(ms("2026-03-01T11:00:00Z")));
        assert_eq!(
            hourly.latest_at_or_before(at),
            Some(ms("2026-03-01T10:00:00Z"))
        );
        assert_eq!(hourly.count_between(at, ms("2026-03-01T15:00:00Z")), 5);
        // A day of month and a day of week both given: either matches (Vixie cron).
        let either = Timing::cron("0 0 1 * MON", "UTC").unwrap();
        // Sunday 2026-03-01 (the first), then Monday 2026-03-02.
        assert_eq!(
            either.next_after(ms("2026-02-28T12:00:00Z")),
            Some(ms("2026-03-01T00:00:00Z"))
        );
        assert_eq!(
            either.next_after(ms("2026-03-01T00:00:00Z")),
            Some(ms("2026-03-02T00:00:00Z"))
        );
        let weekdays = Timing::cron("30 9 * * 1-5", "UTC").unwrap();
        // Saturday 2026-03-07: the next is Monday's.
        assert_eq!(
            weekdays.next_after(ms("2026-03-07T12:00:00Z")),
            Some(ms("2026-03-09T09:30:00Z"))
        );
    }

    #[test]
    fn daylight_saving_changes_run_a_local_time_once() {
        // Europe/Berlin springs forward at 02:00 on 2026-03-29 (to 03:00, UTC+2) and
        // falls back at 03:00 on 2026-10-25 (to 02:00, UTC+1).
        let daily = Timing::cron("30 2 * * *", "Europe/Berlin").unwrap();
        // 02:30 does not exist on the 29th: once, just after the gap (03:00 CEST).
        assert_eq!(
            daily.next_after(ms("2026-03-28T12:00:00Z")),
            Some(ms("2026-03-29T01:00:00Z"))
        );
        assert_eq!(
            daily.next_after(ms("2026-03-29T01:00:00Z")),
            Some(ms("2026-03-30T00:30:00Z"))
        );
        // 02:30 happens twice on 25 October: once, the first time (CEST).
        assert_eq!(
            daily.next_after(ms("2026-10-24T12:00:00Z")),
            Some(ms("2026-10-25T00:30:00Z"))
        );
        assert_eq!(
            daily.next_after(ms("2026-10-25T00:30:00Z")),
            Some(ms("2026-10-26T01:30:00Z"))
        );
        // Every half hour keeps its pace through the fold: 02:00 and 02:30 come twice.
        let half = Timing::cron("*/30 * * * *", "Europe/Berlin").unwrap();
        let mut at = ms("2026-10-24T23:45:00Z");
        let mut slots = Vec::new();
        for _ in 0..5 {
            at = half.next_after(at).unwrap();
            slots.push(at);
        }
        let paces: Vec<i64> = slots.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(paces, [1_800_000; 4], "{slots:?}");
        // The local hour moves in UTC across the change.
        let nine = Timing::cron("0 9 * * *", "Europe/Berlin").unwrap();
        assert_eq!(
            nine.next_after(ms("2026-03-28T12:00:00Z")),
            Some(ms("2026-03-29T07:00:00Z"))
        );
    }
}
