//! Mounted tests over the Harness's legacy fixtures (spec §15): logs written in
//! older event shapes read as the Harness reads them, converted, in every
//! backend; malformed legacy shapes and old compaction types are refused with
//! the Harness's reasons; a fork of a legacy session writes converted events.

mod common;

use std::path::{Path, PathBuf};

use common::views::{check_views, text};
use common::{Mount, StoreCopy, TempDir, copy_tree, event_names, read_json, session_dir, snapshot};
use serde_json::Value;
use sessionfs::json::JsonMap;
use sessionfs::model::quick::Scanned;
use sessionfs::store::{Backend, Writer};

fn legacy() -> PathBuf {
    common::fixtures().join("legacy")
}

fn expected(relative: &str) -> Value {
    read_json(&legacy().join("expected").join(relative))
}

fn legacy_store(encoding: &str) -> StoreCopy {
    let dir = TempDir::new("legacy");
    let path = dir.path().join("store");
    copy_tree(&legacy().join("stores").join(encoding), &path);
    StoreCopy { dir, path }
}

/// The manifest's readable sessions, each with its expected views.
fn readable() -> Vec<(Value, Value)> {
    expected("manifest.json")["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| (s.clone(), expected(s["file"].as_str().expect("file"))))
        .collect()
}

/// Each refused session shows its header and the Harness's reason, and no view.
fn check_refused(mount: &Path) {
    let refused = expected("refused.json");
    let refused = refused.as_object().expect("refused");
    assert_eq!(refused.len(), 4);
    for (id, why) in refused {
        let dir = session_dir(mount, id);
        let error = std::fs::read_to_string(dir.join("error"))
            .unwrap_or_else(|e| panic!("{id}: error file: {e}"));
        let message = why["message"].as_str().expect("message");
        let sentence = why["cause"]["message"].as_str().expect("cause");
        assert!(
            error.starts_with(message),
            "{id}: {error:?}, the Harness says {message:?}"
        );
        assert!(
            error.contains(sentence),
            "{id}: {error:?} lacks {sentence:?}"
        );
        assert!(dir.join("header.json").exists(), "{id}: header.json");
        for derived in ["surface.jsonl", "transcript.md", "index.jsonl", "events"] {
            let err = std::fs::metadata(dir.join(derived)).expect_err("no derived views");
            assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{id}/{derived}");
        }
    }
}

fn check_store(store: &Path) {
    let mount = Mount::new(store, &["-o", "grace=0"]);
    let mut failures = Vec::new();
    let sessions = readable();
    assert_eq!(sessions.len(), 7);
    for (session, exp) in &sessions {
        let id = session["id"].as_str().expect("id");
        let converted: Vec<u64> = session["conversions"]
            .as_array()
            .expect("conversions")
            .iter()
            .map(|c| c["seq"].as_u64().expect("seq"))
            .collect();
        failures.extend(check_views(&session_dir(mount.path(), id), exp, &converted));
    }
    check_refused(mount.path());
    drop(mount);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn check_jsonl_store(encoding: &str) {
    let copy = legacy_store(encoding);
    let before = snapshot(copy.dir.path());
    check_store(&copy.path);
    assert_eq!(
        before,
        snapshot(copy.dir.path()),
        "reading converted nothing in the store"
    );
}

#[test]
fn raw_legacy_logs_read_as_the_harness_reads_them() {
    check_jsonl_store("jsonl");
}

#[test]
fn zstd_legacy_logs_read_as_the_harness_reads_them() {
    check_jsonl_store("jsonl-zstd");
}

/// Every stored event of every session in a store, unconverted, with its header.
fn stored_sessions(
    store: &dyn Backend,
) -> Vec<(sessionfs::model::header::SessionHeader, Vec<JsonMap>)> {
    store
        .list()
        .into_iter()
        .map(|listing| {
            let mut events = Vec::new();
            let mut sink = |loc, scanned: Scanned| {
                events.push((loc, scanned));
                Ok(())
            };
            store
                .scan(&listing.key, &Default::default(), &mut sink)
                .expect("the raw log scans");
            let events = events
                .into_iter()
                .map(|(loc, scanned)| match scanned {
                    Scanned::Event(event) => event,
                    Scanned::Chunk { .. } => store.fetch(&listing.key, loc).expect("fetch"),
                })
                .collect();
            (listing.header.expect("header"), events)
        })
        .collect()
}

/// The same legacy logs, stored as they are in an SQLite database, read the same.
#[test]
fn legacy_logs_in_sqlite_read_as_the_harness_reads_them() {
    let raw = legacy_store("jsonl");
    let jsonl = sessionfs::store::jsonl::JsonlStore::open(&raw.path).expect("legacy store");
    let db = common::store_copy("sqlite17");
    let sqlite = sessionfs::store::sqlite::SqliteStore::open(&db.path).expect("database");
    let sessions = stored_sessions(&jsonl);
    assert_eq!(sessions.len(), 11);
    for (header, events) in &sessions {
        sqlite.create(header, events).expect("stored as is");
    }
    drop(sqlite);
    check_store(&db.path);
}

/// A fork of a legacy session writes the converted events, as the Harness's fork
/// of a loaded session would, and the child reads back as current events.
#[test]
fn a_fork_of_a_legacy_session_holds_converted_events() {
    let copy = legacy_store("jsonl-zstd");
    let (session, exp) = readable()
        .into_iter()
        .find(|(s, _)| s["id"] == "heron-report-profile")
        .expect("session");
    let events = exp["events"].as_array().expect("events");
    // The last turn end of the legacy prefix (the current Harness resumed at 126).
    let boundary = events
        .iter()
        .filter(|e| e["type"] == "turn/end" && e["seq"].as_u64() < Some(126))
        .filter_map(|e| e["seq"].as_u64())
        .max()
        .expect("a legacy turn end") as usize;
    {
        let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
        let parent = session_dir(mount.path(), session["id"].as_str().expect("id"));
        std::fs::write(parent.join("fork"), format!("{boundary} legacy-branch\n")).expect("fork");
        std::fs::write(mount.path().join("flush"), b"\n").expect("flush");
    }
    // A fresh mount reads the child from the store.
    let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
    let child = session_dir(mount.path(), "legacy-branch");
    assert!(!child.join("error").exists(), "the child reads back");
    let names = event_names(&child);
    assert_eq!(
        names.len(),
        boundary + 2,
        "the seed and one end-seed marker"
    );
    for (name, want) in names.iter().zip(&events[..=boundary]) {
        let got = read_json(&child.join("events").join(name));
        assert_eq!(
            text(&got),
            text(want),
            "child {name} is the converted parent event"
        );
    }
    let index = std::fs::read_to_string(child.join("index.jsonl")).expect("index");
    assert!(
        !index.contains("\"converted\""),
        "the child is stored converted"
    );
    // The child's surface: the converted messages of its current events, among
    // them the legacy replacement 58 with the id of the result it replaced, 26.
    let current: Vec<usize> = index
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("index line"))
        .filter(|row| row["standing"] == "current")
        .map(|row| row["seq"].as_u64().expect("seq") as usize)
        .collect();
    assert!(current.contains(&58), "{current:?}");
    let mut wanted: Vec<String> = current
        .iter()
        .map(|&seq| match events[seq]["type"].as_str() {
            Some("user/message") => text(&events[seq]["data"]),
            _ => text(&events[seq]["data"]["message"]),
        })
        .collect();
    let surface = std::fs::read_to_string(child.join("surface.jsonl")).expect("surface");
    let mut got: Vec<String> = surface
        .lines()
        .map(|l| text(&serde_json::from_str(l).expect("line")))
        .collect();
    // The surface is in node order (a replacement takes its target's place).
    got.sort();
    wanted.sort();
    assert_eq!(
        got, wanted,
        "the child's surface holds the converted messages"
    );
    assert_eq!(
        events[58]["data"]["message"]["id"],
        "legacy-message:heron-report-profile:26"
    );
}

/// Old compaction types were renamed, not converted: the Harness refuses such a
/// log as written in a format it does not know, and so does sessionfs.
#[test]
fn old_compaction_types_are_refused_as_unsupported() {
    let copy = legacy_store("jsonl");
    let dir = copy
        .path
        .join("--home-tomas-code-heron--")
        .join("heron-old-compaction");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let log = [
        r#"{"type":"session","version":0,"id":"heron-old-compaction","createdAt":1783519200000,"cwd":"/home/tomas/code/heron","delegationDepth":0}"#,
        r#"{"type":"turn/start","seq":0,"time":1783519200001,"data":{"turn":1,"trigger":{"kind":"message"}}}"#,
        r#"{"type":"user/message","seq":1,"time":1783519200002,"data":{"content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}"#,
        r#"{"type":"compact/start","seq":2,"time":1783519200003,"data":{"turn":1}}"#,
    ];
    std::fs::write(dir.join("session.jsonl"), log.join("\n") + "\n").expect("write");
    let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
    let session = session_dir(mount.path(), "heron-old-compaction");
    let error = std::fs::read_to_string(session.join("error")).expect("error file");
    let reason = "session \"heron-old-compaction\" contains event type \"compact/start\" (seq 2) unknown to this harness and not marked ignorable; refusing to interpret the log \u{2014} it was likely written by a newer harness";
    assert!(error.starts_with(reason), "{error}");
    assert!(error.contains("open it with a newer harness"), "{error}");
    // The other sessions of the store stay readable.
    assert!(
        session_dir(mount.path(), "heron-csv-import")
            .join("surface.jsonl")
            .exists()
    );
}
