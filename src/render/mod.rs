//! The bytes of generated files. Every renderer produces complete bytes, so a
//! file's exact size is known before its first read.

pub mod catalog;
pub mod event_file;
pub mod markdown;
pub mod status;
pub mod transcript;

use serde_json::{Map, Value};

use crate::json::{JsonMap, compact_line, pretty_line};
use crate::model::Refusal;
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
    /// Shown to the model now.
    Current,
    /// Replaced by a later event.
    Shadowed {
        /// The replacement that shadows it.
        by: u64,
    },
    /// In the log only, never in the model's view.
    LogOnly,
}

/// `surface.jsonl`, and a model call's `messages.jsonl`: the message of each
/// surface event `seqs` names, in order, one line each. `fetch` reads an event.
pub fn surface_file(
    seqs: impl IntoIterator<Item = u64>,
    mut fetch: impl FnMut(u64) -> Result<JsonMap, Refusal>,
) -> Result<Vec<u8>, Refusal> {
    let mut out = Vec::new();
    for seq in seqs {
        if let Some(line) = surface_line(&fetch(seq)?) {
            out.extend(line);
        }
    }
    Ok(out)
}

/// What `index.jsonl` says of one event (spec §13).
#[derive(Clone, Debug, PartialEq)]
pub struct IndexRow<'a> {
    /// The event's place in the log.
    pub seq: u64,
    /// The event's `type`.
    pub event_type: &'a str,
    /// Unix milliseconds.
    pub time: i64,
    /// Where it stands in the model's view.
    pub standing: Standing,
    /// The seqs a replacement cites.
    pub cites: Option<Value>,
    /// Stored in a legacy shape and shown converted (spec §15).
    pub converted: bool,
    /// A synthetic crash closer, in no store.
    pub synthetic: bool,
}

/// `index.jsonl`: one line per event, in seq order.
pub fn index_file<'a>(
    rows: impl IntoIterator<Item = Result<IndexRow<'a>, Refusal>>,
) -> Result<Vec<u8>, Refusal> {
    let mut out = Vec::new();
    for row in rows {
        out.extend(index_line(&row?));
    }
    Ok(out)
}

/// One `index.jsonl` line: seq, type, time, standing, and for replacements the
/// seqs they cite; events stored in a legacy shape and synthetic crash closers
/// say so.
fn index_line(row: &IndexRow) -> Vec<u8> {
    let mut map = Map::new();
    map.insert("seq".into(), row.seq.into());
    map.insert("type".into(), row.event_type.into());
    map.insert("time".into(), row.time.into());
    let (name, by) = match row.standing {
        Standing::Current => ("current", None),
        Standing::Shadowed { by } => ("shadowed", Some(by)),
        Standing::LogOnly => ("log-only", None),
    };
    map.insert("standing".into(), name.into());
    if let Some(by) = by {
        map.insert("shadowedBy".into(), by.into());
    }
    if let Some(cites) = &row.cites {
        map.insert("cites".into(), cites.clone());
    }
    if row.converted {
        map.insert("converted".into(), true.into());
    }
    if row.synthetic {
        map.insert("synthetic".into(), true.into());
    }
    compact_line(&Value::Object(map))
}

/// The `error` file of a session that cannot be read: what is wrong and, for a
/// reason found in the log or the store, what to do. A reason found outside
/// the log (`external`, e.g. a duplicate id) already says what to do.
pub fn error_file(reason: &Refusal, external: bool) -> Vec<u8> {
    if external {
        return format!("{}\n", reason.message()).into_bytes();
    }
    let advice = match reason {
        Refusal::Unsupported(_) => {
            "The log is intact, but this sessionfs reads only log format v0 and the event types it knows; open it with a newer harness."
        }
        Refusal::Corrupt(_) => {
            "The stored log is damaged where it was already committed, so sessionfs shows no view of it rather than a wrong one; restore the file from a backup or inspect it by hand."
        }
        Refusal::Unavailable { .. } => {
            "sessionfs could not read the store just now; this says nothing about the log's content. It is read again at the next access."
        }
    };
    format!("{}\n{advice}\n", reason.message()).into_bytes()
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
