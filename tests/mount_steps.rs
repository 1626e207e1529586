//! `steps/` through a real mount: for every public fixture session, the calls
//! listed in call order, each call's messages, request header and context equal
//! the Harness's own answer (`tests/fixtures/steps/expected/`), and `stat`
//! sizes equal the bytes read.

mod common;

use std::path::Path;

use common::harness::append_lines;
use common::{Mount, read_json, session_dir, store_copy};
use serde_json::Value;
use sessionfs::json::deep_equal;

fn assert_same(what: &str, got: &Value, want: &Value) {
    assert!(deep_equal(got, want), "{what}:\n got  {got}\n want {want}");
}

fn read_exact(path: &Path) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let size = std::fs::metadata(path).expect("stat").len();
    assert_eq!(size, bytes.len() as u64, "{}: stat size", path.display());
    bytes
}

#[test]
fn every_fixture_sessions_steps_match_the_harness() {
    let copy = store_copy("jsonl-zstd");
    let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
    let expected_dir = common::fixtures().join("steps/expected");
    let manifest = read_json(&expected_dir.join("manifest.json"));
    let files = manifest["sessionFiles"].as_object().expect("sessionFiles");
    assert_eq!(files.len(), 15);
    for (id, file) in files {
        let expected = read_json(&expected_dir.join(file.as_str().unwrap()));
        let steps_dir = session_dir(mount.path(), id).join("steps");
        let mut names: Vec<String> = std::fs::read_dir(&steps_dir)
            .unwrap_or_else(|e| panic!("{id}: {e}"))
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        let listed = names.clone();
        names.sort();
        assert_eq!(listed, names, "{id}: steps/ lists calls in name order");
        let steps = expected["steps"].as_array().expect("steps");
        assert_eq!(names.len(), steps.len(), "{id}: one call per step");
        for (name, want) in names.iter().zip(steps) {
            let what = format!("{id} steps/{name}");
            let call = steps_dir.join(name);
            let mut files: Vec<String> = std::fs::read_dir(&call)
                .expect("call dir")
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            files.sort();
            assert_eq!(files, ["messages.jsonl", "request.json"], "{what}");
            let messages: Vec<Value> = String::from_utf8(read_exact(&call.join("messages.jsonl")))
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).expect("JSON line"))
                .collect();
            assert_same(
                &format!("{what} messages"),
                &messages.into(),
                &want["messages"],
            );
            let request: Value =
                serde_json::from_slice(&read_exact(&call.join("request.json"))).unwrap();
            assert_same(
                &format!("{what} request"),
                &request["request"],
                &want["requestHeader"],
            );
            for field in ["requestContext", "turn", "step", "boundarySeq", "inherited"] {
                assert_same(&format!("{what} {field}"), &request[field], &want[field]);
            }
            assert_eq!(request["call"], 1, "{what}");
            let prefix = format!(
                "{:08}-t{}.s{}",
                want["boundarySeq"].as_u64().unwrap(),
                want["turn"],
                want["step"]
            );
            assert_eq!(name, &prefix, "{what}: name");
        }
    }
}

#[test]
fn a_missing_call_or_file_is_not_found() {
    let copy = store_copy("jsonl-zstd");
    let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
    let steps = session_dir(mount.path(), "ledger-chat").join("steps");
    for missing in [
        steps.join("00000006-t1.s1"),
        steps.join("00000005-t1.s2"),
        steps.join("00000005-t1.s1").join("other.json"),
    ] {
        let err = std::fs::metadata(&missing).expect_err("absent");
        assert_eq!(
            err.raw_os_error(),
            Some(libc::ENOENT),
            "{}",
            missing.display()
        );
    }
    assert!(steps.join("00000005-t1.s1/request.json").exists());
}

fn list(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("steps")
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn within(what: &str, mut check: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !check() {
        assert!(
            start.elapsed().as_secs() < 2,
            "{what} did not happen within 2 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
}

/// A growing log: a call appears once its first chunk is logged, and no name
/// already listed changes as the log grows.
#[test]
fn calls_appear_as_the_log_grows_and_names_never_change() {
    let copy = store_copy("jsonl");
    let log = copy
        .path
        .join("--Users-mei-code-ledger-api--/ledger-chat/session.jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=60"]);
    let steps = session_dir(mount.path(), "ledger-chat").join("steps");
    let before = list(&steps);
    assert_eq!(before.len(), 4);
    let t = 1_790_000_000_000i64;
    let needle = "steps live needle 51c2";
    append_lines(
        &log,
        &[
            serde_json::json!({"type": "turn/start", "seq": 322, "time": t, "data": {"turn": 5}}),
            serde_json::json!({"type": "step/start", "seq": 323, "time": t + 1, "data": {"turn": 5, "step": 1}}),
            serde_json::json!({"type": "user/message", "seq": 324, "time": t + 2, "data": {"content": [{"type": "text", "text": needle}], "source": {"kind": "user"}, "role": "user", "id": "u-live"}, "surfaceOp": "append"}),
        ],
    );
    within("the new events", || {
        std::fs::read_dir(session_dir(mount.path(), "ledger-chat").join("events"))
            .is_ok_and(|d| d.count() == 325)
    });
    assert_eq!(list(&steps), before, "no call before its first response");
    append_lines(
        &log,
        &[
            serde_json::json!({"type": "assistant/chunk", "seq": 325, "time": t + 3, "data": {"turn": 5, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "ok"}}}),
        ],
    );
    let call = "00000324-t5.s1";
    within("the new call in steps/", || list(&steps).len() == 5);
    let now = list(&steps);
    assert_eq!(&now[..4], &before[..], "listed names never change");
    assert_eq!(now[4], call);
    let messages = std::fs::read_to_string(steps.join(call).join("messages.jsonl")).unwrap();
    assert!(messages.lines().last().unwrap().contains(needle));
    let request = read_json(&steps.join(call).join("request.json"));
    assert_eq!(request["finish"], Value::Null);
    append_lines(
        &log,
        &[
            serde_json::json!({"type": "assistant/chunk", "seq": 326, "time": t + 4, "data": {"turn": 5, "step": 1, "chunk": {"type": "finish", "reason": {"kind": "stop"}}}}),
            serde_json::json!({"type": "step/end", "seq": 327, "time": t + 5, "data": {"turn": 5, "step": 1}}),
        ],
    );
    within("the call's finish in request.json", || {
        read_json(&steps.join(call).join("request.json"))["finish"] == "stop"
    });
    assert_eq!(list(&steps), now, "names stay as the log grows");
}
