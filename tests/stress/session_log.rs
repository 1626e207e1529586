//! The Harness's side of a zstd store: sessions grow by appended frames, one
//! per durable batch, and a turn may be left open between two batches.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::harness::{append_durably, log_batch};
use crate::common::{read_json, session_dir};

/// Appends one durable batch to a zstd session log, as the Harness does.
pub fn append_frame(store: &Path, id: &str, events: &[Value]) {
    let path = artifact(store, id);
    append_durably(&path, &log_batch(events, true));
}

fn artifact(store: &Path, id: &str) -> PathBuf {
    let segment = sessionfs::model::ids::encode_segment(id).expect("id");
    for project in std::fs::read_dir(store).expect("root") {
        let candidate = project
            .expect("entry")
            .path()
            .join(&segment)
            .join("session.jsonl.zstd");
        if candidate.exists() {
            return candidate;
        }
    }
    panic!("no artifact for {id}");
}

/// Where a written session stands: the next seq and turn, and what was appended.
pub struct Tail {
    pub id: &'static str,
    pub next_seq: u64,
    pub next_turn: u64,
    /// The text of every user message appended, to find in transcript.md.
    pub needles: Vec<String>,
}

/// Where a session that ends with a closed turn stands, as the mount shows it.
pub fn tail_of(mount: &Path, id: &'static str) -> Tail {
    let dir = session_dir(mount, id);
    let mut names: Vec<String> = std::fs::read_dir(dir.join("events"))
        .expect("events")
        .map(|e| e.expect("e").file_name().into_string().expect("u"))
        .collect();
    names.sort();
    let last_start = names
        .iter()
        .rev()
        .find(|n| n.ends_with("-turn.start.json"))
        .expect("a turn");
    let turn = read_json(&dir.join("events").join(last_start))["data"]["turn"]
        .as_u64()
        .expect("turn");
    assert!(
        names.last().expect("events").ends_with("-turn.end.json"),
        "{id} ends with a closed turn"
    );
    Tail {
        id,
        next_seq: names.len() as u64,
        next_turn: turn + 1,
        needles: Vec::new(),
    }
}

/// One turn as the Harness logs it, in one batch or two (the turn is open between them).
pub fn write_turn(store: &Path, tail: &mut Tail, n: u64, split: bool) {
    let s = tail.next_seq;
    let turn = tail.next_turn;
    let time = 1_790_000_000_000i64 + (n as i64) * 1000;
    let needle = format!("stress needle {} {n}", tail.id);
    let title = if n.is_multiple_of(2) {
        format!("t{n}")
    } else {
        format!("a considerably longer session title that shrinks again later, number {n}")
    };
    let first = vec![
        json!({"type": "turn/start", "seq": s, "time": time, "data": {"turn": turn}}),
        json!({"type": "step/start", "seq": s + 1, "time": time + 1, "data": {"turn": turn, "step": 1}}),
        json!({"type": "user/message", "seq": s + 2, "time": time + 2, "data": {"content": [{"type": "text", "text": needle}], "source": {"kind": "user"}, "role": "user", "id": format!("u-{}-{n}", tail.id)}, "surfaceOp": "append"}),
    ];
    let second = vec![
        json!({"type": "step/end", "seq": s + 3, "time": time + 3, "data": {"turn": turn, "step": 1}}),
        json!({"type": "turn/end", "seq": s + 4, "time": time + 4, "data": {"turn": turn, "reason": {"kind": "completed"}}}),
        json!({"type": "session/title", "seq": s + 5, "time": time + 5, "data": {"title": title, "messageSeqs": [s + 2], "source": {"kind": "user"}}}),
    ];
    if split {
        append_frame(store, tail.id, &first);
        std::thread::sleep(Duration::from_millis(30));
        append_frame(store, tail.id, &second);
    } else {
        let all: Vec<Value> = first.into_iter().chain(second).collect();
        append_frame(store, tail.id, &all);
    }
    tail.next_seq += 6;
    tail.next_turn += 1;
    tail.needles.push(needle);
}

/// Appends a `session/title` event to a quiet session.
pub fn retitle(store: &Path, tail: &mut Tail, title: &str) {
    let event = json!({"type": "session/title", "seq": tail.next_seq, "time": 1_790_000_000_000i64 + tail.next_seq as i64, "data": {"title": title, "messageSeqs": [], "source": {"kind": "user"}}});
    append_frame(store, tail.id, &[event]);
    tail.next_seq += 1;
}
