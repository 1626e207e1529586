//! Crash repair (spec §8.1): the synthetic closers that balance a log whose last
//! turn is still open. A pure function of the stored events, kept as a small
//! running scan so it can follow a growing log.

use serde_json::{Map, Value, json};

use crate::json::{JsonMap, non_negative_safe_integer, safe_integer};

/// The result text of a closer for a call whose `tool/call` was logged: it may have run,
/// so a retry needs care.
pub const TOOL_OUTCOME_UNKNOWN_TEXT: &str = "The tool call was interrupted after it was recorded, but no result was durably recorded. Its outcome is unknown. Decide whether to retry from the tool semantics: retry only if the operation is read-only or idempotent; if it may have side effects, first verify external state or ask the user. Do not retry blindly.";
/// The result text of a closer for a call the model asked for that was never logged as
/// started.
pub const TOOL_NOT_STARTED_TEXT: &str = "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed.";

/// One tool call of the open step without a result.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ToolCall {
    /// The id the model gave the call (its `tool-call` block's `id`).
    pub call_id: String,
    /// The tool's name, as the model asked for it.
    pub name: String,
    /// When its `tool/call` was logged (it is running since), if it was.
    pub started: Option<i64>,
    /// The step that asked for it, and the seq of its `tool/call`.
    step: Value,
    call_seq: Option<u64>,
}

/// The scan state of `interruptedTurnClosers`, which also tells what the
/// session is doing now (turns run, the open turn and step, the calls they
/// wait on) for `status`: one scan, so the two never disagree.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct TurnScan {
    turns: u64,
    /// The open turn's `data.turn`, when the log ends inside a turn.
    open_turn: Option<Value>,
    open_step: Option<Value>,
    /// Insertion-ordered, like a JS `Map`: re-inserting keeps the original place.
    pending: Vec<ToolCall>,
    /// The last event's seq and time.
    last: Option<(u64, i64)>,
}

impl TurnScan {
    /// Follows the next stored event, legacy shapes already converted.
    pub fn observe(&mut self, event: &JsonMap) {
        let seq = event
            .get("seq")
            .and_then(non_negative_safe_integer)
            .unwrap_or(0);
        let time = event.get("time").and_then(safe_integer).unwrap_or(0);
        self.last = Some((seq, time));
        let data = event.get("data").unwrap_or(&Value::Null);
        match event.get("type").and_then(Value::as_str).unwrap_or("") {
            "turn/start" => {
                self.turns += 1;
                self.open_turn = Some(data.get("turn").cloned().unwrap_or(Value::Null));
                self.open_step = None;
                self.pending.clear();
            }
            "turn/end" => {
                self.open_turn = None;
                self.open_step = None;
                self.pending.clear();
            }
            // Calls are dropped at a step's end, not its start.
            "step/start" => self.open_step = Some(data.get("step").cloned().unwrap_or(Value::Null)),
            "step/end" => {
                self.pending.clear();
                self.open_step = None;
            }
            "assistant/message" => {
                let step = data.get("step").cloned().unwrap_or(Value::Null);
                let blocks = data.pointer("/message/content").and_then(Value::as_array);
                for block in blocks.into_iter().flatten() {
                    if block.get("type").and_then(Value::as_str) != Some("tool-call") {
                        continue;
                    }
                    let Some(id) = block.get("id").and_then(Value::as_str) else {
                        continue;
                    };
                    let name = block.get("name").and_then(Value::as_str).unwrap_or("?");
                    match self.pending.iter_mut().find(|p| p.call_id == id) {
                        Some(existing) => {
                            existing.name = name.to_string();
                            existing.step = step.clone();
                            existing.call_seq = None;
                            existing.started = None;
                        }
                        None => self.pending.push(ToolCall {
                            call_id: id.to_string(),
                            name: name.to_string(),
                            started: None,
                            step: step.clone(),
                            call_seq: None,
                        }),
                    }
                }
            }
            "tool/call" => {
                if let Some(id) = data.get("callId").and_then(Value::as_str)
                    && let Some(entry) = self.pending.iter_mut().find(|p| p.call_id == id)
                {
                    entry.call_seq = Some(seq);
                    entry.started = Some(time);
                }
            }
            "tool/result" => {
                if let Some(id) = data
                    .pointer("/message/source/callId")
                    .and_then(Value::as_str)
                {
                    self.pending.retain(|p| p.call_id != id);
                }
            }
            _ => {}
        }
    }

    /// Observes a streamed chunk, which only moves the last seq and time.
    pub fn observe_chunk(&mut self, seq: u64, time: i64) {
        self.last = Some((seq, time));
    }

    /// How many turns the log has started.
    pub fn turns(&self) -> u64 {
        self.turns
    }

    /// The open turn's number, when the log ends inside a turn.
    pub fn open_turn(&self) -> Option<&Value> {
        self.open_turn.as_ref()
    }

    /// The open step's number, when the log ends inside a step.
    pub fn open_step(&self) -> Option<&Value> {
        self.open_turn.as_ref().and(self.open_step.as_ref())
    }

    /// The open step's calls still without a result, in the order asked for.
    pub fn open_calls(&self) -> &[ToolCall] {
        match self.open_turn {
            Some(_) => &self.pending,
            None => &[],
        }
    }

    /// The time of the last event, in Unix milliseconds.
    pub fn last_time(&self) -> Option<i64> {
        self.last.map(|(_, time)| time)
    }

    /// Approximate memory held beyond the scan's fixed size.
    pub fn memory(&self) -> usize {
        self.pending
            .iter()
            .map(|c| std::mem::size_of::<ToolCall>() + c.call_id.len() + c.name.len())
            .sum()
    }

    /// True when the log ends inside a turn.
    pub fn turn_is_open(&self) -> bool {
        self.open_turn.is_some()
    }

    /// The closers a repair would append; empty for a balanced log.
    pub fn closers(&self) -> Vec<JsonMap> {
        let (Some(turn), Some((last_seq, time))) = (&self.open_turn, self.last) else {
            return Vec::new();
        };
        let mut seq = last_seq + 1;
        let mut out = Vec::new();
        for call in &self.pending {
            let (text, name, code) = match call.call_seq {
                Some(_) => (
                    TOOL_OUTCOME_UNKNOWN_TEXT,
                    "ToolOutcomeUnknownError",
                    "TOOL_OUTCOME_UNKNOWN",
                ),
                None => (
                    TOOL_NOT_STARTED_TEXT,
                    "ToolNotStartedError",
                    "TOOL_NOT_STARTED",
                ),
            };
            let id = &call.call_id;
            let message = json!({
                "id": format!("interrupted-tool-result-{id}-{seq}"),
                "role": "user",
                "source": {"kind": "tool", "callId": id},
                "content": [{"type": "tool-result", "toolCallId": id, "isError": true, "content": [{"type": "text", "text": text}]}],
            });
            let data = json!({"turn": turn, "step": call.step, "message": message, "error": {"name": name, "code": code}});
            let mut event = envelope("tool/result", seq, time, data);
            event.insert("surfaceOp".into(), "append".into());
            if let Some(call_seq) = call.call_seq {
                event.insert("sourceEventSeqs".into(), json!([call_seq]));
            }
            out.push(event);
            seq += 1;
        }
        if let Some(step) = &self.open_step {
            out.push(envelope(
                "step/end",
                seq,
                time,
                json!({"turn": turn, "step": step}),
            ));
            seq += 1;
        }
        out.push(envelope(
            "turn/end",
            seq,
            time,
            json!({"turn": turn, "reason": {"kind": "interrupted"}}),
        ));
        out
    }
}

fn envelope(event_type: &str, seq: u64, time: i64, data: Value) -> JsonMap {
    let mut event = Map::new();
    event.insert("type".into(), event_type.into());
    event.insert("seq".into(), seq.into());
    event.insert("time".into(), time.into());
    event.insert("data".into(), data);
    event
}

/// The closers of a whole log (convenience for tests and the fork check).
pub fn interrupted_turn_closers(events: &[JsonMap]) -> Vec<JsonMap> {
    let mut scan = TurnScan::default();
    events.iter().for_each(|e| scan.observe(e));
    scan.closers()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(lines: &str) -> TurnScan {
        let mut scan = TurnScan::default();
        for line in lines.lines().filter(|l| !l.trim().is_empty()) {
            scan.observe(&serde_json::from_str(line).unwrap());
        }
        scan
    }

    const TWO_CALLS: &str = r#"
{"type":"turn/start","seq":0,"time":1000,"data":{"turn":1}}
{"type":"turn/end","seq":1,"time":1001,"data":{"turn":1,"reason":{"kind":"completed"}}}
{"type":"turn/start","seq":2,"time":2000,"data":{"turn":2}}
{"type":"step/start","seq":3,"time":2001,"data":{"turn":2,"step":1}}
{"type":"assistant/message","seq":4,"time":2500,"data":{"turn":2,"step":1,"message":{"role":"assistant","content":[{"type":"tool-call","id":"c-a","name":"bash","arguments":"{}"},{"type":"tool-call","id":"c-b","name":"read","arguments":"{}"}],"source":{"kind":"model","provider":"p","model":"m"},"id":"a-1"}},"sourceEventSeqs":[],"surfaceOp":"append"}
{"type":"tool/call","seq":5,"time":2510,"data":{"turn":2,"step":1,"callId":"c-a","name":"bash","arguments":"{}"}}
"#;

    #[test]
    fn an_open_step_lists_its_calls_started_or_not() {
        let scan = scan(TWO_CALLS);
        assert_eq!(scan.turns(), 2);
        assert_eq!(scan.open_turn(), Some(&Value::from(2)));
        assert_eq!(scan.open_step(), Some(&Value::from(1)));
        let calls: Vec<_> = scan
            .open_calls()
            .iter()
            .map(|c| (c.call_id.as_str(), c.name.as_str(), c.started))
            .collect();
        assert_eq!(calls, [("c-a", "bash", Some(2510)), ("c-b", "read", None)]);
        assert_eq!(scan.last_time(), Some(2510));
    }

    #[test]
    fn results_and_ends_close_calls_and_turns() {
        let mut scan = scan(TWO_CALLS);
        scan.observe(&serde_json::from_str(r#"{"type":"tool/result","seq":6,"time":2600,"data":{"turn":2,"step":1,"message":{"role":"user","source":{"kind":"tool","callId":"c-a"},"content":[{"type":"tool-result","toolCallId":"c-a","content":[]}],"id":"t"}},"sourceEventSeqs":[5],"surfaceOp":"append"}"#).unwrap());
        assert_eq!(scan.open_calls().len(), 1);
        assert_eq!(scan.open_calls()[0].call_id, "c-b");
        scan.observe_chunk(7, 2700);
        assert_eq!(scan.last_time(), Some(2700));
        scan.observe(
            &serde_json::from_str(
                r#"{"type":"turn/end","seq":8,"time":2800,"data":{"turn":2,"reason":{"kind":"completed"}}}"#,
            )
            .unwrap(),
        );
        assert_eq!(scan.open_turn(), None);
        assert_eq!(scan.open_step(), None);
        assert!(scan.open_calls().is_empty());
        assert_eq!(scan.turns(), 2);
    }

    fn parse(lines: &str) -> Vec<JsonMap> {
        lines
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn the_spec_example_closes_both_calls_in_block_order() {
        let events = parse(
            r#"
{"type":"turn/start","seq":20,"time":1760000100000,"data":{"turn":2}}
{"type":"step/start","seq":21,"time":1760000100001,"data":{"turn":2,"step":1}}
{"type":"assistant/message","seq":22,"time":1760000100500,"data":{"turn":2,"step":1,"message":{"role":"assistant","content":[{"type":"tool-call","id":"c-a","name":"sh","arguments":"{}"},{"type":"tool-call","id":"c-b","name":"sh","arguments":"{}"}],"source":{"kind":"model","provider":"acme","model":"m"},"id":"a-7"}},"sourceEventSeqs":[],"surfaceOp":"append"}
{"type":"tool/call","seq":23,"time":1760000100510,"data":{"turn":2,"step":1,"callId":"c-a","name":"sh","arguments":"{}"}}
"#,
        );
        let closers = interrupted_turn_closers(&events);
        let text: Vec<String> = closers
            .iter()
            .map(|c| serde_json::to_string(c).unwrap())
            .collect();
        assert_eq!(text.len(), 4);
        assert_eq!(
            text[1],
            format!(
                r#"{{"type":"tool/result","seq":25,"time":1760000100510,"data":{{"turn":2,"step":1,"message":{{"id":"interrupted-tool-result-c-b-25","role":"user","source":{{"kind":"tool","callId":"c-b"}},"content":[{{"type":"tool-result","toolCallId":"c-b","isError":true,"content":[{{"type":"text","text":"{TOOL_NOT_STARTED_TEXT}"}}]}}]}},"error":{{"name":"ToolNotStartedError","code":"TOOL_NOT_STARTED"}}}},"surfaceOp":"append"}}"#
            )
        );
        assert!(text[0].contains(r#""surfaceOp":"append","sourceEventSeqs":[23]"#));
        assert!(text[0].contains("TOOL_OUTCOME_UNKNOWN"));
        assert_eq!(
            text[2],
            r#"{"type":"step/end","seq":26,"time":1760000100510,"data":{"turn":2,"step":1}}"#
        );
        assert_eq!(
            text[3],
            r#"{"type":"turn/end","seq":27,"time":1760000100510,"data":{"turn":2,"reason":{"kind":"interrupted"}}}"#
        );
    }

    #[test]
    fn balanced_and_stepless_logs() {
        let balanced = parse(
            r#"
{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"turn/end","seq":1,"time":2,"data":{"turn":1,"reason":{"kind":"completed"}}}
"#,
        );
        assert!(interrupted_turn_closers(&balanced).is_empty());
        assert!(interrupted_turn_closers(&[]).is_empty());
        let open = &balanced[..1];
        let closers = interrupted_turn_closers(open);
        assert_eq!(closers.len(), 1);
        assert_eq!(closers[0]["type"], "turn/end");
    }

    #[test]
    fn ended_steps_and_answered_calls_get_no_closer() {
        let events = parse(
            r#"
{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":1,"data":{"turn":1,"step":1}}
{"type":"assistant/message","seq":2,"time":1,"data":{"turn":1,"step":1,"message":{"role":"assistant","content":[{"type":"tool-call","id":"x","name":"sh","arguments":"{}"},{"type":"tool-call","id":"y","name":"sh","arguments":"{}"}],"source":{"kind":"model","provider":"a","model":"m"},"id":"a"}},"surfaceOp":"append"}
{"type":"tool/call","seq":3,"time":1,"data":{"turn":1,"step":1,"callId":"x","name":"sh","arguments":"{}"}}
{"type":"tool/result","seq":4,"time":9,"data":{"turn":1,"step":1,"message":{"source":{"kind":"tool","callId":"x"},"content":[{"type":"tool-result","toolCallId":"x","content":[]}],"role":"user","id":"t"}},"sourceEventSeqs":[3],"surfaceOp":"append"}
{"type":"tool/call","seq":5,"time":9,"data":{"turn":1,"step":1,"callId":"zz","name":"sh","arguments":"{}"}}
"#,
        );
        let closers = interrupted_turn_closers(&events);
        let types: Vec<&str> = closers
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["tool/result", "step/end", "turn/end"]);
        assert_eq!(closers[0]["data"]["message"]["source"]["callId"], "y");
        assert_eq!(closers[0]["time"], 9);
        let mut ended = events.clone();
        ended.push(
            serde_json::from_str(
                r#"{"type":"step/end","seq":6,"time":9,"data":{"turn":1,"step":1}}"#,
            )
            .unwrap(),
        );
        assert_eq!(interrupted_turn_closers(&ended).len(), 1);
    }
}
