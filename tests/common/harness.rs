//! Writes made the way the Harness makes them: JSONL lines, one zstd frame per
//! batch, one SQLite transaction per batch, each durable when the call returns.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// A session's directory in a JSONL store (`<store>/<project>/<id>/`).
pub fn session_home(store: &Path, id: &str) -> PathBuf {
    for project in std::fs::read_dir(store).expect("store root") {
        let candidate = project.expect("entry").path().join(id);
        if candidate.is_dir() {
            return candidate;
        }
    }
    panic!("no session {id} in {}", store.display());
}

/// The bytes a batch of events takes in a JSONL log, or in a zstd JSONL log
/// (one frame per batch).
pub fn log_batch(events: &[Value], zstd: bool) -> Vec<u8> {
    let mut plaintext = Vec::new();
    for event in events {
        plaintext.extend(serde_json::to_vec(event).expect("json"));
        plaintext.push(b'\n');
    }
    if zstd {
        sessionfs::store::zstd_frames::encode_frame(&plaintext).expect("frame")
    } else {
        plaintext
    }
}

/// Appends bytes to a log and fsyncs it.
pub fn append_durably(log: &Path, bytes: &[u8]) {
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(log)
        .expect("open log");
    file.write_all(bytes).expect("append");
    file.sync_all().expect("fsync");
}

/// Appends a batch of events to a JSONL log as lines.
pub fn append_lines(log: &Path, events: &[Value]) {
    append_durably(log, &log_batch(events, false));
}

/// Appends a batch of events to a session's `session.jsonl` as lines.
pub fn append_jsonl(store: &Path, id: &str, events: &[Value]) {
    append_lines(&session_home(store, id).join("session.jsonl"), events);
}

/// Commits a batch of events as the Harness's write-behind does: one
/// IMMEDIATE transaction that inserts them and bumps the session's revision.
pub fn commit_batch(db: &mut rusqlite::Connection, id: &str, events: &[Value]) {
    let tx = db
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .expect("begin");
    for event in events {
        let sources = event.get("sourceEventSeqs").map(|s| {
            let seqs: Vec<u64> = s
                .as_array()
                .expect("array")
                .iter()
                .map(|v| v.as_u64().expect("seq"))
                .collect();
            sessionfs::store::sqlite::encode_source_seqs(&seqs)
        });
        tx.execute(
            "INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, surface_op, ignorable) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL)",
            rusqlite::params![
                id,
                event["seq"].as_i64(),
                event["type"].as_str(),
                event["time"].as_i64(),
                serde_json::to_string(&event["data"]).expect("data"),
                sources,
                event.get("surfaceOp").map(|op| serde_json::to_string(op).expect("op")),
            ],
        )
        .expect("insert");
    }
    tx.execute(
        "UPDATE sessions SET revision = revision + 1 WHERE id = ?1",
        [id],
    )
    .expect("revision");
    tx.commit().expect("commit");
}
