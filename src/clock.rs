//! Wall-clock times as mara records them: RFC 3339 in UTC, and run ids that sort by time; and
//! durations, as people write them and as mara says them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `2026-11-21T17:08:56.123Z`.
pub fn rfc3339(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let (date, clock) = civil(since.as_secs() as i64);
    format!("{date}T{clock}.{:03}Z", since.subsec_millis())
}

/// `20261121-170856-4f2a`: the time the run started, and four hex digits that keep two runs of the
/// same second apart.
pub fn run_id(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let (date, clock) = civil(since.as_secs() as i64);
    let noise = noise(since.subsec_nanos(), std::process::id());
    format!(
        "{}-{}-{noise:06x}",
        date.replace('-', ""),
        clock.replace(':', "")
    )
}

/// What sets apart runs that start in the same second (six at once, say): the clock's
/// nanoseconds (which may advance in coarse steps) and the process id, mixed by SplitMix64's
/// finaliser, 24 bits of it.
fn noise(nanos: u32, pid: u32) -> u64 {
    let mut x = u64::from(nanos) ^ (u64::from(pid) << 32);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) & 0xff_ffff
}

/// (`YYYY-MM-DD`, `HH:MM:SS`) of a Unix time, by Howard Hinnant's days-from-civil inverse.
fn civil(secs: i64) -> (String, String) {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        format!("{year:04}-{month:02}-{day:02}"),
        format!("{:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60),
    )
}

/// The time an `rfc3339` string says (only that form: `YYYY-MM-DDTHH:MM:SS[.mmm]Z`), by Howard
/// Hinnant's days-from-civil.
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut date = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (date.next()??, date.next()??, date.next()??);
    let (time, millis) = match time.split_once('.') {
        Some((t, m)) => (t, m.parse::<u64>().ok()?),
        None => (time, 0),
    };
    let mut time = time.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (hour, minute, second) = (time.next()??, time.next()??, time.next()??);
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second;
    let secs = u64::try_from(secs).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis))
}

/// A duration as people write it: numbers, each with its unit — `ms`, `s`, `m`, `h`, `d` (or
/// spelled out, `sec`, `min`, `hours`, `days`) — with fractions (`0.5s`, `1.5h`) and several
/// together (`1m30s`, `1h 30m`), read by the `humantime` crate (docs/decisions.md, "What a retry
/// matches, and how long it waits"). Refused, what is wrong and what would do, for an error that
/// names the file, line and key.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let refused = |why: String| {
        format!(
            "`{text}` is not a duration ({why}): numbers, each with its unit (ms, s, m, h or d), as in \"2s\", \"0.5s\", \"1m30s\", \"1h\" or \"2d\""
        )
    };
    // humantime reads more units than these (`M`, a month; weeks, years, nanoseconds) and a
    // bare `0`: only the documented ones are taken, so that `1M` is not a month by surprise.
    for unit in units(text) {
        if !UNITS.contains(&unit) {
            let month = match unit {
                "M" => ": `M` would be a month; a minute is `m`",
                _ => "",
            };
            return Err(refused(format!("unknown time unit \"{unit}\"{month}")));
        }
    }
    if !text.trim().is_empty() && units(text).next().is_none() {
        return Err(refused("time unit needed".into()));
    }
    humantime::parse_duration(text.trim()).map_err(|error| refused(error.to_string()))
}

/// The units a duration is written in (docs/formats.md, "Budgets and retries").
const UNITS: &[&str] = &[
    "ms", "msec", "s", "sec", "secs", "second", "seconds", "m", "min", "mins", "minute", "minutes",
    "h", "hr", "hrs", "hour", "hours", "d", "day", "days",
];

/// The words of letters in `text`, in order: its units.
fn units(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| !w.is_empty())
}

/// `1.2s`, `2m05s`: a duration for people.
pub fn human(duration: Duration) -> String {
    let secs = duration.as_secs_f64();
    if secs < 60.0 {
        format!("{secs:.1}s")
    } else {
        let whole = duration.as_secs();
        format!("{}m{:02}s", whole / 60, whole % 60)
    }
}

/// The time as a run tells it: one clock, given to the runner, stamps every event (when a project
/// started and ended, when the run did), so that the sinks — the terminal, the ledger — never
/// read one of their own, and a test can give it a time that does not move.
pub trait Clock: Send + Sync {
    fn now(&self) -> SystemTime;
}

/// The system's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that says `at` until told otherwise (for tests).
#[derive(Debug)]
pub struct FixedClock(pub std::sync::Mutex<SystemTime>);

impl Clock for FixedClock {
    fn now(&self) -> SystemTime {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_fractions_compounds_and_days() {
        let secs = Duration::from_secs;
        for (text, duration) in [
            ("2s", secs(2)),
            ("250ms", Duration::from_millis(250)),
            ("0.5s", Duration::from_millis(500)),
            ("1.5h", secs(5400)),
            ("1m30s", secs(90)),
            ("1m 30s", secs(90)),
            ("1h", secs(3600)),
            ("2d", secs(2 * 86_400)),
            ("1d 12h", secs(36 * 3600)),
            (" 10min ", secs(600)),
        ] {
            assert_eq!(parse_duration(text), Ok(duration), "{text}");
        }
        for (text, why) in [
            ("2", "time unit needed"),
            ("0", "time unit needed"),
            ("1M", "`M` would be a month; a minute is `m`"),
            ("1w", "unknown time unit \"w\""),
            ("5ns", "unknown time unit \"ns\""),
            ("", "empty"),
            ("-1s", "expected number"),
            ("1x", "unknown time unit \"x\""),
            ("1m30", "time unit needed"),
            ("soon", "unknown time unit \"soon\""),
        ] {
            let refused = parse_duration(text).unwrap_err();
            assert!(
                refused.starts_with(&format!("`{text}` is not a duration (")),
                "{refused}"
            );
            assert!(refused.contains(why), "{text}: {refused}");
            assert!(
                refused.contains("\"1m30s\""),
                "says what would do: {refused}"
            );
        }
    }

    #[test]
    fn known_instants() {
        let t = UNIX_EPOCH + Duration::from_millis(1_795_280_936_123);
        assert_eq!(rfc3339(t), "2026-11-21T17:08:56.123Z");
        let id = run_id(t);
        assert!(id.starts_with("20261121-170856-") && id.len() == 22, "{id}");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00.000Z"
        );
    }

    #[test]
    fn runs_started_at_the_same_instant_by_different_processes_differ() {
        // The same (coarse) nanoseconds: the process ids tell them apart.
        let ids: std::collections::BTreeSet<u64> = (1000..1500).map(|pid| noise(0, pid)).collect();
        assert_eq!(ids.len(), 500);
        let ids: std::collections::BTreeSet<u64> =
            (0..500).map(|step| noise(step * 1000, 4242)).collect();
        assert_eq!(ids.len(), 500);
    }

    #[test]
    fn durations_for_people() {
        assert_eq!(human(Duration::from_millis(1234)), "1.2s");
        assert_eq!(human(Duration::from_secs(125)), "2m05s");
    }

    #[test]
    fn a_time_reads_back_as_written() {
        for secs in [0u64, 951_782_400, 1_795_000_123, 4_102_444_800] {
            let time = UNIX_EPOCH + Duration::from_millis(secs * 1000 + 457);
            assert_eq!(
                parse_rfc3339(&rfc3339(time)),
                Some(time),
                "{}",
                rfc3339(time)
            );
        }
        assert_eq!(parse_rfc3339("2026-11-21T17:08:56"), None);
        assert_eq!(parse_rfc3339("yesterday"), None);
    }
}
