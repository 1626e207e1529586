//! What a session is doing now, from its log alone: how many turns it has
//! run, whether its last turn is open, and which tool calls of the open step
//! were announced, started or answered. A small running scan, fed the same
//! events as the fold, so it follows a growing log. Also the rule deciding
//! when an open turn is shown as crashed.

use std::time::Duration;

use serde_json::Value;

use crate::json::{JsonMap, safe_integer};

/// What the store can tell of a process that may still write the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriterPresence {
    /// Another connection has the store open (SQLite in WAL mode: a lock on
    /// its `-shm` or database file held by another process).
    Connected,
    /// The store can tell, and no other connection has it open.
    Gone,
    /// The store cannot tell (JSONL; SQLite in a rollback-journal mode, whose
    /// idle connections hold no lock).
    Unknown,
}

/// Why an open turn is shown closed by crash repair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepairCause {
    /// No writer can be working on it.
    WriterGone,
    /// The session has been quiet for at least the grace period.
    Quiet(Duration),
}

/// Whether an open turn is shown with its synthetic closers: at once when the
/// store knows no writer is left, else once the session has been quiet for
/// `grace` (a writer may be in a long tool call until then).
pub fn repair_cause(
    writer: WriterPresence,
    quiet_for: Duration,
    grace: Duration,
) -> Option<RepairCause> {
    match writer {
        WriterPresence::Gone => Some(RepairCause::WriterGone),
        WriterPresence::Connected | WriterPresence::Unknown => {
            (quiet_for >= grace).then_some(RepairCause::Quiet(quiet_for))
        }
    }
}

/// One tool call of the open step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub call_id: String,
    /// The tool's name, as the model asked for it.
    pub name: String,
    /// When its `tool/call` was logged (it is running since), if it was.
    pub started: Option<i64>,
}

/// The activity scan.
#[derive(Clone, Debug, Default)]
pub struct ActivityScan {
    turns: u64,
    /// The open turn's `data.turn`, when the log ends inside a turn.
    open_turn: Option<Value>,
    open_step: Option<Value>,
    /// Calls of the open step without a result, in the order asked for.
    calls: Vec<ToolCall>,
    last_time: Option<i64>,
}

impl ActivityScan {
    pub fn observe(&mut self, event: &JsonMap) {
        self.last_time = event.get("time").and_then(safe_integer).or(self.last_time);
        let data = event.get("data").unwrap_or(&Value::Null);
        match event.get("type").and_then(Value::as_str).unwrap_or("") {
            "turn/start" => {
                self.turns += 1;
                self.open_turn = Some(data.get("turn").cloned().unwrap_or(Value::Null));
                self.open_step = None;
                self.calls.clear();
            }
            "turn/end" => {
                self.open_turn = None;
                self.open_step = None;
                self.calls.clear();
            }
            // As crash repair: calls are dropped at a step's end, not its start.
            "step/start" => self.open_step = Some(data.get("step").cloned().unwrap_or(Value::Null)),
            "step/end" => {
                self.open_step = None;
                self.calls.clear();
            }
            "assistant/message" => {
                let blocks = data.pointer("/message/content").and_then(Value::as_array);
                for block in blocks.into_iter().flatten() {
                    if block.get("type").and_then(Value::as_str) != Some("tool-call") {
                        continue;
                    }
                    let Some(id) = block.get("id").and_then(Value::as_str) else {
                        continue;
                    };
                    let name = block.get("name").and_then(Value::as_str).unwrap_or("?");
                    match self.calls.iter_mut().find(|c| c.call_id == id) {
                        Some(call) => {
                            call.name = name.to_string();
                            call.started = None;
                        }
                        None => self.calls.push(ToolCall {
                            call_id: id.to_string(),
                            name: name.to_string(),
                            started: None,
                        }),
                    }
                }
            }
            "tool/call" => {
                let time = event.get("time").and_then(safe_integer);
                if let Some(id) = data.get("callId").and_then(Value::as_str)
                    && let Some(call) = self.calls.iter_mut().find(|c| c.call_id == id)
                {
                    call.started = time;
                }
            }
            "tool/result" => {
                if let Some(id) = data
                    .pointer("/message/source/callId")
                    .and_then(Value::as_str)
                {
                    self.calls.retain(|c| c.call_id != id);
                }
            }
            _ => {}
        }
    }

    /// A streamed chunk only moves the last event's time.
    pub fn observe_chunk(&mut self, time: i64) {
        self.last_time = Some(time);
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
            Some(_) => &self.calls,
            None => &[],
        }
    }

    /// The time of the last event, in Unix milliseconds.
    pub fn last_time(&self) -> Option<i64> {
        self.last_time
    }

    /// Approximate memory held beyond the scan's fixed size.
    pub fn memory(&self) -> usize {
        self.calls
            .iter()
            .map(|c| std::mem::size_of::<ToolCall>() + c.call_id.len() + c.name.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(lines: &str) -> ActivityScan {
        let mut scan = ActivityScan::default();
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
        assert_eq!(
            scan.open_calls(),
            [
                ToolCall {
                    call_id: "c-a".into(),
                    name: "bash".into(),
                    started: Some(2510)
                },
                ToolCall {
                    call_id: "c-b".into(),
                    name: "read".into(),
                    started: None
                },
            ]
        );
        assert_eq!(scan.last_time(), Some(2510));
    }

    #[test]
    fn results_and_ends_close_calls_and_turns() {
        let mut scan = scan(TWO_CALLS);
        scan.observe(&serde_json::from_str(r#"{"type":"tool/result","seq":6,"time":2600,"data":{"turn":2,"step":1,"message":{"role":"user","source":{"kind":"tool","callId":"c-a"},"content":[{"type":"tool-result","toolCallId":"c-a","content":[]}],"id":"t"}},"sourceEventSeqs":[5],"surfaceOp":"append"}"#).unwrap());
        assert_eq!(scan.open_calls().len(), 1);
        assert_eq!(scan.open_calls()[0].call_id, "c-b");
        scan.observe_chunk(2700);
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

    #[test]
    fn the_crash_view_waits_for_the_grace_unless_the_writer_is_gone() {
        let grace = Duration::from_secs(600);
        let short = Duration::from_secs(30);
        let long = Duration::from_secs(601);
        assert_eq!(
            repair_cause(WriterPresence::Gone, Duration::ZERO, grace),
            Some(RepairCause::WriterGone)
        );
        for writer in [WriterPresence::Connected, WriterPresence::Unknown] {
            assert_eq!(repair_cause(writer, short, grace), None);
            assert_eq!(
                repair_cause(writer, long, grace),
                Some(RepairCause::Quiet(long))
            );
        }
    }
}
