//! The model calls of a session and the log prefix each request was built from
//! (the boundary rule of `steps/`).
//!
//! The Harness's agent loop logs `step/start` and the step's user messages,
//! derives the messages from the log, logs the request header and context, and
//! then streams, logging each chunk as it arrives. So the request of a call was
//! built from `events[0..=boundarySeq]`, where `boundarySeq` is the seq just
//! before the call's first response event: its first `assistant/chunk` naming the
//! step, or its `assistant/message` when the stream gave no chunk. A retry after
//! a `finish` chunk of kind `error` or `aborted` is another call, starting at the
//! step's next chunk. A step that logged no response event keeps the prefix up
//! to its end, and says that the log cannot tell whether it was sent.
//!
//! The scan is fed each event once, during the streaming pass that folds the
//! session, and keeps only seqs: the surface operations (so the surface at any
//! boundary can be folded again) and, per call, where its boundary, request
//! header and request context lie.

use serde_json::Value;

use crate::json::JsonMap;
use crate::model::surface::SurfaceEffect;
use crate::model::{ChunkStep, Scanned};

/// How a call's first response was logged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ResponseKind {
    /// The call's first `assistant/chunk`.
    Chunk,
    /// A stream that gave no chunk still logs an (empty) `assistant/message`.
    Message,
}

impl ResponseKind {
    /// The event type of that first response.
    pub fn event_type(self) -> &'static str {
        match self {
            ResponseKind::Chunk => crate::model::validate::CHUNK_TYPE,
            ResponseKind::Message => "assistant/message",
        }
    }
}

/// One model call of a step.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelCall {
    /// `data.turn` of the step's `step/start`.
    pub turn: Value,
    /// `data.step` of the step's `step/start`.
    pub step: Value,
    /// 1 for the first call of the step; retries count on.
    pub call: u32,
    /// The seq of the step's `step/start`.
    pub step_start_seq: u64,
    /// The call's first response event, `None` when the step logged none.
    pub response: Option<(u64, ResponseKind)>,
    /// The last seq of the prefix the request was built from.
    pub boundary_seq: u64,
    /// `reason.kind` of the call's `finish` chunk, once logged.
    pub finish: Option<String>,
    /// The seq of the last `request/header` in the prefix.
    pub header_seq: Option<u64>,
    /// The seq of the last `request/context` in the prefix.
    pub context_seq: Option<u64>,
}

/// One surface operation, kept so a prefix's surface can be folded again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum SurfaceStep {
    Append(u64),
    Replace { seq: u64, start: u64, end: u64 },
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct OpenStep {
    turn: Value,
    step: Value,
    /// The step's turn and step as chunks name them; `None` when `step/start`
    /// holds no numbers, so no chunk can belong to it.
    key: Option<ChunkStep>,
    start_seq: u64,
    calls: u32,
    /// The last call ended with a failed `finish`: the step's next chunk starts a retry.
    failed: bool,
}

/// The streaming scan of the boundary rule.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct StepScan {
    calls: Vec<ModelCall>,
    open: Option<OpenStep>,
    header_seq: Option<u64>,
    context_seq: Option<u64>,
    surface: Vec<SurfaceStep>,
}

impl StepScan {
    /// Calls whose boundary is known, in call order.
    pub fn calls(&self) -> &[ModelCall] {
        &self.calls
    }

    /// Approximate bytes held, for the cache budget.
    pub fn memory(&self) -> usize {
        self.calls.capacity() * std::mem::size_of::<ModelCall>()
            + self.surface.capacity() * std::mem::size_of::<SurfaceStep>()
    }

    /// Returns the spare room of a first scan's growing buffers.
    pub fn shrink(&mut self) {
        self.calls.shrink_to_fit();
        self.surface.shrink_to_fit();
    }

    /// The call of a step the log ends inside before any response event: its
    /// prefix is the whole log, up to `last_seq`. Its boundary moves while the
    /// log grows, so it is only meant for a log that has gone quiet.
    pub fn unanswered_at_end(&self, last_seq: u64) -> Option<ModelCall> {
        let open = self.open.as_ref().filter(|o| o.calls == 0)?;
        Some(self.pending_call(1, None, last_seq.max(open.start_seq)))
    }

    /// Takes the next event (already checked and folded) and what it did to the surface.
    pub fn observe(&mut self, scanned: &Scanned, effect: &SurfaceEffect) {
        match scanned {
            Scanned::Chunk { seq, step, .. } => self.chunk(*seq, *step, None),
            Scanned::Event(event) => self.event(event, effect),
        }
    }

    fn event(&mut self, event: &JsonMap, effect: &SurfaceEffect) {
        let Some(seq) = event.get("seq").and_then(Value::as_u64) else {
            return;
        };
        match effect {
            SurfaceEffect::None => {}
            SurfaceEffect::Appended => self.surface.push(SurfaceStep::Append(seq)),
            SurfaceEffect::Replaced(r) => self.surface.push(SurfaceStep::Replace {
                seq,
                start: r.start,
                end: r.end,
            }),
        }
        let data = event.get("data").unwrap_or(&Value::Null);
        match event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "step/start" => {
                self.close(seq);
                let turn = data.get("turn").cloned().unwrap_or(Value::Null);
                let step = data.get("step").cloned().unwrap_or(Value::Null);
                self.open = Some(OpenStep {
                    key: chunk_step(data),
                    turn,
                    step,
                    start_seq: seq,
                    calls: 0,
                    failed: false,
                });
            }
            // A turn/end closes a step whose step/end was never logged.
            "step/end" | "turn/end" => self.close(seq),
            "request/header" => self.header_seq = Some(seq),
            "request/context" => self.context_seq = Some(seq),
            "assistant/chunk" => {
                if let Some(step) = chunk_step(data) {
                    let chunk = data.get("chunk");
                    let finish = chunk
                        .filter(|c| c.get("type").and_then(Value::as_str) == Some("finish"))
                        .map(|c| {
                            c.pointer("/reason/kind")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                        });
                    self.chunk(seq, step, finish);
                }
            }
            "assistant/message" => {
                let open = self.open.as_ref();
                if open
                    .is_some_and(|o| o.calls == 0 && o.key.is_some() && o.key == chunk_step(data))
                {
                    self.start_call(seq, ResponseKind::Message);
                }
            }
            _ => {}
        }
    }

    /// A chunk, with its finish kind when it is a `finish` chunk.
    fn chunk(&mut self, seq: u64, step: ChunkStep, finish: Option<&str>) {
        let Some(open) = &self.open else { return };
        if open.key != Some(step) {
            return;
        }
        if open.calls == 0 || open.failed {
            self.start_call(seq, ResponseKind::Chunk);
        }
        if let Some(kind) = finish {
            if let Some(call) = self.calls.last_mut() {
                call.finish = Some(kind.to_string());
            }
            if let Some(open) = &mut self.open {
                open.failed = matches!(kind, "error" | "aborted");
            }
        }
    }

    fn start_call(&mut self, response_seq: u64, kind: ResponseKind) {
        let Some(open) = &mut self.open else { return };
        open.calls += 1;
        open.failed = false;
        let number = open.calls;
        let call = self.pending_call(number, Some((response_seq, kind)), response_seq - 1);
        self.calls.push(call);
    }

    /// Ends the open step at event `seq` (its `step/end`, or failing that the
    /// next `step/start` or `turn/end`).
    fn close(&mut self, seq: u64) {
        if self.open.as_ref().is_some_and(|o| o.calls == 0) {
            let call = self.pending_call(1, None, seq.saturating_sub(1));
            self.calls.push(call);
        }
        self.open = None;
    }

    fn pending_call(
        &self,
        call: u32,
        response: Option<(u64, ResponseKind)>,
        boundary_seq: u64,
    ) -> ModelCall {
        let open = self.open.as_ref().expect("a call belongs to an open step");
        ModelCall {
            turn: open.turn.clone(),
            step: open.step.clone(),
            call,
            step_start_seq: open.start_seq,
            response,
            boundary_seq,
            finish: None,
            header_seq: self.header_seq,
            context_seq: self.context_seq,
        }
    }

    /// The surface nodes after event `boundary`, folded again from the start.
    /// Only surface events are replayed, as seqs: a fraction of the cost of
    /// fetching the messages the nodes name.
    pub fn surface_at(&self, boundary: u64) -> Vec<u64> {
        let mut nodes: Vec<u64> = Vec::new();
        for op in &self.surface {
            match *op {
                SurfaceStep::Append(seq) if seq <= boundary => nodes.push(seq),
                SurfaceStep::Replace { seq, start, end } if seq <= boundary => {
                    // The fold checked the range when it folded the event.
                    let i = nodes.iter().position(|n| *n == start);
                    let j = nodes.iter().position(|n| *n == end);
                    if let (Some(i), Some(j)) = (i, j) {
                        nodes.splice(i..=j, [seq]);
                    }
                }
                _ => break,
            }
        }
        nodes
    }
}

fn chunk_step(data: &Value) -> Option<ChunkStep> {
    Some(ChunkStep {
        turn: data.get("turn")?.as_f64()?,
        step: data.get("step")?.as_f64()?,
    })
}

/// The name of a call's directory in `steps/`: its boundary seq (so names sort
/// in call order and never change as the log grows), turn and step, and the
/// call number of a retry.
pub fn call_name(call: &ModelCall) -> String {
    let number = |v: &Value| match v {
        Value::Number(n) => n.to_string(),
        _ => "?".into(),
    };
    let mut name = format!(
        "{:08}-t{}.s{}",
        call.boundary_seq,
        number(&call.turn),
        number(&call.step)
    );
    if call.call > 1 {
        name.push_str(&format!(".call{}", call.call));
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fold::SessionFold;
    use crate::model::header::SessionHeader;

    /// Folds a hand-made log (one event per line, seqs given by position) and
    /// scans it; events use the compact `type data [surfaceOp]` form below.
    fn scan(lines: &[&str]) -> StepScan {
        let mut fold = SessionFold::new(&SessionHeader::new("s", 1), "s").unwrap();
        let mut scan = StepScan::default();
        for (seq, line) in lines.iter().enumerate() {
            let (event_type, rest) = line.split_once(' ').unwrap_or((line, "{}"));
            let (data, op) = rest.split_once(" @").unwrap_or((rest, ""));
            let mut text = format!(r#"{{"type":"{event_type}","seq":{seq},"time":1,"data":{data}"#);
            match op {
                "" => {}
                "append" => text.push_str(r#","surfaceOp":"append""#),
                range => {
                    let (start, end) = range.split_once('-').unwrap();
                    text.push_str(&format!(
                        r#","surfaceOp":{{"op":"replace","start":{start},"end":{end}}},"sourceEventSeqs":[{}]"#,
                        (start.parse::<u64>().unwrap()..=end.parse().unwrap())
                            .map(|s| s.to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    ));
                }
            }
            text.push('}');
            let event: JsonMap = serde_json::from_str(&text).unwrap();
            let mut scanned = Scanned::Event(event);
            let folded = fold.observe_scanned(&mut scanned).unwrap();
            scan.observe(&scanned, &folded.effect);
        }
        scan
    }

    const USER: &str = r#"user/message {"id":"u","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]} @append"#;
    const HEADER: &str =
        r#"request/header {"header":{"config":{"provider":"p","model":"m"}},"reason":"initial"}"#;

    fn chunk(turn: u32, step: u32, chunk: &str) -> String {
        format!(r#"assistant/chunk {{"turn":{turn},"step":{step},"chunk":{chunk}}}"#)
    }

    fn reply(turn: u32, step: u32) -> String {
        format!(
            r#"assistant/message {{"turn":{turn},"step":{step},"message":{{"id":"a","role":"assistant","content":[{{"type":"text","text":"ok"}}],"source":{{"kind":"model","provider":"p","model":"m"}}}}}} @append"#
        )
    }

    const DELTA: &str = r#"{"type":"text-delta","index":0,"text":"o"}"#;

    fn finish(kind: &str) -> String {
        format!(r#"{{"type":"finish","reason":{{"kind":"{kind}"}}}}"#)
    }

    #[test]
    fn a_call_is_built_from_the_events_before_its_first_chunk() {
        let lines = [
            r#"turn/start {"turn":1}"#.to_string(),
            r#"step/start {"turn":1,"step":1}"#.into(),
            USER.into(),
            HEADER.into(),
            chunk(1, 1, DELTA),
            chunk(1, 1, &finish("stop")),
            reply(1, 1),
            r#"step/end {"turn":1,"step":1}"#.into(),
            r#"turn/end {"turn":1,"reason":{"kind":"completed"}}"#.into(),
        ];
        let scan = scan(&lines.iter().map(String::as_str).collect::<Vec<_>>());
        let [call] = scan.calls() else {
            panic!("{:?}", scan.calls())
        };
        assert_eq!(call.boundary_seq, 3);
        assert_eq!(call.response, Some((4, ResponseKind::Chunk)));
        assert_eq!((call.call, call.step_start_seq), (1, 1));
        assert_eq!(call.finish.as_deref(), Some("stop"));
        assert_eq!((call.header_seq, call.context_seq), (Some(3), None));
        assert_eq!(scan.surface_at(call.boundary_seq), [2]);
        assert_eq!(scan.surface_at(8), [2, 6]);
        assert_eq!(call_name(call), "00000003-t1.s1");
    }

    #[test]
    fn a_retry_after_a_failed_finish_is_its_own_call() {
        let lines = [
            r#"turn/start {"turn":1}"#.to_string(),
            r#"step/start {"turn":1,"step":1}"#.into(),
            USER.into(),
            chunk(1, 1, DELTA),
            chunk(1, 1, &finish("error")),
            r#"llm/retry {"attempt":1}"#.into(),
            HEADER.into(),
            // A chunk of another step does not start the retry.
            chunk(2, 1, DELTA),
            chunk(1, 1, DELTA),
            chunk(1, 1, DELTA),
            chunk(1, 1, &finish("stop")),
            reply(1, 1),
            r#"step/end {"turn":1,"step":1}"#.into(),
        ];
        let scan = scan(&lines.iter().map(String::as_str).collect::<Vec<_>>());
        let [first, retry] = scan.calls() else {
            panic!("{:?}", scan.calls())
        };
        assert_eq!((first.call, first.boundary_seq), (1, 2));
        assert_eq!(first.finish.as_deref(), Some("error"));
        assert_eq!(first.header_seq, None);
        assert_eq!((retry.call, retry.boundary_seq), (2, 7));
        assert_eq!(retry.response, Some((8, ResponseKind::Chunk)));
        assert_eq!(retry.finish.as_deref(), Some("stop"));
        assert_eq!(retry.header_seq, Some(6));
        assert_eq!(call_name(retry), "00000007-t1.s1.call2");
        // A finish of kind stop ends the step's calls: no third call.
        assert_eq!(scan.calls().len(), 2);
    }

    #[test]
    fn a_step_without_a_response_keeps_its_prefix_and_names_no_response() {
        let lines = [
            r#"turn/start {"turn":1}"#.to_string(),
            r#"step/start {"turn":1,"step":1}"#.into(),
            USER.into(),
            HEADER.into(),
            r#"step/end {"turn":1,"step":1}"#.into(),
            r#"turn/end {"turn":1,"reason":{"kind":"error","error":{"message":"x","code":"NETWORK"}}}"#.into(),
            r#"turn/start {"turn":2}"#.into(),
            r#"step/start {"turn":2,"step":1}"#.into(),
            USER.into(),
            // A stream that gave no chunk still logs its message.
            reply(2, 1),
            r#"step/end {"turn":2,"step":1}"#.into(),
        ];
        let scan = scan(&lines.iter().map(String::as_str).collect::<Vec<_>>());
        let [silent, chunkless] = scan.calls() else {
            panic!("{:?}", scan.calls())
        };
        assert_eq!(silent.response, None);
        assert_eq!(silent.boundary_seq, 3);
        assert_eq!(silent.finish, None);
        assert_eq!(chunkless.response, Some((9, ResponseKind::Message)));
        assert_eq!(chunkless.boundary_seq, 8);
        assert_eq!(scan.surface_at(8), [2, 8]);
    }

    #[test]
    fn an_open_step_has_no_call_until_its_response_or_end() {
        let lines = [
            r#"turn/start {"turn":1}"#,
            r#"step/start {"turn":1,"step":1}"#,
            USER,
        ];
        let scan = scan(&lines);
        assert!(scan.calls().is_empty());
        // Once the log is quiet, the prefix is the whole log.
        let ended = scan.unanswered_at_end(2).expect("an unanswered call");
        assert_eq!((ended.boundary_seq, ended.response), (2, None));
        assert_eq!(ended.step_start_seq, 1);
    }

    #[test]
    fn an_answered_open_step_has_no_unanswered_call() {
        let lines = [
            r#"step/start {"turn":1,"step":1}"#.to_string(),
            USER.into(),
            chunk(1, 1, DELTA),
        ];
        let scan = scan(&lines.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(scan.calls().len(), 1);
        assert_eq!(scan.unanswered_at_end(2), None);
    }

    #[test]
    fn the_surface_at_a_boundary_folds_replacements_before_it() {
        let lines = [
            r#"step/start {"turn":1,"step":1}"#.to_string(),
            USER.into(),
            reply(1, 1),
            USER.into(),
            // A compaction replaces nodes 1..=2 at seq 4.
            r#"user/message {"id":"c","role":"user","source":{"kind":"plugin"},"content":[{"type":"text","text":"summary"}]} @1-2"#
                .into(),
            r#"step/end {"turn":1,"step":1}"#.into(),
        ];
        let scan = scan(&lines.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(scan.surface_at(3), [1, 2, 3]);
        assert_eq!(scan.surface_at(4), [4, 3]);
        assert_eq!(scan.surface_at(0), Vec::<u64>::new());
    }
}
