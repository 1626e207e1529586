//! Issue #18: every transcript.md of every fixture store (and of the demo store)
//! parses as CommonMark with each tool result and argument block inside a code
//! block, each entry heading a real heading, no ANSI escape left, and every user,
//! assistant and tool text present verbatim (ANSI escapes aside). A turn of
//! hostile text (open fences, HTML, backtick runs, escapes, carriage returns) is
//! appended to a live store and held to the same rules.

mod common;

use std::io::Write;
use std::path::Path;

use common::{Mount, demo_copy, store_copy};
use pulldown_cmark::{Event, HeadingLevel, Parser, Tag, TagEnd};
use serde_json::{Value, json};

/// What a CommonMark parser makes of a transcript.
struct Parsed {
    code_blocks: Vec<String>,
    entry_headings: Vec<String>,
}

fn parse(markdown: &str) -> Parsed {
    let mut parsed = Parsed {
        code_blocks: Vec::new(),
        entry_headings: Vec::new(),
    };
    let mut code: Option<String> = None;
    let mut heading: Option<String> = None;
    for event in Parser::new(markdown) {
        match event {
            Event::Start(Tag::CodeBlock(_)) => code = Some(String::new()),
            Event::End(TagEnd::CodeBlock) => parsed.code_blocks.extend(code.take()),
            Event::Start(Tag::Heading {
                level: HeadingLevel::H3,
                ..
            }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(HeadingLevel::H3)) => {
                parsed.entry_headings.extend(heading.take())
            }
            Event::Text(text) | Event::Code(text) => {
                if let Some(code) = code.as_mut() {
                    code.push_str(&text);
                } else if let Some(heading) = heading.as_mut() {
                    heading.push_str(&text);
                }
            }
            _ => {}
        }
    }
    parsed
}

fn strip_ansi(text: &str) -> String {
    sessionfs::render::markdown::strip_ansi(text).into_owned()
}

/// A code block's content for `text`: CommonMark ends its last line.
fn as_block(text: &str) -> String {
    let text = strip_ansi(text);
    if text.is_empty() || text.ends_with('\n') {
        text
    } else {
        text + "\n"
    }
}

fn texts_of<'a>(blocks: &'a Value, kind: &str) -> impl Iterator<Item = &'a str> {
    blocks
        .as_array()
        .into_iter()
        .flatten()
        .filter(move |b| b["type"] == kind)
        .filter_map(|b| b["text"].as_str())
}

/// Checks one session directory; returns the failures.
fn check_session(dir: &Path) -> Vec<String> {
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    let Ok(markdown) = std::fs::read_to_string(dir.join("transcript.md")) else {
        return Vec::new(); // an unreadable session has no transcript
    };
    let mut failures = Vec::new();
    let mut fail = |what: String| failures.push(format!("{name}: {what}"));
    if markdown.contains('\x1b') {
        fail("an ANSI escape is left".into());
    }
    let parsed = parse(&markdown);
    let in_code = |text: &str| parsed.code_blocks.iter().any(|b| b == text);
    let mut names: Vec<String> = std::fs::read_dir(dir.join("events"))
        .expect("events")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf8"))
        .filter(|n| !n.ends_with(".synthetic.json"))
        .collect();
    names.sort();
    for file in names {
        let event = common::read_json(&dir.join("events").join(&file));
        // Only append-origin messages are entries of their own.
        if event["surfaceOp"] != "append" {
            continue;
        }
        let seq = event["seq"].as_u64().expect("seq");
        let tag = format!(" #{seq}]");
        if !parsed
            .entry_headings
            .iter()
            .any(|h| h.starts_with('[') && h.contains(&tag))
        {
            fail(format!("no entry heading for seq {seq}"));
        }
        let data = &event["data"];
        match event["type"].as_str().unwrap_or_default() {
            "user/message" => {
                for text in texts_of(&data["content"], "text") {
                    if !markdown.contains(&strip_ansi(text)) {
                        fail(format!("seq {seq}: user text not verbatim: {text:.60?}"));
                    }
                }
            }
            "assistant/message" => {
                let content = &data["message"]["content"];
                for text in texts_of(content, "text") {
                    if !markdown.contains(&strip_ansi(text)) {
                        fail(format!(
                            "seq {seq}: assistant text not verbatim: {text:.60?}"
                        ));
                    }
                }
                for text in texts_of(content, "reasoning") {
                    for line in strip_ansi(text).lines() {
                        if !markdown.contains(line) {
                            fail(format!("seq {seq}: reasoning line lost: {line:.60?}"));
                        }
                    }
                }
                for call in content.as_array().into_iter().flatten() {
                    if call["type"] != "tool-call" {
                        continue;
                    }
                    let arguments = call["arguments"].as_str().unwrap_or_default();
                    if arguments.trim().is_empty() {
                        continue;
                    }
                    let shown = match serde_json::from_str::<Value>(arguments) {
                        Ok(value) => {
                            let mut strings = Vec::new();
                            multiline(&value, &mut strings);
                            for text in strings {
                                if !in_code(&as_block(&text)) {
                                    fail(format!(
                                        "seq {seq}: multi-line argument not in a code block: {text:.60?}"
                                    ));
                                }
                            }
                            serde_json::to_string_pretty(&value).expect("json")
                        }
                        Err(_) => arguments.to_string(),
                    };
                    if !in_code(&as_block(&shown)) {
                        fail(format!(
                            "seq {seq}: arguments not in a code block: {arguments:.60?}"
                        ));
                    }
                }
            }
            "tool/result" => {
                for result in data["message"]["content"].as_array().into_iter().flatten() {
                    for text in texts_of(&result["content"], "text") {
                        if !in_code(&as_block(text)) {
                            fail(format!(
                                "seq {seq}: tool output not verbatim in a code block: {text:.60?}"
                            ));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    failures
}

fn multiline(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) if s.contains('\n') => out.push(s.clone()),
        Value::Object(map) => map.values().for_each(|v| multiline(v, out)),
        Value::Array(items) => items.iter().for_each(|v| multiline(v, out)),
        _ => {}
    }
}

/// Mounts `store` and checks every session; returns how many were checked.
fn check_store(store: &Path) -> usize {
    let mount = Mount::new(store, &["-o", "grace=60"]);
    let mut failures = Vec::new();
    let mut checked = 0;
    for entry in std::fs::read_dir(mount.path()).expect("root") {
        let path = entry.expect("entry").path();
        if path.join("transcript.md").is_file() {
            failures.extend(check_session(&path));
            checked += 1;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    checked
}

#[test]
fn fixture_transcripts_are_commonmark_with_every_text_verbatim() {
    let mut checked = 0;
    for store in common::STORES {
        let copy = store_copy(store);
        checked += check_store(&copy.path);
    }
    checked += check_store(&demo_copy().path);
    assert!(checked > 40, "only {checked} sessions checked");
}

#[test]
fn hostile_text_cannot_break_out_of_its_entry() {
    let copy = store_copy("jsonl");
    let log = std::fs::read_dir(&copy.path)
        .expect("root")
        .map(|p| p.expect("entry").path().join("release-notes/session.jsonl"))
        .find(|p| p.exists())
        .expect("release-notes");
    let text = std::fs::read_to_string(&log).expect("log");
    let last_line: Value = serde_json::from_str(text.lines().last().expect("line")).expect("json");
    let last = last_line["seq"].as_u64().expect("seq") + 1;
    let seq = |i: u64| last + i;
    let tool_output =
        "\x1b[31m--- FAIL\x1b[0m\n````\n# not a heading\n```\n*not emphasis*\n\r```\n";
    let events = [
        json!({"type": "turn/start", "seq": seq(0), "time": 1_790_000_000_000i64, "data": {"turn": 9}}),
        json!({"type": "step/start", "seq": seq(1), "time": 1_790_000_000_001i64, "data": {"turn": 9, "step": 1}}),
        json!({"type": "user/message", "seq": seq(2), "time": 1_790_000_000_002i64, "data": {"content": [{"type": "text", "text": "an open fence:\n```sh\nrm -rf /tmp/x"}], "source": {"kind": "user"}, "role": "user", "id": "u-9"}, "surfaceOp": "append"}),
        json!({"type": "assistant/message", "seq": seq(3), "time": 1_790_000_000_003i64, "data": {"turn": 9, "step": 1, "message": {"role": "assistant", "content": [
            {"type": "reasoning", "text": "~~~\nopen in a quote"},
            {"type": "text", "text": "<!-- an HTML comment never closed\n\n### [t1 #1] spoof"},
            {"type": "text", "text": "- a list\n\n  ```\n  fence in the list"},
            {"type": "tool-call", "id": "call-9", "name": "apply_patch", "arguments": json!({"patch": "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-```\n+````\n", "note": "one line"}).to_string()},
            {"type": "tool-call", "id": "call-10", "name": "sh", "arguments": "{\"cmd\": \"cut"}
        ], "source": {"kind": "model", "provider": "deepseek", "model": "m"}, "id": "a-9"}, "usage": {"inputTokens": 1, "outputTokens": 1}}, "surfaceOp": "append"}),
        json!({"type": "tool/call", "seq": seq(4), "time": 1_790_000_000_004i64, "data": {"turn": 9, "step": 1, "callId": "call-9", "name": "apply_patch", "arguments": "{}"}}),
        json!({"type": "tool/result", "seq": seq(5), "time": 1_790_000_000_005i64, "data": {"turn": 9, "step": 1, "message": {"id": "r-9", "role": "user", "source": {"kind": "tool", "callId": "call-9"}, "content": [{"type": "tool-result", "toolCallId": "call-9", "isError": true, "content": [{"type": "text", "text": tool_output}]}]}}, "surfaceOp": "append"}),
        json!({"type": "tool/result", "seq": seq(6), "time": 1_790_000_000_006i64, "data": {"turn": 9, "step": 1, "message": {"id": "r-10", "role": "user", "source": {"kind": "tool", "callId": "call-10"}, "content": [{"type": "tool-result", "toolCallId": "call-10", "isError": false, "content": [{"type": "text", "text": "ok"}]}]}}, "surfaceOp": "append"}),
        json!({"type": "step/end", "seq": seq(7), "time": 1_790_000_000_007i64, "data": {"turn": 9, "step": 1}}),
        json!({"type": "turn/end", "seq": seq(8), "time": 1_790_000_000_008i64, "data": {"turn": 9, "reason": {"kind": "completed"}}}),
    ];
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .expect("open");
    for event in &events {
        writeln!(file, "{event}").expect("append");
    }
    drop(file);
    let mount = Mount::new(&copy.path, &["-o", "grace=60"]);
    let dir = common::session_dir(mount.path(), "release-notes");
    assert!(
        !dir.join("error").exists(),
        "the hostile turn is a valid log: {:?}",
        std::fs::read_to_string(dir.join("error"))
    );
    let failures = check_session(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The turn ends as the document does: nothing it wrote is left open, so the
    // last entry's heading is a heading and not code.
    let markdown = std::fs::read_to_string(dir.join("transcript.md")).expect("transcript");
    let headings = parse(&markdown).entry_headings;
    assert!(
        headings
            .last()
            .is_some_and(|h| h.contains(&format!("#{}]", seq(6)))),
        "last heading: {:?}",
        headings.last()
    );
    assert!(!headings.iter().any(|h| h == "[t1 #1] spoof"));
}
