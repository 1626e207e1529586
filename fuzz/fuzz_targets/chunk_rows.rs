//! Packed chunk-row expansion (spec §10.4, §11.3) on arbitrary JSON:
//! `expand_jsonl_row` under the JSONL and the SQLite member limits, and
//! `expand_row_data` with first seq and time taken from the input's tail.
//!
//! Checks: nothing panics; an expanded row respects the limits it was given,
//! has contiguous seqs from `seq0`, times in the safe range, and packs back
//! (`pack`) to rows that expand to exactly the same events, key order and
//! number spelling included.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use sessionfs::json::{JsonMap, MAX_SAFE_INTEGER, safe_integer};
use sessionfs::model::chunk_rows::{
    JSONL_ROW_LIMITS, RowKind, RowLimits, SQLITE_ROW_LIMITS, expand_jsonl_row, expand_row_data,
    pack,
};

fn text(events: &[JsonMap]) -> Vec<String> {
    events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect()
}

fn check_expanded(events: &[JsonMap], seq0: i64, limits: RowLimits) {
    assert!(events.len() >= limits.min_members && events.len() <= limits.max_members);
    for (k, event) in events.iter().enumerate() {
        assert_eq!(
            safe_integer(&event["seq"]),
            Some(seq0 + k as i64),
            "member {k} has the wrong seq"
        );
        assert!(safe_integer(&event["time"]).is_some_and(|t| t.abs() <= MAX_SAFE_INTEGER));
    }
    // Re-packing and expanding again restores the events exactly.
    let mut again = Vec::new();
    for row in pack(events, usize::MAX) {
        match row
            .get("type")
            .and_then(Value::as_str)
            .and_then(RowKind::from_tag)
        {
            Some(kind) if row.contains_key("seq0") => again.extend(
                expand_jsonl_row(kind, &row, JSONL_ROW_LIMITS)
                    .expect("a packed row does not expand"),
            ),
            _ => again.push(row),
        }
    }
    assert_eq!(
        text(&again),
        text(events),
        "expand(pack(expand(row))) differs from expand(row)"
    );
}

fuzz_target!(|data: &[u8]| {
    // The JSON text, then (after a NUL) 16 bytes of seq0 and time0.
    let (json, tail) = match data.iter().position(|b| *b == 0) {
        Some(nul) => (&data[..nul], &data[nul + 1..]),
        None => (data, &[][..]),
    };
    let Ok(Value::Object(record)) = serde_json::from_slice::<Value>(json) else {
        return;
    };
    let kinds = [RowKind::Text, RowKind::Reasoning, RowKind::ToolCall];
    let tagged = record
        .get("type")
        .and_then(Value::as_str)
        .and_then(RowKind::from_tag);
    for kind in tagged.into_iter().chain(kinds) {
        for limits in [JSONL_ROW_LIMITS, SQLITE_ROW_LIMITS] {
            match expand_jsonl_row(kind, &record, limits) {
                Ok(events) => {
                    check_expanded(&events, safe_integer(&record["seq0"]).unwrap(), limits)
                }
                Err(why) => assert!(why.starts_with("malformed "), "{why}"),
            }
        }
    }
    // `data` as a bare row body (the SQLite packed-row column).
    let data_object = record
        .get("data")
        .and_then(Value::as_object)
        .unwrap_or(&record);
    let mut numbers = [0u8; 16];
    numbers[..tail.len().min(16)].copy_from_slice(&tail[..tail.len().min(16)]);
    let seq0 = (i64::from_le_bytes(numbers[..8].try_into().unwrap()) & MAX_SAFE_INTEGER).abs();
    let time0 = i64::from_le_bytes(numbers[8..].try_into().unwrap()) % (MAX_SAFE_INTEGER + 1);
    for kind in kinds {
        for limits in [JSONL_ROW_LIMITS, SQLITE_ROW_LIMITS] {
            if let Ok(events) = expand_row_data(kind, seq0, time0, data_object, limits) {
                check_expanded(&events, seq0, limits);
            }
        }
    }
});
