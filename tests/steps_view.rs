//! `steps/` without FUSE: for every public fixture session, in every store
//! format, each model call's messages, request header and context equal the
//! Harness's own answer in `tests/fixtures/steps/expected/`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sessionfs::json::deep_equal;
use sessionfs::store::{self, Backend, Catalog, Listing};
use sessionfs::view::{CallFile, FileId, Refused, SessionSource, SessionView};

/// Opens a listed session as the filesystem does.
fn open(backend: &Arc<dyn Backend>, listing: &Listing, grace: Duration) -> SessionView {
    let source = SessionSource::new(backend.clone(), listing.key.clone());
    let refused = listing.header.as_ref().err().cloned().map(Refused::Header);
    SessionView::open(source, &listing.id, refused, grace, None, None)
}

/// The bytes of one file of model call `index`.
fn call_file(view: &mut SessionView, index: usize, file: CallFile) -> Vec<u8> {
    let which = FileId::Call(index as u32, file);
    let content = view.file(which).expect("the call has the file");
    content.expect("the call file renders").bytes.to_vec()
}

fn expected_steps(id: &str) -> Option<Value> {
    let dir = common::fixtures().join("steps/expected");
    let manifest = common::read_json(&dir.join("manifest.json"));
    let file = manifest["sessionFiles"][id].as_str()?;
    Some(common::read_json(&dir.join(file)))
}

/// The expected calls of a session: each step's first call, then its retries.
fn expected_calls(expected: &Value) -> Vec<Value> {
    let mut calls = Vec::new();
    for step in expected["steps"].as_array().expect("steps") {
        let mut first = step.clone();
        first["call"] = 1.into();
        calls.push(first);
        if let Some(retries) = step["retries"].as_array() {
            for (k, retry) in retries.iter().enumerate() {
                let mut retry = retry.clone();
                retry["call"] = (k + 2).into();
                calls.push(retry);
            }
        }
    }
    calls
}

fn assert_same(what: &str, got: &Value, want: &Value) {
    assert!(deep_equal(got, want), "{what}:\n got  {got}\n want {want}");
}

/// Checks every session of a store that has expected steps, but for those the
/// format refuses, which must have none; returns how many were checked.
fn check_store(backend: &Arc<dyn Backend>, refused: &[&str]) -> usize {
    let mut checked = 0;
    for listing in backend.list() {
        let Some(expected) = expected_steps(&listing.id) else {
            continue;
        };
        let mut view = open(backend, &listing, Duration::from_secs(3600));
        if refused.contains(&listing.id.as_str()) {
            assert!(view.indexed().is_none(), "{} is refused", listing.id);
            continue;
        }
        let id = view.id.clone();
        let why = view
            .file(FileId::Error)
            .map(|t| String::from_utf8_lossy(&t.unwrap().bytes.to_vec()).into_owned());
        let Some(indexed) = view.indexed() else {
            panic!("{id} is unreadable: {why:?}");
        };
        let want = expected_calls(&expected);
        assert_eq!(indexed.call_count(), want.len(), "{id}: number of calls");
        let mut names = Vec::new();
        for (index, want) in want.iter().enumerate() {
            let indexed = view.indexed().expect("indexed");
            let name = indexed.call_name(index).unwrap();
            assert_eq!(indexed.call_by_name(&name), Some(index), "{id} {name}");
            let what = format!("{id} {name}");
            let messages = call_file(&mut view, index, CallFile::Messages);
            let messages: Vec<Value> = String::from_utf8(messages)
                .unwrap()
                .lines()
                .map(|line| serde_json::from_str(line).expect("a JSON line"))
                .collect();
            assert_same(
                &format!("{what} messages"),
                &Value::from(messages),
                &want["messages"],
            );
            let request = call_file(&mut view, index, CallFile::Request);
            let request: Value = serde_json::from_slice(&request).expect("request JSON");
            for (field, expected_field) in [
                ("turn", "turn"),
                ("step", "step"),
                ("call", "call"),
                ("boundarySeq", "boundarySeq"),
                ("responseLogged", "responseLogged"),
                ("firstResponseSeq", "firstResponseSeq"),
                ("responseKind", "responseKind"),
                ("finish", "finish"),
                ("stepStartSeq", "stepStartSeq"),
                ("inherited", "inherited"),
                ("requestHeaderSeq", "requestHeaderSeq"),
                ("request", "requestHeader"),
                ("requestContextSeq", "requestContextSeq"),
                ("requestContext", "requestContext"),
            ] {
                assert_same(
                    &format!("{what} request.json {field}"),
                    &request[field],
                    &want[expected_field],
                );
            }
            names.push(name);
        }
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "{id}: names sort in call order");
        checked += 1;
    }
    checked
}

#[test]
fn every_fixture_call_matches_the_harness_in_every_store_format() {
    // Schema 14 cannot store the ignorable marker, so it refuses metrics-ignorable
    // (as tests/mount_fixtures.rs checks): a refused session has no steps.
    for (format, refused) in [
        ("jsonl-zstd", &[][..]),
        ("jsonl", &[]),
        ("sqlite14", &["metrics-ignorable"]),
        ("sqlite17", &[]),
    ] {
        // A copy: opening an SQLite store adds -wal and -shm files beside it.
        let copy = common::store_copy(format);
        let backend = store::open(&copy.path).expect("store opens");
        let checked = check_store(&Arc::from(backend), refused);
        assert_eq!(checked, 15 - refused.len(), "{format}: sessions checked");
    }
}

/// A log that ends inside a step before any response: once quiet, the step's
/// call is shown with the whole log as its prefix and no response logged; while
/// the log may still grow, it is not listed (its boundary would move).
#[test]
fn a_quiet_log_ending_before_a_response_shows_an_unanswered_call() {
    let events: Vec<sessionfs::json::JsonMap> = [
        r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#,
        r#"{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1}}"#,
        r#"{"type":"user/message","seq":2,"time":3,"data":{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]},"surfaceOp":"append"}"#,
        r#"{"type":"request/header","seq":3,"time":4,"data":{"header":{"config":{"provider":"p","model":"m"}},"reason":"initial"}}"#,
    ]
    .iter()
    .map(|line| serde_json::from_str(line).unwrap())
    .collect();
    let store = sessionfs::store::memory::MemoryStore::default();
    store.insert(
        sessionfs::model::header::SessionHeader::new("cut", 1),
        events,
    );
    let listing = store.list().remove(0);
    let store: Arc<dyn Backend> = Arc::new(store);

    let growing = open(&store, &listing, Duration::from_secs(3600));
    assert_eq!(growing.indexed().unwrap().call_count(), 0);

    let mut quiet = open(&store, &listing, Duration::ZERO);
    let indexed = quiet.indexed().unwrap();
    assert_eq!(indexed.call_count(), 1);
    let name = indexed.call_name(0).unwrap();
    assert_eq!(name, "00000003-t1.s1");
    assert_eq!(indexed.call_by_name(&name), Some(0));
    let request = call_file(&mut quiet, 0, CallFile::Request);
    let request: Value = serde_json::from_slice(&request).unwrap();
    assert_eq!(request["responseLogged"], false);
    assert_eq!(request["boundarySeq"], 3);
    assert_eq!(request["firstResponseSeq"], Value::Null);
    assert!(request["note"].as_str().unwrap().contains("cannot tell"));
    assert_eq!(request["request"]["config"]["model"], "m");
    let messages = call_file(&mut quiet, 0, CallFile::Messages);
    assert_eq!(String::from_utf8_lossy(&messages).lines().count(), 1);
}
