//! Property test of the session model: for random valid logs with random
//! compactions and prunes, the derived surface equals a naive reference fold,
//! the transcript never loses an append-origin message, and index.jsonl
//! classifies every seq exactly once, as the reference does.

mod common;

use common::Rng;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use sessionfs::model::header::SessionHeader;
use sessionfs::store::SessionKey;
use sessionfs::store::memory::MemoryStore;
use sessionfs::view::{FileId, SessionSource, SessionView};

/// The log under construction, with a naive reference fold beside it.
struct Log {
    events: Vec<Value>,
    /// Reference surface: (seq, message or None for empty assistant content).
    surface: Vec<(u64, Option<Value>)>,
    shadowed_by: Vec<Option<u64>>,
    tool_results: Vec<u64>,
    user_texts: Vec<String>,
}

impl Log {
    fn push(&mut self, mut event: Value) -> u64 {
        let seq = self.events.len() as u64;
        event["seq"] = seq.into();
        event["time"] = (1_800_000_000_000i64 + seq as i64).into();
        self.events.push(event);
        self.shadowed_by.push(None);
        seq
    }

    fn append_message(&mut self, event: Value, message: Option<Value>) -> u64 {
        let seq = self.push(event);
        self.surface.push((seq, message));
        seq
    }

    /// Replaces surface positions i..=j by `event`, as the Harness fold does.
    fn replace(
        &mut self,
        i: usize,
        j: usize,
        mut event: Value,
        message: Option<Value>,
        extra_sources: &[u64],
    ) {
        let shadowed: Vec<u64> = self.surface[i..=j].iter().map(|(s, _)| *s).collect();
        let mut sources = extra_sources.to_vec();
        sources.extend(&shadowed);
        event["sourceEventSeqs"] = json!(sources);
        event["surfaceOp"] =
            json!({"op": "replace", "start": shadowed[0], "end": shadowed[shadowed.len() - 1]});
        let seq = self.push(event);
        for s in &shadowed {
            self.shadowed_by[*s as usize] = Some(seq);
        }
        self.surface.splice(i..=j, [(seq, message)]);
    }
}

fn user_message(id: String, text: &str, plugin: bool) -> Value {
    let source = if plugin {
        json!({"kind": "plugin", "plugin": "compact", "compactionId": "c"})
    } else {
        json!({"kind": "user"})
    };
    json!({"content": [{"type": "text", "text": text}], "source": source, "role": "user", "id": id})
}

fn generate(seed: u64) -> Log {
    let mut rng = Rng(seed);
    let mut log = Log {
        events: Vec::new(),
        surface: Vec::new(),
        shadowed_by: Vec::new(),
        tool_results: Vec::new(),
        user_texts: Vec::new(),
    };
    let turns = 2 + rng.below(6);
    for turn in 1..=turns {
        log.push(json!({"type": "turn/start", "data": {"turn": turn}}));
        log.push(json!({"type": "step/start", "data": {"turn": turn, "step": 1}}));
        let text = format!("userword{seed}x{turn}");
        log.user_texts.push(text.clone());
        let message = user_message(format!("u{turn}"), &text, false);
        let mut event = json!({"type": "user/message", "data": message.clone()});
        event["surfaceOp"] = json!("append");
        log.append_message(event, Some(message));
        let steps = 1 + rng.below(3);
        for step in 1..=steps {
            if step > 1 {
                log.push(json!({"type": "step/start", "data": {"turn": turn, "step": step}}));
            }
            let first_chunk = log.events.len() as u64;
            let chunks = rng.below(5);
            for k in 0..chunks {
                log.push(json!({"type": "assistant/chunk", "data": {"turn": turn, "step": step, "chunk": {"type": "text-delta", "index": 0, "text": format!("d{k}")}}}));
            }
            let call = rng.below(2) == 0;
            let empty = !call && rng.below(6) == 0;
            let mut content = Vec::new();
            if !empty {
                content
                    .push(json!({"type": "text", "text": format!("answer{seed}x{turn}x{step}")}));
            }
            let call_id = format!("call-{turn}-{step}");
            if call {
                content.push(json!({"type": "tool-call", "id": call_id, "name": "sh", "arguments": "{\"cmd\":\"ls\"}"}));
            }
            let message = json!({"role": "assistant", "content": content, "source": {"kind": "model", "provider": "p", "model": "m"}, "id": format!("a{turn}{step}")});
            let sources: Vec<u64> = (first_chunk..first_chunk + chunks).collect();
            let derived = if empty { None } else { Some(message.clone()) };
            log.append_message(json!({"type": "assistant/message", "data": {"turn": turn, "step": step, "message": message}, "sourceEventSeqs": sources, "surfaceOp": "append"}), derived);
            if call {
                let call_seq = log.push(json!({"type": "tool/call", "data": {"turn": turn, "step": step, "callId": call_id, "name": "sh", "arguments": "{}"}}));
                let message = json!({"source": {"kind": "tool", "callId": call_id}, "content": [{"type": "tool-result", "toolCallId": call_id, "content": [{"type": "text", "text": format!("output{seed}x{turn}x{step} long long")}], "isError": false}], "role": "user", "id": format!("t{turn}{step}")});
                let seq = log.append_message(json!({"type": "tool/result", "data": {"turn": turn, "step": step, "message": message.clone()}, "sourceEventSeqs": [call_seq], "surfaceOp": "append"}), Some(message));
                log.tool_results.push(seq);
            }
            log.push(json!({"type": "step/end", "data": {"turn": turn, "step": step}}));
        }
        log.push(
            json!({"type": "turn/end", "data": {"turn": turn, "reason": {"kind": "completed"}}}),
        );
        // Between turns: sometimes a compaction over a random range, sometimes a prune.
        match rng.below(3) {
            0 if log.surface.len() >= 2 => {
                let i = rng.below(log.surface.len() as u64) as usize;
                let j = i + rng.below((log.surface.len() - i) as u64) as usize;
                let start = log.push(json!({"type": "compaction/start", "data": {"compactionId": "c", "turn": null}}));
                let summary = log.push(json!({"type": "compaction/summary", "data": {"compactionId": "c", "summary": [{"type": "text", "text": format!("summary{seed}x{turn}")}]}}));
                let message = user_message(
                    format!("s{turn}"),
                    &format!("checkpoint{seed}x{turn}"),
                    true,
                );
                log.replace(
                    i,
                    j,
                    json!({"type": "user/message", "data": message.clone()}),
                    Some(message),
                    &[start, summary],
                );
                log.push(
                    json!({"type": "compaction/end", "data": {"compactionId": "c", "turn": null}}),
                );
            }
            1 => {
                let current: Vec<usize> = log
                    .surface
                    .iter()
                    .enumerate()
                    .filter(|(_, (s, _))| log.tool_results.contains(s))
                    .map(|(i, _)| i)
                    .collect();
                if let Some(&position) =
                    current.get(rng.below(current.len().max(1) as u64) as usize)
                {
                    let original = log.events[log.surface[position].0 as usize].clone();
                    log.push(json!({"type": "compaction/prune", "data": {}}));
                    let mut data = original["data"].clone();
                    data["message"]["content"][0]["content"] =
                        json!([{"type": "text", "text": "pruned"}]);
                    let message = data["message"].clone();
                    let seq = log.events.len() as u64;
                    log.replace(
                        position,
                        position,
                        json!({"type": "tool/result", "data": data}),
                        Some(message),
                        &[],
                    );
                    log.tool_results.push(seq);
                }
            }
            _ => {}
        }
    }
    log
}

fn header(id: &str) -> SessionHeader {
    SessionHeader::new(id, 1)
}

#[test]
fn derived_views_equal_a_naive_reference_fold() {
    for seed in 0..300u64 {
        let log = generate(seed);
        let store = MemoryStore::default();
        let id = format!("prop-{seed}");
        let events: Vec<_> = log
            .events
            .iter()
            .map(|e| e.as_object().expect("object").clone())
            .collect();
        store.insert(header(&id), events);
        let source = SessionSource::new(Arc::new(store), SessionKey::Row(id.clone()));
        let mut view = SessionView::open(source, &id, None, Duration::ZERO, None, None);
        assert!(
            view.file(FileId::Error).is_none(),
            "seed {seed}: {:?}",
            view.file(FileId::Error)
                .map(|e| String::from_utf8(e.unwrap().bytes.to_vec()))
        );
        let mut file = |which| view.file(which).expect("a readable session has it");

        let surface = file(FileId::Surface).expect("surface");
        let got: Vec<Value> = std::str::from_utf8(&surface.bytes.to_vec())
            .expect("utf8")
            .lines()
            .map(|l| serde_json::from_str(l).expect("line"))
            .collect();
        let want: Vec<Value> = log.surface.iter().filter_map(|(_, m)| m.clone()).collect();
        assert_eq!(got, want, "seed {seed}: surface");

        let transcript = file(FileId::Transcript).expect("transcript");
        let transcript = String::from_utf8(transcript.bytes.to_vec()).expect("utf8");
        let mut at = 0;
        for text in &log.user_texts {
            let found = transcript[at..]
                .find(text.as_str())
                .unwrap_or_else(|| panic!("seed {seed}: transcript lost {text}"));
            at += found;
        }

        let index = file(FileId::Index).expect("index");
        let rows: Vec<Value> = std::str::from_utf8(&index.bytes.to_vec())
            .expect("utf8")
            .lines()
            .map(|l| serde_json::from_str(l).expect("row"))
            .collect();
        assert_eq!(
            rows.len(),
            log.events.len(),
            "seed {seed}: one row per event"
        );
        let current: Vec<u64> = log.surface.iter().map(|(s, _)| *s).collect();
        for (seq, row) in rows.iter().enumerate() {
            assert_eq!(
                row["seq"], seq as u64,
                "seed {seed}: rows in seq order, each once"
            );
            let want = if current.contains(&(seq as u64)) {
                "current"
            } else if log.shadowed_by[seq].is_some() {
                "shadowed"
            } else {
                "log-only"
            };
            assert_eq!(row["standing"], want, "seed {seed}: seq {seq}");
            if let Some(by) = log.shadowed_by[seq] {
                assert_eq!(row["shadowedBy"], by, "seed {seed}: seq {seq} shadowed by");
            }
        }
    }
}
