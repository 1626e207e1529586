//! `steps/` through a real mount: for every public fixture session, the calls
//! listed in call order, each call's messages, request header and context equal
//! the Harness's own answer (`tests/fixtures/steps/expected/`), and `stat`
//! sizes equal the bytes read.

mod common;

use std::path::Path;

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
