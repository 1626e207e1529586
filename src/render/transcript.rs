//! `transcript.md`: the human transcript (spec §5.6), built from append-origin
//! surface events in log order, so compaction never erases what the user saw.
//!
//! Layout, for a pager and for grep: every entry starts with a heading line
//! `### [t<turn> #<seq>] <who> · <time>`, and the first line of every text block is
//! tagged `[t<turn> #<seq>]` too, so a match on it names its turn and seq.
//! Continuation lines are indented by four spaces and carry no tag, so that text
//! is never interrupted by markup (copy-paste and phrase searches keep working).

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use serde_json::Value;

use crate::json::{JsonMap, str_field};
use crate::model::surface::SurfaceEffect;
use crate::render::format_time;

/// Renders events into markdown as they are folded.
#[derive(Clone, Debug, Default)]
pub struct TranscriptWriter {
    /// Shared with the file snapshots taken of it, so the transcript is held
    /// once; writing after a snapshot copies it (open readers keep theirs).
    out: Arc<Vec<u8>>,
    turn: Option<String>,
    /// Summaries by compaction id, until the replacement that uses them lands.
    summaries: HashMap<String, String>,
    /// Compactions started and not yet ended: id → start seq.
    open_compactions: Vec<(String, u64)>,
}

impl TranscriptWriter {
    pub fn new(title: &str) -> TranscriptWriter {
        let mut writer = TranscriptWriter::default();
        let _ = writeln!(writer.buffer(), "# Transcript of {title}\n");
        writer
    }

    /// A writer in the same state (turn, pending compactions) with no bytes yet,
    /// to render events after this one without copying what is written.
    pub fn continuation(&self) -> TranscriptWriter {
        TranscriptWriter {
            out: Arc::default(),
            ..self.clone_state()
        }
    }

    fn clone_state(&self) -> TranscriptWriter {
        TranscriptWriter {
            out: Arc::default(),
            turn: self.turn.clone(),
            summaries: self.summaries.clone(),
            open_compactions: self.open_compactions.clone(),
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.out
    }

    /// The bytes written so far, shared rather than copied.
    pub fn shared(&self) -> Arc<Vec<u8>> {
        Arc::clone(&self.out)
    }

    pub fn shrink(&mut self) {
        self.buffer().shrink_to_fit();
    }

    fn buffer(&mut self) -> &mut Vec<u8> {
        Arc::make_mut(&mut self.out)
    }

    /// The compactions that started and never ended, as a closing note.
    pub fn unfinished_note(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (id, seq) in &self.open_compactions {
            let _ = writeln!(
                out,
                "> **Unfinished compaction** `{id}` started at seq {seq} and has no compaction/end.\n"
            );
        }
        out
    }

    fn tag(&self, seq: u64) -> String {
        match &self.turn {
            Some(turn) => format!("[t{turn} #{seq}]"),
            None => format!("[#{seq}]"),
        }
    }

    fn heading(&mut self, seq: u64, who: &str, time: &Value, synthetic: bool) {
        let tag = self.tag(seq);
        let when = time
            .as_i64()
            .map(format_time)
            .unwrap_or_else(|| time.to_string());
        let mark = if synthetic {
            " · *synthetic: added by crash repair, not logged*"
        } else {
            ""
        };
        let _ = writeln!(self.buffer(), "### {tag} {who} · {when}{mark}\n");
    }

    /// A block of text: the first line tagged, continuation lines indented.
    fn text(&mut self, seq: u64, label: Option<&str>, text: &str) {
        let tag = self.tag(seq);
        let mut lines = text.split('\n');
        let first = lines.next().unwrap_or_default();
        let label = label.map(|l| format!("{l} ")).unwrap_or_default();
        let _ = writeln!(self.buffer(), "{tag} {label}{first}");
        for line in lines {
            let _ = writeln!(self.buffer(), "    {line}");
        }
        self.buffer().push(b'\n');
    }

    /// Renders one event. `synthetic` marks crash-repair closers.
    pub fn event(&mut self, event: &JsonMap, effect: &SurfaceEffect, synthetic: bool) {
        let seq = event.get("seq").and_then(Value::as_u64).unwrap_or_default();
        let time = event.get("time").cloned().unwrap_or(Value::Null);
        let data = event.get("data").unwrap_or(&Value::Null);
        let event_type = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match (event_type, effect) {
            ("turn/start", _) => {
                let turn = data
                    .get("turn")
                    .map(|t| t.to_string())
                    .unwrap_or_else(|| "?".into());
                let _ = writeln!(self.buffer(), "## Turn {turn}\n");
                self.turn = Some(turn);
            }
            ("turn/end", _) => {
                let reason = data.get("reason").unwrap_or(&Value::Null);
                let kind = reason
                    .get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown");
                if kind != "completed" {
                    let detail = turn_end_detail(reason);
                    self.heading(seq, "turn ended", &time, synthetic);
                    self.text(seq, Some("**Turn ended:**"), &format!("{kind}{detail}"));
                }
                self.turn = None;
            }
            ("compaction/start", _) => {
                let id = str_field_value(data, "compactionId");
                self.open_compactions.push((id.clone(), seq));
            }
            ("compaction/summary", _) => {
                let id = str_field_value(data, "compactionId");
                self.summaries.insert(id, block_texts(data.get("summary")));
            }
            ("compaction/end", _) => {
                let id = str_field_value(data, "compactionId");
                self.open_compactions.retain(|(open, _)| *open != id);
                if let Some(error) = data.get("error").and_then(Value::as_str) {
                    self.heading(seq, "compaction failed", &time, false);
                    self.text(seq, Some("**Compaction failed:**"), error);
                }
            }
            // The model's context was compacted here; what the user saw stays above.
            ("user/message", SurfaceEffect::Replaced(replacement))
                if data.pointer("/source/plugin").and_then(Value::as_str) == Some("compact") =>
            {
                let id = data
                    .pointer("/source/compactionId")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let summary = self.summaries.remove(id).unwrap_or_default();
                self.heading(seq, "context compacted", &time, false);
                let note = format!(
                    "The model's context was compacted here: {} earlier surface messages were replaced by this summary (the conversation above is unchanged).",
                    replacement.shadowed.len()
                );
                self.text(seq, Some("**Note:**"), &note);
                self.text(
                    seq,
                    Some("**Summary (written by the model, not said by the user):**"),
                    &summary,
                );
            }
            ("user/message", SurfaceEffect::Appended) => {
                let source = data.get("source").unwrap_or(&Value::Null);
                let who = match source.get("kind").and_then(Value::as_str) {
                    Some("user") => "user".to_string(),
                    Some("plugin") => {
                        format!(
                            "context from {}",
                            source
                                .get("plugin")
                                .and_then(Value::as_str)
                                .unwrap_or("a plugin")
                        )
                    }
                    Some(other) => format!("user message ({other})"),
                    None => "user message".into(),
                };
                self.heading(seq, &who, &time, synthetic);
                self.blocks(seq, data.get("content"));
            }
            ("assistant/message", SurfaceEffect::Appended) => {
                let message = data.get("message").unwrap_or(&Value::Null);
                let model = message.get("source").map(|s| {
                    format!(
                        "{}/{}",
                        s.get("provider").and_then(Value::as_str).unwrap_or("?"),
                        s.get("model").and_then(Value::as_str).unwrap_or("?")
                    )
                });
                let mut who = format!("assistant ({})", model.unwrap_or_default());
                if data.get("interrupted") == Some(&Value::Bool(true)) {
                    who.push_str(" · interrupted");
                }
                self.heading(seq, &who, &time, synthetic);
                let content = message.get("content");
                if content.and_then(Value::as_array).is_some_and(Vec::is_empty) {
                    self.text(seq, None, "*(no content: this step produced only usage)*");
                } else {
                    self.blocks(seq, content);
                }
            }
            ("tool/result", SurfaceEffect::Appended) => {
                let message = data.get("message").unwrap_or(&Value::Null);
                let call = message
                    .pointer("/source/callId")
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                let block = message.pointer("/content/0").unwrap_or(&Value::Null);
                let is_error =
                    block.get("isError") == Some(&Value::Bool(true)) || data.get("error").is_some();
                let mut who = format!("tool result `{call}`");
                if is_error {
                    who.push_str(" · **error**");
                }
                if let Some(error) = data.get("error") {
                    who.push_str(&format!(
                        " {} {}",
                        error
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default(),
                        error
                            .get("code")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                    ));
                }
                self.heading(seq, &who, &time, synthetic);
                self.blocks(seq, block.get("content"));
            }
            _ => {}
        }
    }

    fn blocks(&mut self, seq: u64, content: Option<&Value>) {
        for block in content.and_then(Value::as_array).into_iter().flatten() {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => self.text(
                    seq,
                    None,
                    block
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                ),
                Some("reasoning") => self.text(
                    seq,
                    Some("*reasoning:*"),
                    block
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                ),
                Some("tool-call") => {
                    let name = block.get("name").and_then(Value::as_str).unwrap_or("?");
                    let id = block.get("id").and_then(Value::as_str).unwrap_or("?");
                    let arguments = block
                        .get("arguments")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    self.text(
                        seq,
                        Some(&format!("**tool call** `{name}` `{id}`:")),
                        arguments,
                    );
                }
                Some("image") => {
                    let attachment = block.get("attachment").unwrap_or(&Value::Null);
                    let name = attachment
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("image");
                    self.text(
                        seq,
                        Some("*image:*"),
                        &format!(
                            "{name} ({})",
                            attachment
                                .get("mediaType")
                                .and_then(Value::as_str)
                                .unwrap_or("?")
                        ),
                    );
                }
                Some("tool-result") => self.blocks(seq, block.get("content")),
                other => self.text(
                    seq,
                    Some(&format!("*{} block*", other.unwrap_or("unknown"))),
                    &block.to_string(),
                ),
            }
        }
    }
}

fn str_field_value(data: &Value, key: &str) -> String {
    data.as_object()
        .and_then(|m| str_field(m, key))
        .unwrap_or_default()
        .to_string()
}

fn block_texts(blocks: Option<&Value>) -> String {
    let texts: Vec<&str> = blocks
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    texts.join("\n")
}

fn turn_end_detail(reason: &Value) -> String {
    match reason.get("kind").and_then(Value::as_str) {
        Some("aborted") => {
            let cause = reason.get("reason").unwrap_or(&Value::Null);
            let kind = cause
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("unknown");
            match cause.get("reason").and_then(Value::as_str) {
                Some(why) => format!(" (by {kind}: {why})"),
                None => format!(" (by {kind})"),
            }
        }
        Some("error") => {
            let error = reason.get("error").unwrap_or(&Value::Null);
            format!(
                " ({}: {})",
                error.get("code").and_then(Value::as_str).unwrap_or("?"),
                error.get("message").and_then(Value::as_str).unwrap_or("?")
            )
        }
        Some("interrupted") => {
            " (the session stopped inside this turn; closed by crash repair)".into()
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::surface::Replacement;

    fn ev(text: &str) -> JsonMap {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn renders_turns_messages_and_compaction_markers() {
        let mut writer = TranscriptWriter::new("s");
        writer.event(
            &ev(r#"{"type":"turn/start","seq":0,"time":0,"data":{"turn":1}}"#),
            &SurfaceEffect::None,
            false,
        );
        writer.event(
            &ev(r#"{"type":"user/message","seq":1,"time":0,"data":{"content":[{"type":"text","text":"hello\nworld"}],"source":{"kind":"user"},"role":"user","id":"u"},"surfaceOp":"append"}"#),
            &SurfaceEffect::Appended,
            false,
        );
        writer.event(&ev(r#"{"type":"compaction/start","seq":2,"time":0,"data":{"compactionId":"c1","turn":1}}"#), &SurfaceEffect::None, false);
        writer.event(&ev(r#"{"type":"compaction/summary","seq":3,"time":0,"data":{"compactionId":"c1","summary":[{"type":"text","text":"they greeted"}]}}"#), &SurfaceEffect::None, false);
        let replacement = SurfaceEffect::Replaced(Replacement {
            seq: 4,
            start: 1,
            end: 1,
            shadowed: vec![1],
        });
        writer.event(
            &ev(r#"{"type":"user/message","seq":4,"time":0,"data":{"content":[],"source":{"kind":"plugin","plugin":"compact","compactionId":"c1"},"role":"user","id":"x"},"surfaceOp":{"op":"replace","start":1,"end":1},"sourceEventSeqs":[1,2,3]}"#),
            &replacement,
            false,
        );
        let text = String::from_utf8(writer.bytes().to_vec()).unwrap();
        assert!(text.contains("## Turn 1"));
        assert!(text.contains("[t1 #1] hello\n    world\n"));
        assert!(text.contains("context compacted"));
        assert!(
            text.contains("**Summary (written by the model, not said by the user):** they greeted")
        );
        assert!(
            writer
                .unfinished_note()
                .starts_with(b"> **Unfinished compaction** `c1`")
        );
    }
}
