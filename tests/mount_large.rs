//! A session large enough to take the fast paths: streamed chunks read quickly
//! (alone and packed) and a zstd log decompressed on a second thread. Its tree
//! must be byte-identical whether it is stored as raw JSONL, as zstd (one frame
//! per batch, as the Harness writes), or as zstd cut off inside its last frame,
//! which is then shown with the recovered events and read again later.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use common::{Mount, TempDir, session_dir};
use serde_json::{Value, json};
use sessionfs::json::JsonMap;
use sessionfs::model::chunk_rows::{JSONL_ROW_LIMITS, RowKind, expand_jsonl_row};
use sessionfs::model::header::SessionHeader;
use sessionfs::store::Writer;
use sessionfs::store::sqlite::SqliteStore;
use sessionfs::store::zstd_frames::encode_frame;

const ID: &str = "large-session";

/// A log of `turns` turns: a user message, a reasoning and a text block streamed
/// as lone chunks and packed rows, an assistant message, a tool call and result.
fn log(turns: u64) -> Vec<Value> {
    let mut events = Vec::new();
    let mut time = 1_772_000_000_000i64;
    let mut push = |events: &mut Vec<Value>, mut event: Value| {
        let seq = events.len() as u64;
        time += 7;
        let key = if event.get("seq0").is_some() {
            "seq0"
        } else {
            "seq"
        };
        event[key] = seq.into();
        event[if key == "seq0" { "time0" } else { "time" }] = time.into();
        let members = ["/data/texts", "/data/args"]
            .iter()
            .find_map(|p| event.pointer(p).and_then(Value::as_array))
            .map_or(1, Vec::len);
        events.push(event);
        // A packed row stands for several seqs.
        for _ in 1..members {
            events.push(Value::Null);
        }
    };
    for turn in 1..=turns {
        let ev = |t: &str, data: Value| json!({"type": t, "seq": 0, "time": 0, "data": data});
        push(&mut events, ev("turn/start", json!({"turn": turn})));
        push(
            &mut events,
            ev("step/start", json!({"turn": turn, "step": 1})),
        );
        let mut user = ev(
            "user/message",
            json!({"content": [{"type": "text", "text": format!("question {turn}: why is the sky blue\non line two")}], "source": {"kind": "user"}, "role": "user", "id": format!("u-{turn}")}),
        );
        user["surfaceOp"] = "append".into();
        push(&mut events, user);
        let first_chunk = events.len();
        let chunk = |c: Value| {
            ev(
                "assistant/chunk",
                json!({"turn": turn, "step": 1, "chunk": c}),
            )
        };
        push(
            &mut events,
            chunk(json!({"type": "block-start", "index": 0, "blockType": "reasoning"})),
        );
        push(
            &mut events,
            chunk(json!({"type": "reasoning-delta", "index": 0, "text": "Rayleigh"})),
        );
        let words: Vec<String> = (0..40).map(|w| format!(" w{turn}x{w}")).collect();
        push(
            &mut events,
            json!({"type": "reasoning-chunks", "seq0": 0, "time0": 0, "data": {"turn": turn, "step": 1, "index": 0, "dt": vec![3; 39], "texts": words}}),
        );
        push(
            &mut events,
            chunk(json!({"type": "block-start", "index": 1, "blockType": "text"})),
        );
        push(
            &mut events,
            json!({"type": "text-chunks", "seq0": 0, "time0": 0, "data": {"turn": turn, "step": 1, "index": 1, "dt": [1, -1, 2], "texts": ["Short", " waves", " scatter", " more."]}}),
        );
        let call = format!("call-{turn}");
        push(
            &mut events,
            json!({"type": "tool-call-chunks", "seq0": 0, "time0": 0, "data": {"turn": turn, "step": 1, "index": 2, "dt": [2, 2], "id": call, "name": "sh", "args": ["{\"cmd\"", ":\"ls", "\"}"]}}),
        );
        let sources: Vec<u64> = (first_chunk as u64..events.len() as u64).collect();
        let mut message = ev(
            "assistant/message",
            json!({"turn": turn, "step": 1, "message": {"role": "assistant", "content": [{"type": "reasoning", "text": "Rayleigh"}, {"type": "text", "text": "Short waves scatter more."}, {"type": "tool-call", "id": call, "name": "sh", "arguments": "{\"cmd\":\"ls\"}"}], "source": {"kind": "model", "provider": "acme", "model": "m1"}, "id": format!("a-{turn}")}}),
        );
        message["sourceEventSeqs"] = json!(sources);
        message["surfaceOp"] = "append".into();
        push(&mut events, message);
        let call_seq = events.len() as u64;
        push(
            &mut events,
            ev(
                "tool/call",
                json!({"turn": turn, "step": 1, "callId": call, "name": "sh", "arguments": "{\"cmd\":\"ls\"}"}),
            ),
        );
        let mut result = ev(
            "tool/result",
            json!({"turn": turn, "step": 1, "message": {"source": {"kind": "tool", "callId": call}, "content": [{"type": "tool-result", "toolCallId": call, "content": [{"type": "text", "text": format!("out {turn}")}], "isError": false}], "role": "user", "id": format!("t-{turn}")}}),
        );
        result["sourceEventSeqs"] = json!([call_seq]);
        result["surfaceOp"] = "append".into();
        push(&mut events, result);
        push(
            &mut events,
            ev("step/end", json!({"turn": turn, "step": 1})),
        );
        push(
            &mut events,
            ev(
                "turn/end",
                json!({"turn": turn, "reason": {"kind": "completed"}}),
            ),
        );
    }
    events.retain(|e| !e.is_null());
    events
}

/// The session's views, its event names, and every 101st event file: reading
/// all of a hundred thousand files through FUSE would take minutes.
fn tree(mount: &Path) -> BTreeMap<String, Vec<u8>> {
    let dir = session_dir(mount, ID);
    let mut out = BTreeMap::new();
    for name in [
        "header.json",
        "surface.jsonl",
        "transcript.md",
        "index.jsonl",
        "error",
    ] {
        if let Ok(bytes) = fs::read(dir.join(name)) {
            out.insert(name.to_string(), bytes);
        }
    }
    let mut names: Vec<String> = fs::read_dir(dir.join("events"))
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    for name in names.iter().step_by(101) {
        out.insert(
            name.clone(),
            fs::read(dir.join("events").join(name)).unwrap(),
        );
    }
    out.insert("events/".into(), names.join("\n").into_bytes());
    out
}

fn write_stores(root: &Path, records: &[Value]) -> (std::path::PathBuf, std::path::PathBuf) {
    let header = format!(
        "{}\n",
        json!({"type": "session", "version": 0, "id": ID, "createdAt": 1_772_000_000_000i64, "cwd": "/w", "delegationDepth": 0})
    );
    let lines: Vec<String> = records.iter().map(|r| format!("{r}\n")).collect();
    let raw = root.join("raw");
    let dir = raw.join("--w--").join(ID);
    fs::create_dir_all(&dir).unwrap();
    fs::write(
        dir.join("session.jsonl"),
        format!("{header}{}", lines.concat()),
    )
    .unwrap();
    let zstd = root.join("zstd");
    let dir = zstd.join("--w--").join(ID);
    fs::create_dir_all(&dir).unwrap();
    let mut artifact = encode_frame(header.as_bytes()).unwrap();
    // One frame per write-behind batch of a few records.
    for batch in lines.chunks(3) {
        artifact.extend(encode_frame(batch.concat().as_bytes()).unwrap());
    }
    fs::write(dir.join("session.jsonl.zstd"), artifact).unwrap();
    (raw, zstd)
}

/// The logical events of the records (packed rows expanded).
fn logical_events(records: &[Value]) -> Vec<JsonMap> {
    records
        .iter()
        .flat_map(|record| {
            let map = record.as_object().unwrap().clone();
            match map["type"].as_str().and_then(RowKind::from_tag) {
                Some(kind) => expand_jsonl_row(kind, &map, JSONL_ROW_LIMITS).unwrap(),
                None => vec![map],
            }
        })
        .collect()
}

/// A copy of the schema-17 fixture database with the session added to it,
/// written as sessionfs writes fork children (rows packed as the Harness packs).
fn write_sqlite(root: &Path, records: &[Value]) -> std::path::PathBuf {
    let db = root.join("sqlite").join("sessions.db");
    fs::create_dir_all(db.parent().unwrap()).unwrap();
    fs::copy(common::fixtures().join("stores/sqlite17/sessions.db"), &db).unwrap();
    let header = SessionHeader {
        cwd: Some("/w".into()),
        ..SessionHeader::new(ID, 1_772_000_000_000)
    };
    SqliteStore::open(&db)
        .unwrap()
        .create(&header, &logical_events(records))
        .unwrap();
    db
}

#[test]
fn a_large_session_reads_the_same_from_sqlite_as_from_raw_jsonl() {
    let records = log(600);
    let temp = TempDir::new("large-sqlite");
    let (raw, _) = write_stores(temp.path(), &records);
    let db = write_sqlite(temp.path(), &records);
    let raw_mount = Mount::new(&raw, &[]);
    let sqlite_mount = Mount::new(&db, &[]);
    let raw_tree = tree(raw_mount.path());
    let sqlite_tree = tree(sqlite_mount.path());
    assert!(!raw_tree.contains_key("error") && !sqlite_tree.contains_key("error"));
    let events = raw_tree["events/"].split(|b| *b == b'\n').count();
    assert!(events > 30_000, "{events} events, several batches of rows");
    for (name, bytes) in &raw_tree {
        if name == "header.json" {
            continue;
        }
        assert!(sqlite_tree.get(name) == Some(bytes), "{name} differs");
    }
}

#[test]
fn a_large_session_reads_the_same_from_raw_and_zstd_and_while_torn() {
    let records = log(2000);
    let temp = TempDir::new("large");
    let (raw, zstd) = write_stores(temp.path(), &records);
    let artifact = zstd.join("--w--").join(ID).join("session.jsonl.zstd");
    assert!(
        fs::metadata(&artifact).unwrap().len() > 1 << 20,
        "large enough to be decompressed ahead"
    );
    let raw_mount = Mount::new(&raw, &[]);
    let zstd_mount = Mount::new(&zstd, &["-o", "grace=0"]);
    let raw_tree = tree(raw_mount.path());
    if let Some(error) = raw_tree.get("error") {
        panic!("{}", String::from_utf8_lossy(error));
    }
    let zstd_tree = tree(zstd_mount.path());
    let events = raw_tree["events/"].split(|b| *b == b'\n').count();
    assert!(events > 100_000, "{events} event files");
    assert!(raw_tree == zstd_tree, "raw and zstd trees differ");
    let transcript = String::from_utf8(raw_tree["transcript.md"].clone()).unwrap();
    assert!(transcript.contains("question 2000: why is the sky blue"));
    let dir = session_dir(zstd_mount.path(), ID);
    let chunk = common::read_json(&dir.join("events/00000044-assistant.chunk.json"));
    assert_eq!(chunk["data"]["chunk"]["text"], " w1x39");
    assert_eq!(chunk["seq"], 44);
    drop(zstd_mount);

    // A raw log cut inside its last line shows every whole line, as before.
    drop(raw_mount);
    let raw_log = raw.join("--w--").join(ID).join("session.jsonl");
    let mut cut = fs::read(&raw_log).unwrap();
    cut.extend_from_slice(br#"{"type":"turn/start","seq":"#);
    fs::write(&raw_log, &cut).unwrap();
    let cut_mount = Mount::new(&raw, &[]);
    assert!(
        tree(cut_mount.path()) == raw_tree,
        "a cut last line hides no whole line"
    );
    drop(cut_mount);

    // Cut the artifact inside its last frame: the session shows what was whole.
    let whole = fs::read(&artifact).unwrap();
    fs::write(&artifact, &whole[..whole.len() - 5]).unwrap();
    let torn_mount = Mount::new(&zstd, &["-o", "grace=0"]);
    let surface = fs::read(session_dir(torn_mount.path(), ID).join("surface.jsonl")).unwrap();
    assert!(surface.len() > 1000);
    let listed = fs::read_dir(session_dir(torn_mount.path(), ID).join("events"))
        .unwrap()
        .count();
    assert!(!tree(torn_mount.path()).contains_key("error"));
    assert!(
        listed + 3 >= events && listed < events + 3,
        "{listed} vs {events}"
    );
    // Writing the frame whole again makes the session whole again.
    fs::write(&artifact, &whole).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if tree(torn_mount.path()) == raw_tree {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the mended log is not shown whole"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
