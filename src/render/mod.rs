//! The bytes of generated files. Every renderer produces complete bytes, so a
//! file's exact size is known before its first read.

pub mod event_file;
pub mod markdown;
pub mod status;
pub mod transcript;

use serde_json::{Map, Value};

use crate::json::{JsonMap, compact_line, pretty_line};
use crate::model::fold::SessionFold;
use crate::model::header::SessionHeader;

/// `header.json`: the session header, then the folded request header (`null` when
/// the log has none), the latest request context and the latest title.
pub fn header_json(header: &SessionHeader, fold: Option<&SessionFold>) -> Vec<u8> {
    let mut map = header.to_json();
    map.insert(
        "request".into(),
        fold.and_then(SessionFold::request_header)
            .cloned()
            .unwrap_or(Value::Null),
    );
    map.insert(
        "requestContext".into(),
        fold.and_then(SessionFold::request_context)
            .cloned()
            .unwrap_or(Value::Null),
    );
    map.insert(
        "title".into(),
        fold.and_then(SessionFold::title)
            .cloned()
            .unwrap_or(Value::Null),
    );
    pretty_line(&Value::Object(map))
}

/// The model message a surface event contributes (spec §5.4), or `None` for an
/// empty-content assistant message.
pub fn derived_message(event: &JsonMap) -> Option<&Value> {
    let data = event.get("data")?;
    match event.get("type")?.as_str()? {
        "user/message" => Some(data),
        "assistant/message" => data.get("message").filter(|m| {
            m.get("content")
                .and_then(Value::as_array)
                .is_some_and(|c| !c.is_empty())
        }),
        "tool/result" => data.get("message"),
        _ => None,
    }
}

/// One `surface.jsonl` line, or nothing for an empty-content assistant message.
pub fn surface_line(event: &JsonMap) -> Option<Vec<u8>> {
    derived_message(event).map(compact_line)
}

/// Where an event stands in the model's view (spec §13).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    Current,
    Shadowed { by: u64 },
    LogOnly,
}

/// One `index.jsonl` line: seq, type, time, standing, and for replacements the
/// seqs they cite; events stored in a legacy shape and synthetic crash closers
/// say so.
pub fn index_line(
    seq: u64,
    event_type: &str,
    time: &Value,
    standing: Standing,
    cites: Option<&Value>,
    converted: bool,
    synthetic: bool,
) -> Vec<u8> {
    let mut map = Map::new();
    map.insert("seq".into(), seq.into());
    map.insert("type".into(), event_type.into());
    map.insert("time".into(), time.clone());
    let (name, by) = match standing {
        Standing::Current => ("current", None),
        Standing::Shadowed { by } => ("shadowed", Some(by)),
        Standing::LogOnly => ("log-only", None),
    };
    map.insert("standing".into(), name.into());
    if let Some(by) = by {
        map.insert("shadowedBy".into(), by.into());
    }
    if let Some(cites) = cites {
        map.insert("cites".into(), cites.clone());
    }
    if converted {
        map.insert("converted".into(), true.into());
    }
    if synthetic {
        map.insert("synthetic".into(), true.into());
    }
    compact_line(&Value::Object(map))
}

/// Unix milliseconds as an RFC 3339 UTC timestamp, e.g. `2026-03-14T09:00:00.102Z`.
pub fn format_time(ms: i64) -> String {
    let seconds = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = seconds.div_euclid(86_400);
    let second_of_day = seconds.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_times_in_utc() {
        assert_eq!(format_time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_time(1_760_000_000_102), "2025-10-09T08:53:20.102Z");
        assert_eq!(format_time(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(format_time(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}
