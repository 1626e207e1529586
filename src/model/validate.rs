//! Per-event checks the Harness makes when it builds a session from a stored log:
//! the envelope (spec §2.1), retired shapes (§2.6), the type vocabulary (§2.5)
//! and message and request-header shapes (§3.12). The `turn/end` rules are part
//! of the legacy conversions (`legacy.rs`, spec §15.1).

use serde_json::Value;

use crate::json::{JsonMap, non_negative_safe_integer, safe_integer, str_field};

/// The type of a streamed model-output chunk, alone or packed in rows (spec §10.4).
pub const CHUNK_TYPE: &str = "assistant/chunk";

/// The 48 event types of the reference Harness build (spec §3.11).
pub const KNOWN_EVENT_TYPES: [&str; 48] = [
    "user/message",
    "assistant/message",
    "tool/result",
    "turn/start",
    "turn/end",
    "step/start",
    "step/end",
    "assistant/chunk",
    "tool/call",
    "todo/write",
    "request/header",
    "request/context",
    "session/end-seed",
    "compaction/start",
    "compaction/summary",
    "compaction/prune",
    "compaction/end",
    "agent/inbox/spliced",
    "agent-preset/selected",
    "approval/asked",
    "approval/decided",
    "approval/policy",
    "command/run",
    "command/done",
    "feedback/record",
    "goal/change",
    "hook/invoked",
    "hook/result",
    "llm/retry",
    "llm/retry-started",
    "permission/preset",
    "plan/mode",
    "sandbox/mode",
    "schedule/change",
    "session/title",
    "session/title-llm-request",
    "subagent/descriptor",
    "team/member",
    "team/message/delivered",
    "team/message/queued",
    "team/task",
    "tool-workflow/run-start",
    "tool-workflow/run-end",
    "tool-workflow/agent-start",
    "tool-workflow/agent-end",
    "tool/code-dispatch-start",
    "tool/code-dispatch",
    "web/deepseek-search-llm-request",
];

/// True for the event types of the reference Harness build ([`KNOWN_EVENT_TYPES`]).
pub fn is_known_type(event_type: &str) -> bool {
    KNOWN_EVENT_TYPES.contains(&event_type)
}

/// The three types that can put a message on the surface.
pub fn is_surface_type(event_type: &str) -> bool {
    matches!(
        event_type,
        "user/message" | "assistant/message" | "tool/result"
    )
}

const ENVELOPE_KEYS: [&str; 7] = [
    "type",
    "seq",
    "time",
    "data",
    "ignorable",
    "surfaceOp",
    "sourceEventSeqs",
];

/// Envelope checks (spec §2.1). Returns the event's seq.
pub fn check_envelope(event: &JsonMap) -> Result<u64, String> {
    if let Some(key) = event.keys().find(|k| !ENVELOPE_KEYS.contains(&k.as_str())) {
        return Err(format!("invalid event envelope: unexpected key {key:?}"));
    }
    if !event.get("type").is_some_and(Value::is_string) {
        return Err("invalid event envelope: type is not a string".into());
    }
    let seq = event
        .get("seq")
        .and_then(non_negative_safe_integer)
        .ok_or("invalid event envelope: seq is not a non-negative safe integer")?;
    if event.get("time").and_then(safe_integer).is_none() {
        return Err("invalid event envelope: time is not a safe integer".into());
    }
    if !event.contains_key("data") {
        return Err("invalid event envelope: data is missing".into());
    }
    if event
        .get("ignorable")
        .is_some_and(|v| v != &Value::Bool(true))
    {
        return Err("invalid event envelope: ignorable must be exactly true".into());
    }
    Ok(seq)
}

/// True when the event is marked `"ignorable": true`.
pub fn is_ignorable(event: &JsonMap) -> bool {
    event.get("ignorable") == Some(&Value::Bool(true))
}

/// The refusal of an unknown type that is not marked ignorable (spec §2.5), byte for byte.
pub fn unknown_type_refusal(session_id: &str, event_type: &str, seq: u64) -> String {
    format!(
        "session \"{session_id}\" contains event type \"{event_type}\" (seq {seq}) unknown to this harness and not marked ignorable; refusing to interpret the log \u{2014} it was likely written by a newer harness"
    )
}

/// Retired shapes that are always rejected (spec §2.6).
pub fn check_retired(event_type: &str, data: &Value) -> Result<(), String> {
    match event_type {
        "request/header-delta" | "mode/set" => Err(format!("retired event type {event_type:?}")),
        "request/header" if data.get("reason").and_then(Value::as_str) == Some("fallback") => {
            Err("retired request/header reason \"fallback\"".into())
        }
        _ => Ok(()),
    }
}

fn non_empty_str(map: &JsonMap, key: &str) -> bool {
    str_field(map, key).is_some_and(|s| !s.is_empty())
}

/// The message a surface event carries: `data` for `user/message`, `data.message` otherwise.
pub fn surface_message<'a>(event_type: &str, data: &'a Value) -> Option<&'a Value> {
    match event_type {
        "user/message" => Some(data),
        "assistant/message" | "tool/result" => data.get("message"),
        _ => None,
    }
}

/// Message shape checks for the three surface types (spec §3.12).
pub fn check_message_shape(event_type: &str, data: &Value) -> Result<(), String> {
    let bad = |why: &str| Err(format!("{event_type} message {why}"));
    let Some(message) = surface_message(event_type, data).and_then(Value::as_object) else {
        return bad("is not an object");
    };
    if !non_empty_str(message, "id") {
        return bad("has no non-empty string id");
    }
    let role = if event_type == "assistant/message" {
        "assistant"
    } else {
        "user"
    };
    if str_field(message, "role") != Some(role) {
        return bad(&format!("role is not {role:?}"));
    }
    let Some(source) = message
        .get("source")
        .and_then(Value::as_object)
        .filter(|s| non_empty_str(s, "kind"))
    else {
        return bad("source has no non-empty string kind");
    };
    let Some(content) = message.get("content").and_then(Value::as_array) else {
        return bad("content is not an array");
    };
    match event_type {
        "assistant/message"
            if str_field(source, "kind") != Some("model")
                || !non_empty_str(source, "provider")
                || !non_empty_str(source, "model") =>
        {
            return bad("source is not a model source with provider and model");
        }
        "tool/result" => {
            let call_id = str_field(source, "callId").filter(|s| !s.is_empty());
            if str_field(source, "kind") != Some("tool") || call_id.is_none() {
                return bad("source is not a tool source with a callId");
            }
            let block = match content.as_slice() {
                [Value::Object(block)] => block,
                _ => return bad("content is not exactly one block"),
            };
            if str_field(block, "type") != Some("tool-result")
                || !block.get("content").is_some_and(Value::is_array)
            {
                return bad("content block is not a tool-result block with content");
            }
            if str_field(block, "toolCallId") != call_id {
                return bad("tool-result toolCallId differs from source.callId");
            }
        }
        _ => {}
    }
    Ok(())
}

/// `request/header` checks (spec §3.12).
pub fn check_request_header(data: &Value) -> Result<(), String> {
    let bad = |why: &str| Err(format!("request/header {why}"));
    let Some(header) = data.get("header").and_then(Value::as_object) else {
        return bad("has no header object");
    };
    let Some(config) = header.get("config").and_then(Value::as_object) else {
        return bad("has no config object");
    };
    if !non_empty_str(config, "provider") || !non_empty_str(config, "model") {
        return bad("config lacks a non-empty provider or model");
    }
    if config
        .get("reasoningEffort")
        .is_some_and(|v| v.as_str().is_none_or(str::is_empty))
    {
        return bad("config.reasoningEffort is not a non-empty string");
    }
    if let Some(defaults) = header.get("adapterDefaults") {
        let Some(defaults) = defaults.as_object() else {
            return bad("adapterDefaults is not an object");
        };
        for (key, value) in defaults {
            if !matches!(key.as_str(), "reasoningEffort" | "maxTokens")
                || value != &Value::Bool(true)
                || !config.contains_key(key)
            {
                return bad("adapterDefaults marks a field that is not a defaulted config value");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> JsonMap {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn envelope_rules() {
        assert_eq!(
            check_envelope(&map(
                json!({"type": "t", "seq": 3, "time": -5, "data": null})
            )),
            Ok(3)
        );
        for bad in [
            json!({"type": "t", "seq": 0, "time": 0}),
            json!({"type": "t", "seq": -1, "time": 0, "data": 1}),
            json!({"type": "t", "seq": 0, "time": 1.5, "data": 1}),
            json!({"type": 1, "seq": 0, "time": 0, "data": 1}),
            json!({"type": "t", "seq": 0, "time": 0, "data": 1, "ignorable": false}),
            json!({"type": "t", "seq": 0, "time": 0, "data": 1, "extra": 1}),
        ] {
            assert!(check_envelope(&map(bad.clone())).is_err(), "{bad}");
        }
    }

    #[test]
    fn message_shapes() {
        let user = json!({"content": [], "source": {"kind": "user"}, "role": "user", "id": "u"});
        assert!(check_message_shape("user/message", &user).is_ok());
        assert!(
            check_message_shape(
                "user/message",
                &json!({"content": [], "source": {"kind": "user"}, "role": "user", "id": ""})
            )
            .is_err()
        );
        let result = json!({"message": {"source": {"kind": "tool", "callId": "c"}, "content": [{"type": "tool-result", "toolCallId": "c", "content": []}], "role": "user", "id": "t"}});
        assert!(check_message_shape("tool/result", &result).is_ok());
        let mismatched = json!({"message": {"source": {"kind": "tool", "callId": "c"}, "content": [{"type": "tool-result", "toolCallId": "d", "content": []}], "role": "user", "id": "t"}});
        assert!(check_message_shape("tool/result", &mismatched).is_err());
        let assistant = json!({"message": {"role": "assistant", "content": [], "source": {"kind": "model", "provider": "p"}, "id": "a"}});
        assert!(check_message_shape("assistant/message", &assistant).is_err());
    }

    #[test]
    fn request_header_and_retired_shapes() {
        assert!(
            check_request_header(
                &json!({"header": {"config": {"provider": "p", "model": "m"}}, "reason": "initial"})
            )
            .is_ok()
        );
        assert!(check_request_header(&json!({"header": {"config": {"provider": "p", "model": "m"}, "adapterDefaults": {"maxTokens": true}}})).is_err());
        assert!(check_retired("mode/set", &json!({})).is_err());
        assert!(check_retired("request/header", &json!({"reason": "fallback"})).is_err());
        assert!(check_retired("request/header", &json!({"reason": "change"})).is_ok());
        assert_eq!(KNOWN_EVENT_TYPES.len(), 48);
    }
}
