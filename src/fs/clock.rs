//! Times as the store keeps them (milliseconds since the Unix epoch) and as
//! attributes show them. A leaf: it imports nothing of fs.

use std::time::{Duration, SystemTime};

/// A `SystemTime` in milliseconds since the Unix epoch (earlier times are 0).
pub(super) fn ms_of(time: SystemTime) -> i64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A Unix time in milliseconds as a `SystemTime` (negative times are the epoch).
pub(super) fn time_of(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}
