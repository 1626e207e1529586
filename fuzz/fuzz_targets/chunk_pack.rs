//! `pack` then expansion of packed chunk rows (spec §10.4 "Encoder
//! eligibility"), on event batches built from structured input: runs of
//! `assistant/chunk` deltas (text, reasoning, tool-call, with or without a
//! name) mixed with other events, seq gaps, time jumps to the edges of the
//! safe range, and spellings that are not packable (extra keys, non-integer
//! seqs).
//!
//! Checks: for every member cap (3..=1024 as SQLite, or unbounded as JSONL)
//! every packed row expands (under that backend's limits) back to exactly the
//! events it came from (equal as JSON values; byte for byte, key order and
//! number spelling included, when the batch holds only events spelled as the
//! Harness writes them), and rows never exceed the cap.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};
use sessionfs::json::{JsonMap, MAX_SAFE_INTEGER, deep_equal};
use sessionfs::model::chunk_rows::{
    JSONL_ROW_LIMITS, RowKind, RowLimits, SQLITE_ROW_LIMITS, expand_jsonl_row, pack,
};

#[derive(Arbitrary, Debug)]
enum Spec {
    Text {
        turn: u8,
        step: u8,
        index: u8,
        text: String,
    },
    Reasoning {
        turn: u8,
        step: u8,
        index: u8,
        text: String,
    },
    ToolCall {
        turn: u8,
        step: u8,
        index: u8,
        id: u8,
        name: Option<u8>,
        args: String,
    },
    Other {
        kind: u8,
    },
    /// A raw event text, for shapes the structured cases do not make.
    Raw(String),
}

#[derive(Arbitrary, Debug)]
struct Step {
    spec: Spec,
    seq_jump: u8,
    time: TimeStep,
}

#[derive(Arbitrary, Debug)]
enum TimeStep {
    Delta(i16),
    Edge(bool),
}

#[derive(Arbitrary, Debug)]
struct Input {
    cap: u16,
    start_seq: u32,
    start_time: i64,
    steps: Vec<Step>,
}

fn event(seq: u64, time: i64, spec: &Spec) -> Option<JsonMap> {
    let chunk = match spec {
        Spec::Text { index, text, .. } => {
            json!({"type": "text-delta", "index": index, "text": text})
        }
        Spec::Reasoning { index, text, .. } => {
            json!({"type": "reasoning-delta", "index": index, "text": text})
        }
        Spec::ToolCall {
            index,
            id,
            name: Some(name),
            args,
            ..
        } => {
            json!({"type": "tool-call-delta", "index": index, "id": format!("c{id}"), "name": format!("n{name}"), "argumentsDelta": args})
        }
        Spec::ToolCall {
            index,
            id,
            name: None,
            args,
            ..
        } => {
            json!({"type": "tool-call-delta", "index": index, "id": format!("c{id}"), "argumentsDelta": args})
        }
        Spec::Other { kind } => {
            let types = [
                "step/start",
                "assistant/message",
                "assistant/chunk",
                "turn/end",
            ];
            let mut map = Map::new();
            map.insert(
                "type".into(),
                types[usize::from(*kind) % types.len()].into(),
            );
            map.insert("seq".into(), seq.into());
            map.insert("time".into(), time.into());
            map.insert("data".into(), json!({"turn": kind}));
            return Some(map);
        }
        Spec::Raw(text) => return serde_json::from_str(text).ok(),
    };
    let (turn, step) = match spec {
        Spec::Text { turn, step, .. }
        | Spec::Reasoning { turn, step, .. }
        | Spec::ToolCall { turn, step, .. } => (*turn, *step),
        _ => unreachable!(),
    };
    let mut map = Map::new();
    map.insert("type".into(), "assistant/chunk".into());
    map.insert("seq".into(), seq.into());
    map.insert("time".into(), time.into());
    map.insert(
        "data".into(),
        json!({"turn": turn, "step": step, "chunk": chunk}),
    );
    Some(map)
}

fn text(events: &[JsonMap]) -> Vec<String> {
    events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect()
}

fn check(events: &[JsonMap], cap: usize, limits: RowLimits, exact: bool) {
    let mut expanded = Vec::new();
    for row in pack(events, cap) {
        let kind = row
            .get("type")
            .and_then(Value::as_str)
            .and_then(RowKind::from_tag);
        match kind {
            Some(kind) if row.contains_key("seq0") => {
                let members = expand_jsonl_row(kind, &row, limits).unwrap_or_else(|why| {
                    panic!("pack made a row its backend refuses: {why}: {row:?}")
                });
                assert!(
                    members.len() <= cap,
                    "a row of {} members under a cap of {cap}",
                    members.len()
                );
                expanded.extend(members);
            }
            _ => expanded.push(row),
        }
    }
    assert_eq!(
        expanded.len(),
        events.len(),
        "expand(pack(events)) has a different length (cap {cap})"
    );
    for (got, want) in expanded.iter().zip(events) {
        let (got, want) = (Value::Object(got.clone()), Value::Object(want.clone()));
        assert!(
            deep_equal(&got, &want),
            "expand(pack(events)) changed an event (cap {cap}): {want} became {got}"
        );
    }
    if exact {
        assert_eq!(
            text(&expanded),
            text(events),
            "expand(pack(events)) differs from events (cap {cap})"
        );
    }
}

fuzz_target!(|input: Input| {
    let mut seq = u64::from(input.start_seq);
    let mut time = input.start_time.clamp(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER);
    let mut events = Vec::new();
    let mut exact = true;
    for step in input.steps.iter().take(2048) {
        seq += u64::from(step.seq_jump == 255);
        time = match step.time {
            TimeStep::Delta(d) => (time + i64::from(d)).clamp(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
            TimeStep::Edge(up) => {
                if up {
                    MAX_SAFE_INTEGER
                } else {
                    -MAX_SAFE_INTEGER
                }
            }
        };
        exact &= !matches!(step.spec, Spec::Raw(_));
        if let Some(e) = event(seq, time, &step.spec) {
            events.push(e);
        }
        seq += 1;
    }
    check(&events, usize::MAX, JSONL_ROW_LIMITS, exact);
    let cap = usize::from(input.cap) % (SQLITE_ROW_LIMITS.max_members - 2) + 3;
    check(&events, cap, SQLITE_ROW_LIMITS, exact);
});
