//! `transcript.md`: the human transcript (spec §5.6), built from append-origin
//! surface events in log order, so compaction never erases what the user saw.
//!
//! The file is CommonMark, written entry by entry and never revised: each event
//! adds complete blocks (see `render::markdown`), so a reader following the
//! file never sees a construct left open for a later event. Only logged events
//! are rendered: crash-repair closers may be withdrawn when the log grows, so
//! they show in the snapshot views, never here.
//!
//! Layout: `## Turn N` per turn; every entry starts with a heading
//! `### [t<turn> #<seq>] <who> · <time>` (errors marked there), so the nearest
//! such heading above a grep match names its turn and seq. User and assistant
//! text is prose as written, reasoning a block quote, tool calls their
//! arguments as a `json` block (multi-line strings again unescaped, below it),
//! tool output a fenced block.

use std::collections::HashMap;
use std::io::Write;

use serde_json::Value;

use crate::bytes::Bytes;
use crate::json::{JsonMap, str_field};
use crate::model::surface::SurfaceEffect;
use crate::render::format_time;
use crate::render::markdown::{code_span, fenced, inline, is_unified_diff, prose, quoted};

/// Renders events into Markdown as they are folded.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct TranscriptWriter {
    /// Shared with the file snapshots taken of it, so the transcript is held
    /// once; writing after a snapshot copies at most its tail segment. Saved
    /// apart from the rest (`view::saved`), as bytes rather than JSON.
    #[serde(skip)]
    out: Bytes,
    turn: Option<String>,
    /// Summaries by compaction id, until the replacement that uses them lands.
    summaries: HashMap<String, String>,
}

/// How a message's text blocks are shown.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Voice {
    /// Said by the user or the model: Markdown prose.
    Prose,
    /// Printed by a tool: a code block.
    Output,
}

impl TranscriptWriter {
    /// A transcript headed by `title`, with no event yet.
    pub fn new(title: &str) -> TranscriptWriter {
        let mut writer = TranscriptWriter::default();
        let out = writer.buffer();
        out.extend_from_slice(b"# Transcript of ");
        inline(out, title);
        out.extend_from_slice(b"\n\n");
        writer
    }

    /// This writer's state with `out` as the bytes written so far: how a
    /// saved writer is resumed, its output having been saved apart.
    pub fn with_output(self, out: Bytes) -> TranscriptWriter {
        TranscriptWriter { out, ..self }
    }

    /// The bytes written so far, shared rather than copied.
    pub fn shared(&self) -> Bytes {
        self.out.clone()
    }

    /// Returns the spare room of the growing buffer, once a first scan ends.
    pub fn shrink(&mut self) {
        self.out.shrink();
    }

    fn buffer(&mut self) -> &mut Vec<u8> {
        self.out.tail_mut()
    }

    /// `### [t<turn> #<seq>] <who> · <time>`; `who` writes its part.
    fn heading(&mut self, seq: u64, time: &Value, who: impl FnOnce(&mut Vec<u8>)) {
        let Self { out, turn, .. } = self;
        let out = out.tail_mut();
        out.extend_from_slice(b"### [");
        if let Some(turn) = turn {
            out.push(b't');
            out.extend_from_slice(turn.as_bytes());
            out.push(b' ');
        }
        let _ = write!(out, "#{seq}] ");
        who(out);
        out.extend_from_slice(" · ".as_bytes());
        match time.as_i64() {
            Some(ms) => out.extend_from_slice(format_time(ms).as_bytes()),
            None => inline(out, &time.to_string()),
        }
        out.extend_from_slice(b"\n\n");
    }

    /// A paragraph of one line: a bold label, then inline text.
    fn labelled(&mut self, label: &str, text: &str) {
        let out = self.buffer();
        let _ = write!(out, "**{label}** ");
        inline(out, text);
        out.extend_from_slice(b"\n\n");
    }

    /// Renders one logged event.
    pub fn event(&mut self, event: &JsonMap, effect: &SurfaceEffect) {
        let seq = event.get("seq").and_then(Value::as_u64).unwrap_or_default();
        let time = event.get("time").unwrap_or(&Value::Null);
        let data = event.get("data").unwrap_or(&Value::Null);
        let event_type = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match (event_type, effect) {
            ("turn/start", _) => {
                let mut turn = Vec::new();
                match data.get("turn") {
                    Some(t) => inline(&mut turn, &t.to_string()),
                    None => turn.push(b'?'),
                }
                let turn = String::from_utf8_lossy(&turn).into_owned();
                let _ = write!(self.buffer(), "## Turn {turn}\n\n");
                self.turn = Some(turn);
            }
            ("turn/end", _) => {
                let reason = data.get("reason").unwrap_or(&Value::Null);
                let kind = reason
                    .get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown");
                if kind != "completed" {
                    self.heading(seq, time, |out| {
                        out.extend_from_slice(b"turn ended");
                        if kind == "error" {
                            out.extend_from_slice(" · **error**".as_bytes());
                        }
                    });
                    let detail = format!("{kind}{}", turn_end_detail(reason));
                    self.labelled("Turn ended:", &detail);
                }
                self.turn = None;
            }
            ("compaction/summary", _) => {
                let id = str_field_value(data, "compactionId");
                self.summaries.insert(id, block_texts(data.get("summary")));
            }
            ("compaction/end", _) => {
                if let Some(error) = data.get("error").and_then(Value::as_str) {
                    self.heading(seq, time, |out| {
                        out.extend_from_slice("compaction failed · **error**".as_bytes());
                    });
                    self.labelled("Compaction failed:", error);
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
                self.heading(seq, time, |out| {
                    out.extend_from_slice(b"context compacted");
                });
                let out = self.buffer();
                let _ = write!(
                    out,
                    "**Note:** the model's context was compacted here: {} earlier surface messages were replaced by the summary below (the conversation above is unchanged).\n\n\
                     **Summary** (written by the model, not said by the user):\n\n",
                    replacement.shadowed.len()
                );
                quoted(out, &summary);
            }
            ("user/message", SurfaceEffect::Appended) => {
                let source = data.get("source").unwrap_or(&Value::Null);
                let kind = source.get("kind").and_then(Value::as_str);
                self.heading(seq, time, |out| match kind {
                    Some("user") => out.extend_from_slice(b"user"),
                    Some("plugin") => {
                        out.extend_from_slice(b"context from ");
                        let plugin = source.get("plugin").and_then(Value::as_str);
                        inline(out, plugin.unwrap_or("a plugin"));
                    }
                    Some(other) => {
                        out.extend_from_slice(b"user message (");
                        inline(out, other);
                        out.push(b')');
                    }
                    None => out.extend_from_slice(b"user message"),
                });
                self.blocks(data.get("content"), Voice::Prose);
            }
            ("assistant/message", SurfaceEffect::Appended) => {
                let message = data.get("message").unwrap_or(&Value::Null);
                let source = message.get("source");
                let interrupted = data.get("interrupted") == Some(&Value::Bool(true));
                self.heading(seq, time, |out| {
                    out.extend_from_slice(b"assistant (");
                    if let Some(source) = source {
                        let part = |key| source.get(key).and_then(Value::as_str).unwrap_or("?");
                        inline(out, part("provider"));
                        out.push(b'/');
                        inline(out, part("model"));
                    }
                    out.push(b')');
                    if interrupted {
                        out.extend_from_slice(" · interrupted".as_bytes());
                    }
                });
                let content = message.get("content");
                if content.and_then(Value::as_array).is_some_and(Vec::is_empty) {
                    self.buffer()
                        .extend_from_slice(b"*(no content: this step produced only usage)*\n\n");
                } else {
                    self.blocks(content, Voice::Prose);
                }
            }
            ("tool/result", SurfaceEffect::Appended) => {
                let message = data.get("message").unwrap_or(&Value::Null);
                let call = message
                    .pointer("/source/callId")
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                let content = message.get("content");
                let is_error = data.get("error").is_some()
                    || content
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .any(|b| b.get("isError") == Some(&Value::Bool(true)));
                let error = data.get("error");
                self.heading(seq, time, |out| {
                    out.extend_from_slice(b"tool result ");
                    code_span(out, call);
                    if is_error {
                        out.extend_from_slice(" · **error**".as_bytes());
                    }
                    for key in ["name", "code"] {
                        if let Some(part) = error.and_then(|e| e.get(key)).and_then(Value::as_str) {
                            out.push(b' ');
                            inline(out, part);
                        }
                    }
                });
                self.blocks(content, Voice::Output);
            }
            _ => {}
        }
    }

    fn blocks(&mut self, content: Option<&Value>, voice: Voice) {
        for block in content.and_then(Value::as_array).into_iter().flatten() {
            let text = || {
                block
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            };
            match block.get("type").and_then(Value::as_str) {
                Some("text") if voice == Voice::Output => fenced(self.buffer(), "", text()),
                Some("text") => prose(self.buffer(), text()),
                Some("reasoning") => {
                    let out = self.buffer();
                    out.extend_from_slice(b"*Reasoning:*\n\n");
                    quoted(out, text());
                }
                Some("tool-call") => {
                    let field = |key| block.get(key).and_then(Value::as_str);
                    tool_call(
                        self.buffer(),
                        field("name").unwrap_or("?"),
                        field("id").unwrap_or("?"),
                        field("arguments").unwrap_or_default(),
                    );
                }
                Some("image") => {
                    let attachment = block.get("attachment").unwrap_or(&Value::Null);
                    let field = |key, default| {
                        attachment
                            .get(key)
                            .and_then(Value::as_str)
                            .unwrap_or(default)
                    };
                    let image = format!("{} ({})", field("name", "image"), field("mediaType", "?"));
                    self.labelled("Image:", &image);
                }
                Some("tool-result") => self.blocks(block.get("content"), Voice::Output),
                other => {
                    let out = self.buffer();
                    out.push(b'*');
                    inline(out, other.unwrap_or("unknown"));
                    out.extend_from_slice(b" block:*\n\n");
                    let json =
                        String::from_utf8(crate::json::pretty_line(block)).unwrap_or_default();
                    fenced(out, "json", &json);
                }
            }
        }
    }
}

/// A tool call: its name and id, its arguments pretty-printed as JSON, then
/// every multi-line string among them unescaped, so a patch or a script reads
/// as it would in a file (the JSON block keeps the arguments complete, as logged).
fn tool_call(out: &mut Vec<u8>, name: &str, id: &str, arguments: &str) {
    out.extend_from_slice(b"**Tool call** ");
    code_span(out, name);
    out.extend_from_slice(" · ".as_bytes());
    code_span(out, id);
    out.extend_from_slice(b"\n\n");
    if arguments.trim().is_empty() {
        return;
    }
    let Ok(value) = serde_json::from_str::<Value>(arguments) else {
        out.extend_from_slice(b"*Arguments (not valid JSON, as logged):*\n\n");
        fenced(out, "", arguments);
        return;
    };
    let json = serde_json::to_string_pretty(&value).unwrap_or_default();
    fenced(out, "json", &json);
    let mut path = String::new();
    multiline_strings(&value, &mut path, &mut |path, text| {
        code_span(out, path);
        out.extend_from_slice(b", unescaped:\n\n");
        fenced(out, if is_unified_diff(text) { "diff" } else { "" }, text);
    });
}

/// Calls `found` with the path (`edits[0].text`) and value of every string in
/// `value` that spans lines.
fn multiline_strings(value: &Value, path: &mut String, found: &mut impl FnMut(&str, &str)) {
    let len = path.len();
    match value {
        Value::String(text) if text.contains('\n') => {
            found(if path.is_empty() { "(arguments)" } else { path }, text)
        }
        Value::Object(map) => {
            for (key, item) in map {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                multiline_strings(item, path, found);
                path.truncate(len);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let _ = std::fmt::Write::write_fmt(path, format_args!("[{i}]"));
                multiline_strings(item, path, found);
                path.truncate(len);
            }
        }
        _ => {}
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

    fn text(writer: &TranscriptWriter) -> String {
        String::from_utf8(writer.shared().to_vec()).unwrap()
    }

    #[test]
    fn renders_turns_messages_and_compaction_markers() {
        let mut writer = TranscriptWriter::new("s");
        writer.event(
            &ev(r#"{"type":"turn/start","seq":0,"time":0,"data":{"turn":1}}"#),
            &SurfaceEffect::None,
        );
        writer.event(
            &ev(r#"{"type":"user/message","seq":1,"time":0,"data":{"content":[{"type":"text","text":"hello\nworld"}],"source":{"kind":"user"},"role":"user","id":"u"},"surfaceOp":"append"}"#),
            &SurfaceEffect::Appended,
        );
        writer.event(&ev(r#"{"type":"compaction/summary","seq":3,"time":0,"data":{"compactionId":"c1","summary":[{"type":"text","text":"they greeted"}]}}"#), &SurfaceEffect::None);
        let replacement = SurfaceEffect::Replaced(Replacement {
            seq: 4,
            start: 1,
            end: 1,
            shadowed: vec![1],
        });
        writer.event(
            &ev(r#"{"type":"user/message","seq":4,"time":0,"data":{"content":[],"source":{"kind":"plugin","plugin":"compact","compactionId":"c1"},"role":"user","id":"x"},"surfaceOp":{"op":"replace","start":1,"end":1},"sourceEventSeqs":[1,2,3]}"#),
            &replacement,
        );
        let text = text(&writer);
        assert!(text.starts_with("# Transcript of s\n\n## Turn 1\n\n"));
        assert!(text.contains("### [t1 #1] user · 1970-01-01T00:00:00.000Z\n\nhello\nworld\n\n"));
        assert!(text.contains("### [t1 #4] context compacted · "));
        assert!(text.contains(
            "**Summary** (written by the model, not said by the user):\n\n> they greeted\n\n"
        ));
    }

    #[test]
    fn tool_calls_show_json_and_unescaped_patches_and_results_are_fenced() {
        let mut writer = TranscriptWriter::new("s");
        let patch = "--- a/x.go\n+++ b/x.go\n@@ -1 +1 @@\n-a\n+b\n";
        let call = serde_json::json!({"type":"assistant/message","seq":5,"time":0,"data":{"message":{"role":"assistant","content":[
            {"type":"reasoning","text":"think\n```"},
            {"type":"tool-call","id":"c1","name":"apply_patch","arguments":serde_json::json!({"patch": patch}).to_string()},
            {"type":"tool-call","id":"c2","name":"sh","arguments":"{\"cmd\":"}
        ]}}});
        writer.event(call.as_object().unwrap(), &SurfaceEffect::Appended);
        let result = serde_json::json!({"type":"tool/result","seq":6,"time":0,"data":{"message":{"role":"user","source":{"kind":"tool","callId":"c1"},"content":[
            {"type":"tool-result","toolCallId":"c1","isError":true,"content":[{"type":"text","text":"\u{1b}[31mFAIL\u{1b}[0m\n```\n# not a heading"}]}
        ]}}});
        writer.event(result.as_object().unwrap(), &SurfaceEffect::Appended);
        let text = text(&writer);
        assert!(text.contains("*Reasoning:*\n\n> think\n> ```\n\n"));
        assert!(text.contains(
            "**Tool call** `apply_patch` · `c1`\n\n```json\n{\n  \"patch\": \"--- a/x.go\\n+++ b/x.go\\n@@ -1 +1 @@\\n-a\\n+b\\n\"\n}\n```\n\n"
        ));
        assert!(text.contains(&format!("`patch`, unescaped:\n\n```diff\n{patch}```\n\n")));
        assert!(
            text.contains("*Arguments (not valid JSON, as logged):*\n\n```\n{\"cmd\":\n```\n\n")
        );
        assert!(text.contains("### [#6] tool result `c1` · **error** · "));
        assert!(text.ends_with("````\nFAIL\n```\n# not a heading\n````\n\n"));
    }
}
