//! The check of one mounted session's views (header.json, events/,
//! surface.jsonl, transcript.md, index.jsonl) against the views the Harness's
//! own code derived from the same log: one checker for the current fixtures and
//! the legacy ones.

use std::path::Path;

use serde_json::Value;

use super::{event_names, read_json};

/// A JSON value as text, so comparisons see key order too.
pub fn text(value: &Value) -> String {
    serde_json::to_string(value).expect("JSON")
}

/// Checks the mounted session `dir` against `exp`, the Harness's views of it
/// (an `expected/sessions/*.json` file), and that index.jsonl marks exactly the
/// seqs `converted` as converted: the legacy events the Harness converted on
/// read (none in a current log). Returns the failures.
pub fn check_views(dir: &Path, exp: &Value, converted: &[u64]) -> Vec<String> {
    let id = exp["sessionId"].as_str().expect("sessionId");
    let mut failures = Vec::new();
    let mut fail = |m: String| failures.push(format!("{id}: {m}"));
    check_header(dir, exp, &mut fail);
    check_events(dir, exp, &mut fail);
    check_surface(dir, exp, &mut fail);
    check_transcript(dir, exp, &mut fail);
    check_index(dir, exp, converted, &mut fail);
    failures
}

/// header.json: the session header and the folded request header.
fn check_header(dir: &Path, exp: &Value, fail: &mut impl FnMut(String)) {
    let header = read_json(&dir.join("header.json"));
    for (key, want) in exp["header"].as_object().expect("header") {
        if header.get(key) != Some(want) {
            fail(format!(
                "header.json {key} = {:?}, expected {want}",
                header.get(key)
            ));
        }
    }
    for (key, want) in [
        ("request", &exp["requestHeader"]),
        ("requestContext", &exp["requestContext"]),
        ("title", &exp["title"]),
    ] {
        if text(&header[key]) != text(want) {
            fail(format!(
                "header.json {key} differs from the Harness's fold (value or key order)"
            ));
        }
    }
}

/// events/: one file per event, by value and key order, named by seq and type,
/// stat size = bytes read.
fn check_events(dir: &Path, exp: &Value, fail: &mut impl FnMut(String)) {
    let names = event_names(dir);
    let events = exp["events"].as_array().expect("events");
    check_count("events/", "files", names.len(), events.len(), fail);
    for (name, want) in names.iter().zip(events) {
        let path = dir.join("events").join(name);
        let bytes = std::fs::read(&path).expect("event file");
        if std::fs::metadata(&path).expect("stat").len() != bytes.len() as u64 {
            fail(format!(
                "events/{name}: stat size differs from the bytes read"
            ));
        }
        let got: Value = serde_json::from_slice(&bytes).expect("event JSON");
        if text(&got) != text(want) {
            fail(format!(
                "events/{name} differs from the expected event (value or key order)"
            ));
        }
        let seq = want["seq"].as_u64().expect("seq");
        let type_part = want["type"].as_str().expect("type").replace('/', ".");
        if *name != format!("{seq:08}-{type_part}.json") {
            fail(format!("events/{name} is not named by seq and type"));
        }
    }
}

/// surface.jsonl: the derived messages, one a line, by value and key order.
fn check_surface(dir: &Path, exp: &Value, fail: &mut impl FnMut(String)) {
    let surface = std::fs::read_to_string(dir.join("surface.jsonl")).expect("surface.jsonl");
    let messages = exp["messages"].as_array().expect("messages");
    let got: Vec<String> = surface
        .lines()
        .map(|l| text(&serde_json::from_str(l).expect("surface line")))
        .collect();
    if got != messages.iter().map(text).collect::<Vec<_>>() {
        fail(format!(
            "surface.jsonl ({} lines) differs from the Harness's {} messages (value or key order)",
            got.len(),
            messages.len()
        ));
    }
}

/// transcript.md: every append-origin message's text, in order.
fn check_transcript(dir: &Path, exp: &Value, fail: &mut impl FnMut(String)) {
    let transcript =
        alnum(&std::fs::read_to_string(dir.join("transcript.md")).expect("transcript.md"));
    let mut at = 0;
    for entry in exp["transcript"].as_array().expect("transcript") {
        let mut found = Vec::new();
        texts(&entry["message"], &mut found);
        for text in found {
            // transcript.md drops ANSI escape sequences (issue #18).
            let text = sessionfs::render::markdown::strip_ansi(&text);
            let snippet: String = alnum(&text).chars().take(40).collect();
            if snippet.len() < 8 {
                continue;
            }
            match transcript[at..].find(&snippet) {
                Some(offset) => at += offset,
                None => fail(format!(
                    "transcript.md lacks, in order, the text of seq {}",
                    entry["seq"]
                )),
            }
        }
    }
}

fn check_count(view: &str, items: &str, got: usize, want: usize, fail: &mut impl FnMut(String)) {
    if got != want {
        fail(format!("{view} has {got} {items}, expected {want}"));
    }
}

fn texts(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("text" | "arguments", Value::String(s)) => out.push(s.clone()),
                    _ => texts(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| texts(v, out)),
        _ => {}
    }
}

fn alnum(text: &str) -> String {
    text.chars().filter(char::is_ascii_alphanumeric).collect()
}

/// index.jsonl: one row per event with the Harness's classification, the seqs
/// each replacement cites, and exactly the converted seqs marked.
fn check_index(dir: &Path, exp: &Value, converted: &[u64], fail: &mut impl FnMut(String)) {
    let index = std::fs::read_to_string(dir.join("index.jsonl")).expect("index.jsonl");
    let rows: Vec<Value> = index
        .lines()
        .map(|l| serde_json::from_str(l).expect("index line"))
        .collect();
    let records = exp["query"]["records"].as_array().expect("records");
    check_count("index.jsonl", "rows", rows.len(), records.len(), fail);
    for (row, want) in rows.iter().zip(records) {
        if row["seq"] != want["seq"]
            || row["type"] != want["type"]
            || row["standing"] != want["surface"]
        {
            fail(format!(
                "index.jsonl row {} is {row}, the Harness classifies {want}",
                want["seq"]
            ));
        }
    }
    // Replacements cite their sources, so a summary leads back to the originals.
    let events = exp["events"].as_array().expect("events");
    for seq in exp["replacementSeqs"].as_array().expect("replacementSeqs") {
        let seq = seq.as_u64().expect("seq") as usize;
        let cited = rows.get(seq).and_then(|r| r.get("cites"));
        let logged = events[seq].get("sourceEventSeqs");
        if cited != logged {
            fail(format!(
                "index.jsonl row {seq} cites {cited:?}, the log says {logged:?}"
            ));
        }
    }
    let marked: Vec<u64> = rows
        .iter()
        .filter(|r| r.get("converted") == Some(&Value::Bool(true)))
        .map(|r| r["seq"].as_u64().expect("seq"))
        .collect();
    if marked != converted {
        fail(format!(
            "index.jsonl marks seqs {marked:?} converted, the Harness converted {converted:?}"
        ));
    }
}
