//! `-o repair`: a quiet crashed session's repair is made durable exactly as the
//! Harness's own load() makes it (the fixtures record the bytes it wrote), and a
//! second repairing mount changes nothing.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Mount, expected, read_json, session_dir, snapshot, store_copy};
use serde_json::Value;

fn cases(store: &str) -> Vec<Value> {
    let mut out: Vec<Value> =
        std::fs::read_dir(common::fixtures().join("expected/crash").join(store))
            .expect("cases")
            .map(|e| read_json(&e.expect("entry").path()))
            .filter(|case| case["inspect"]["eventCount"].is_u64())
            .collect();
    out.sort_by_key(|c| c["case"]["id"].as_str().unwrap_or_default().to_string());
    out
}

fn wait_for_change(
    copy: &Path,
    before: &std::collections::BTreeMap<std::path::PathBuf, Vec<u8>>,
    file: &str,
) {
    let start = Instant::now();
    loop {
        let now = snapshot(copy);
        let changed = now
            .iter()
            .any(|(p, b)| p.to_string_lossy().contains(file) && before.get(p) != Some(b));
        if changed {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{file} was not repaired"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn repaired_events(store_path: &Path, id: &str) -> Vec<Value> {
    let mount = Mount::new(store_path, &["-o", "grace=3600"]);
    let dir = session_dir(mount.path(), id);
    let mut names: Vec<String> = std::fs::read_dir(dir.join("events"))
        .expect("events")
        .map(|e| e.expect("e").file_name().into_string().expect("u"))
        .collect();
    names.sort();
    assert!(
        names.iter().all(|n| !n.contains("synthetic")),
        "{id}: after a durable repair every event is logged"
    );
    names
        .iter()
        .map(|n| read_json(&dir.join("events").join(n)))
        .collect()
}

fn jsonl_repair(store: &str) {
    for case in cases(store) {
        let id = case["case"]["id"].as_str().expect("id");
        let copy = store_copy(&format!("crash/{store}"));
        let before = snapshot(copy.dir.path());
        let (path, original) = before
            .iter()
            .find(|(p, _)| p.to_string_lossy().contains(&format!("/{id}/")))
            .map(|(p, b)| (p.clone(), b.clone()))
            .expect("artifact");
        {
            let mount = Mount::new(&copy.path, &["-o", "repair,grace=0"]);
            assert!(session_dir(mount.path(), id).join("events").exists());
            wait_for_change(copy.dir.path(), &before, id);
        }
        let repaired = std::fs::read(copy.dir.path().join(&path)).expect("read");
        let diff = &case["load"]["artifactDiff"];
        let keep = diff["truncatedTo"]
            .as_u64()
            .or(diff["sizeBefore"].as_u64())
            .expect("size") as usize;
        assert_eq!(
            &repaired[..keep],
            &original[..keep],
            "{id}: bytes before the cut are never rewritten"
        );
        if let Some(text) = diff["appendedText"].as_str() {
            assert_eq!(
                std::str::from_utf8(&repaired[keep..]).expect("utf8"),
                text,
                "{id}: appended exactly what the Harness appends"
            );
        } else {
            let frames = diff["appendedFrames"].as_array().expect("frames");
            assert_eq!(frames.len(), 1, "{id}: one frame");
            let plaintext = sessionfs::store::zstd_frames::decode_frame(&repaired[keep..])
                .expect("a complete checksummed frame");
            assert_eq!(
                std::str::from_utf8(&plaintext).expect("utf8"),
                frames[0]["plaintext"].as_str().expect("plaintext"),
                "{id}: frame content"
            );
        }
        let events = repaired_events(&copy.path, id);
        assert_eq!(
            &events,
            case["views"]["events"].as_array().expect("inspect events"),
            "{id}: the repaired log is what inspect showed"
        );
        // A second repairing mount leaves the now balanced log alone.
        let settled = snapshot(copy.dir.path());
        {
            let mount = Mount::new(&copy.path, &["-o", "repair,grace=0"]);
            assert!(session_dir(mount.path(), id).join("events").exists());
            std::thread::sleep(Duration::from_millis(1200));
        }
        assert_eq!(
            settled,
            snapshot(copy.dir.path()),
            "{id}: the repair is stable"
        );
    }
}

#[test]
fn jsonl_repair_matches_the_harness_load() {
    jsonl_repair("jsonl");
}

#[test]
fn zstd_repair_matches_the_harness_load() {
    jsonl_repair("jsonl-zstd");
}

fn sqlite_repair(store: &str) {
    for case in cases(store) {
        let id = case["case"]["id"].as_str().expect("id");
        let copy = store_copy(&format!("crash/{store}"));
        let revision = |path: &Path| -> i64 {
            let db = rusqlite::Connection::open_with_flags(
                path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )
            .expect("db");
            db.query_row("SELECT revision FROM sessions WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .expect("revision")
        };
        let before = revision(&copy.path);
        {
            let mount = Mount::new(&copy.path, &["-o", "repair,grace=0"]);
            assert!(session_dir(mount.path(), id).join("events").exists());
            let start = Instant::now();
            while revision(&copy.path) == before {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "{id}: not repaired"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let after = case["load"]["artifactDiff"]["sessionRowRevision"]["after"]
            .as_i64()
            .expect("revision after");
        assert_eq!(
            revision(&copy.path),
            after,
            "{id}: one revision per repair, as the Harness"
        );
        let events = repaired_events(&copy.path, id);
        assert_eq!(
            &events,
            case["views"]["events"].as_array().expect("inspect events"),
            "{id}: the repaired log"
        );
    }
}

#[test]
fn sqlite17_repair_matches_the_harness_load() {
    sqlite_repair("sqlite17");
}

#[test]
fn sqlite14_repair_matches_the_harness_load() {
    sqlite_repair("sqlite14");
}

#[test]
fn without_repair_the_store_is_never_written() {
    let copy = store_copy("crash/jsonl");
    let before = snapshot(copy.dir.path());
    {
        let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
        for entry in std::fs::read_dir(mount.path()).expect("root") {
            let _ = std::fs::read_dir(entry.expect("e").path().join("events")).map(|d| d.count());
        }
        std::thread::sleep(Duration::from_millis(1200));
    }
    assert_eq!(before, snapshot(copy.dir.path()));
    let _ = expected("manifest.json");
}
