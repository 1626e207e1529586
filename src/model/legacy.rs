//! Legacy import conversions (spec §15, §15.1): the older event shapes that the
//! Harness converts in memory whenever it reads a log, so that a log written
//! before its message-identity and react-loop changes reads as current events.
//! The store is never rewritten; every reader of stored events converts.
//!
//! Each event goes through the turn-start, turn-end, steering and message rules
//! in that order. A converted event keeps the Harness's key order: a replaced
//! field keeps its place and new keys go last, as JS object spreads build them.
//! Shapes that match no supported form are corruption, refused with the
//! Harness's own sentence.

use serde_json::{Map, Value};

use crate::json::{JsonMap, non_negative_safe_integer, safe_integer};

/// A legacy shape that matches none of the forms the Harness converts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Malformed;

/// The Harness's refusal of a malformed legacy shape, byte for byte (the cause
/// that `readFrom` throws and that `inspect` and `load` wrap).
pub fn malformed_sentence(session_id: &str, event_type: &str, seq: u64) -> String {
    format!("session \"{session_id}\" contains malformed pre-react-loop {event_type} at seq {seq}")
}

/// The id minted for a message persisted before messages had ids.
pub fn legacy_message_id(session_id: &str, seq: u64) -> String {
    format!("legacy-message:{session_id}:{seq}")
}

/// Every key of `map` is in `required` or `optional`, and every required key is there.
fn has_only_keys(map: &JsonMap, required: &[&str], optional: &[&str]) -> bool {
    map.keys()
        .all(|k| required.contains(&k.as_str()) || optional.contains(&k.as_str()))
        && required.iter().all(|k| map.contains_key(*k))
}

fn safe_integer_at_least(value: Option<&Value>, min: i64) -> bool {
    value.and_then(safe_integer).is_some_and(|i| i >= min)
}

/// `turn/start` data with a `trigger` key becomes `{turn}`; `None` leaves the
/// data as it is.
pub fn convert_turn_start(data: &Value) -> Result<Option<JsonMap>, Malformed> {
    let Some(data) = data.as_object().filter(|d| d.contains_key("trigger")) else {
        return Ok(None);
    };
    let trigger_kind = data
        .get("trigger")
        .and_then(Value::as_object)
        .and_then(|t| t.get("kind"))
        .and_then(Value::as_str);
    if !safe_integer_at_least(data.get("turn"), 1)
        || !has_only_keys(data, &["turn", "trigger"], &[])
        || trigger_kind.is_none_or(str::is_empty)
    {
        return Err(Malformed);
    }
    let mut converted = Map::new();
    converted.insert("turn".into(), data["turn"].clone());
    Ok(Some(converted))
}

/// The `turn/end` rules (spec §15.1), which every log, legacy or current, must
/// pass: `{turn ≥ 1, reason:{kind}}`, the four plain kinds with no other keys,
/// and the old `aborted`, `disposed` and `error` reasons converted. `None`
/// leaves the data as it is.
pub fn convert_turn_end(data: &Value) -> Result<Option<JsonMap>, Malformed> {
    let data = data.as_object().ok_or(Malformed)?;
    let reason = data.get("reason").and_then(Value::as_object);
    if !safe_integer_at_least(data.get("turn"), 1) || !has_only_keys(data, &["turn", "reason"], &[])
    {
        return Err(Malformed);
    }
    let reason = reason.ok_or(Malformed)?;
    let kind = reason
        .get("kind")
        .and_then(Value::as_str)
        .ok_or(Malformed)?;
    let only_kind = has_only_keys(reason, &["kind"], &[]);
    let converted = match kind {
        "completed" | "blocked" | "max-tokens" | "interrupted" => {
            return if only_kind { Ok(None) } else { Err(Malformed) };
        }
        // An aborted reason that already says why is the current shape, unchecked.
        "aborted" if reason.contains_key("reason") => return Ok(None),
        "aborted" | "disposed" if !only_kind => return Err(Malformed),
        "aborted" => aborted_because("legacy"),
        "disposed" => aborted_because("disposed"),
        // An error reason that already carries its error is the current shape, unchecked.
        "error" if reason.contains_key("error") => return Ok(None),
        "error" => convert_error_reason(reason)?,
        _ => return Ok(None),
    };
    let mut out = data.clone();
    out.insert("reason".into(), Value::Object(converted));
    Ok(Some(out))
}

fn aborted_because(why: &str) -> JsonMap {
    let mut inner = Map::new();
    inner.insert("kind".into(), why.into());
    let mut reason = Map::new();
    reason.insert("kind".into(), "aborted".into());
    reason.insert("reason".into(), Value::Object(inner));
    reason
}

/// The two old `error` reasons: `{kind, step, failure}` and `{kind, step,
/// message, code?}`; anything else is malformed.
fn convert_error_reason(reason: &JsonMap) -> Result<JsonMap, Malformed> {
    if !safe_integer_at_least(reason.get("step"), 0) {
        return Err(Malformed);
    }
    let mut converted = Map::new();
    converted.insert("kind".into(), "error".into());
    if let Some(failure) = reason.get("failure").and_then(Value::as_object)
        && has_only_keys(reason, &["kind", "step", "failure"], &[])
        && is_old_failure(failure)
    {
        converted.insert("error".into(), Value::Object(failure.clone()));
        return Ok(converted);
    }
    let code = reason.get("code");
    let keys: &[&str] = match code {
        None => &["kind", "step", "message"],
        Some(_) => &["kind", "step", "message", "code"],
    };
    let message = reason.get("message").filter(|m| m.is_string());
    if !has_only_keys(reason, keys, &[])
        || message.is_none()
        || code.is_some_and(|c| !c.is_string())
    {
        return Err(Malformed);
    }
    let mut error = Map::new();
    error.insert("message".into(), message.cloned().unwrap_or_default());
    error.insert(
        "code".into(),
        code.cloned().unwrap_or_else(|| "UNKNOWN".into()),
    );
    converted.insert("error".into(), Value::Object(error));
    Ok(converted)
}

/// An old `LlmFailure`: string `message` and `code`, and at most a number
/// `status`, a number `providerRetryAfterMs` and a string `requestId`.
fn is_old_failure(failure: &JsonMap) -> bool {
    let optional = ["status", "providerRetryAfterMs", "requestId"];
    let absent_or = |key: &str, check: fn(&Value) -> bool| failure.get(key).is_none_or(check);
    has_only_keys(failure, &["message", "code"], &optional)
        && failure["message"].is_string()
        && failure["code"].is_string()
        && absent_or("status", Value::is_number)
        && absent_or("providerRetryAfterMs", Value::is_number)
        && absent_or("requestId", Value::is_string)
}

/// A `steering/message`'s data as the `user/message` it becomes: the wrapped
/// message of `{turn, message}`, or `{content, source}` of `{turn, content,
/// source}` with the legacy id and role added.
pub fn convert_steering(data: &Value, legacy_id: &str) -> Result<Value, Malformed> {
    let data = data.as_object().ok_or(Malformed)?;
    let turn_ok = data.get("turn").and_then(safe_integer).is_some();
    if let Some(wrapped) = data.get("message").filter(|m| m.is_object())
        && turn_ok
        && has_only_keys(data, &["turn", "message"], &[])
    {
        return Ok(wrapped.clone());
    }
    if !turn_ok || !has_only_keys(data, &["turn", "content", "source"], &[]) {
        return Err(Malformed);
    }
    let mut message: JsonMap = data
        .iter()
        .filter(|(k, _)| k.as_str() != "turn")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    message.insert("id".into(), legacy_id.into());
    message.insert("role".into(), "user".into());
    Ok(Value::Object(message))
}

/// A flat pre-identity `user/message` (`content` and `source`, no `id`, `role`
/// or `message`) gains the legacy id and the user role.
pub fn convert_user_message(data: &JsonMap, legacy_id: &str) -> Option<JsonMap> {
    if ["id", "role", "message"]
        .iter()
        .any(|k| data.contains_key(*k))
        || !data.contains_key("content")
        || !data.contains_key("source")
    {
        return None;
    }
    let mut out = data.clone();
    out.insert("id".into(), legacy_id.into());
    out.insert("role".into(), "user".into());
    Some(out)
}

/// A flat pre-identity `assistant/message` (`content` and `provenance`, no
/// `message`): its other fields stay, and its content and provenance become a
/// model message.
pub fn convert_assistant_message(data: &JsonMap, legacy_id: &str) -> Option<JsonMap> {
    if data.contains_key("message") || !data.contains_key("content") {
        return None;
    }
    let provenance = data.get("provenance")?;
    let mut source = provenance.as_object().cloned().unwrap_or_default();
    source.insert("kind".into(), "model".into());
    let mut message = Map::new();
    message.insert("id".into(), legacy_id.into());
    message.insert("role".into(), "assistant".into());
    message.insert("content".into(), data["content"].clone());
    message.insert("source".into(), Value::Object(source));
    let mut out = without(data, &["content", "provenance"]);
    out.insert("message".into(), Value::Object(message));
    Some(out)
}

/// A flat pre-identity `tool/result` (`callId`, `content` and `isError`, no
/// `message`): its other fields stay, and the rest becomes a tool message with
/// `id`. A replacement inherits the id of the event it replaces, and has none
/// (so validation refuses it) when that event had none.
pub fn convert_tool_result(data: &JsonMap, id: Option<&str>) -> Option<JsonMap> {
    if data.contains_key("message")
        || !["callId", "content", "isError"]
            .iter()
            .all(|k| data.contains_key(*k))
    {
        return None;
    }
    let call_id = data["callId"].clone();
    let mut block = Map::new();
    block.insert("type".into(), "tool-result".into());
    block.insert("toolCallId".into(), call_id.clone());
    block.insert("content".into(), data["content"].clone());
    block.insert("isError".into(), data["isError"].clone());
    let mut source = Map::new();
    source.insert("kind".into(), "tool".into());
    source.insert("callId".into(), call_id);
    let mut message = Map::new();
    if let Some(id) = id {
        message.insert("id".into(), id.into());
    }
    message.insert("role".into(), "user".into());
    message.insert("content".into(), Value::Array(vec![Value::Object(block)]));
    message.insert("source".into(), Value::Object(source));
    let mut out = without(data, &["callId", "content", "isError"]);
    out.insert("message".into(), Value::Object(message));
    Some(out)
}

fn without(data: &JsonMap, keys: &[&str]) -> JsonMap {
    data.iter()
        .filter(|(k, _)| !keys.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The seq a replacement starts at, when its `surfaceOp` is a replace with a
/// numeric start (anything else is left to the surface checks).
fn replacement_start(event: &JsonMap) -> Option<Option<u64>> {
    let op = event.get("surfaceOp")?.as_object()?;
    if op.get("op").and_then(Value::as_str) != Some("replace") {
        return None;
    }
    let start = op.get("start").filter(|s| s.is_number())?;
    Some(non_negative_safe_integer(start))
}

/// The id of the message an event carries: `data.id` of a `user/message`,
/// `data.message.id` of any other event.
pub fn event_message_id(event: &JsonMap) -> Option<&str> {
    let data = event.get("data")?;
    let message = match event.get("type")?.as_str()? {
        "user/message" => data,
        _ => data.get("message")?,
    };
    message.get("id")?.as_str()
}

/// The message ids of a log's events by seq, as far as it was read: a flat
/// replacement takes the id of the event it replaces.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct MessageIds {
    /// In seq order.
    ids: Vec<(u64, Box<str>)>,
    /// Bytes of the ids' text, for the cache budget.
    text_bytes: usize,
}

impl MessageIds {
    /// Records the id of an event as converted (seqs arrive in increasing order).
    pub fn record(&mut self, seq: u64, event: &JsonMap) {
        if let Some(id) = event_message_id(event)
            && self.ids.last().is_none_or(|(last, _)| *last < seq)
        {
            self.ids.push((seq, id.into()));
            self.text_bytes += id.len();
        }
    }

    /// Approximate memory held, for the cache budget.
    pub fn memory(&self) -> usize {
        self.ids.capacity() * std::mem::size_of::<(u64, Box<str>)>() + self.text_bytes
    }

    /// Returns the spare room of a first scan's growing buffer.
    pub fn shrink(&mut self) {
        self.ids.shrink_to_fit();
    }

    /// The message id recorded for event `seq`, if it had one.
    pub fn get(&self, seq: u64) -> Option<&str> {
        let at = self.ids.binary_search_by_key(&seq, |(s, _)| *s).ok()?;
        Some(&self.ids[at].1)
    }
}

/// Converts one stored event (whose envelope was checked and whose seq is
/// `seq`). `Ok(None)`: the event is current and is read as stored. `Err`
/// holds the Harness's sentence for a malformed legacy shape.
pub fn convert_event(
    session_id: &str,
    ids: &MessageIds,
    seq: u64,
    event: &JsonMap,
) -> Result<Option<JsonMap>, String> {
    let event_type = event.get("type").and_then(Value::as_str).unwrap_or("");
    let data = event.get("data").unwrap_or(&Value::Null);
    let malformed = |_| malformed_sentence(session_id, event_type, seq);
    let legacy_id = || legacy_message_id(session_id, seq);
    let with_data = |new_type: Option<&str>, data: Value| {
        let mut out = event.clone();
        if let Some(new_type) = new_type {
            out.insert("type".into(), new_type.into());
        }
        out.insert("data".into(), data);
        out
    };
    let mut converted = match event_type {
        "turn/start" => convert_turn_start(data)
            .map_err(malformed)?
            .map(|d| with_data(None, Value::Object(d))),
        "turn/end" => convert_turn_end(data)
            .map_err(malformed)?
            .map(|d| with_data(None, Value::Object(d))),
        "steering/message" => Some(with_data(
            Some("user/message"),
            convert_steering(data, &legacy_id()).map_err(malformed)?,
        )),
        _ => None,
    };
    // The message rules see the event as the earlier rules left it.
    let current = converted.as_ref().unwrap_or(event);
    let Some(data) = current.get("data").and_then(Value::as_object) else {
        return Ok(converted);
    };
    let message_data = match current.get("type").and_then(Value::as_str) {
        Some("user/message") => convert_user_message(data, &legacy_id()),
        Some("assistant/message") => convert_assistant_message(data, &legacy_id()),
        Some("tool/result") => {
            let id = match replacement_start(current) {
                Some(start) => start.and_then(|s| ids.get(s)).map(str::to_owned),
                None => Some(legacy_id()),
            };
            convert_tool_result(data, id.as_deref())
        }
        _ => None,
    };
    if let Some(message_data) = message_data {
        let mut out = converted.take().unwrap_or_else(|| event.clone());
        out.insert("data".into(), Value::Object(message_data));
        converted = Some(out);
    }
    Ok(converted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> JsonMap {
        v.as_object().unwrap().clone()
    }

    /// Compact JSON text, which shows key order.
    fn text(v: &impl serde::Serialize) -> String {
        serde_json::to_string(v).unwrap()
    }

    fn convert(event: Value) -> Result<Option<JsonMap>, String> {
        convert_event("s", &MessageIds::default(), 7, &map(event))
    }

    fn converted(event: Value) -> String {
        text(&convert(event).unwrap().expect("converted"))
    }

    #[test]
    fn turn_start_drops_a_well_formed_trigger() {
        assert_eq!(
            converted(json!({"type": "turn/start", "seq": 7, "time": 1,
                "data": {"turn": 2, "trigger": {"kind": "retry"}}})),
            r#"{"type":"turn/start","seq":7,"time":1,"data":{"turn":2}}"#
        );
        assert_eq!(convert_turn_start(&json!({"turn": 2})), Ok(None));
    }

    #[test]
    fn turn_start_with_a_malformed_trigger_is_refused() {
        for data in [
            json!({"turn": 1, "trigger": "retry"}),
            json!({"turn": 1, "trigger": {"kind": ""}}),
            json!({"turn": 1, "trigger": {"source": {}}}),
            json!({"turn": 0, "trigger": {"kind": "message"}}),
            json!({"turn": 1.5, "trigger": {"kind": "message"}}),
            json!({"trigger": {"kind": "message"}}),
            json!({"turn": 1, "trigger": {"kind": "message"}, "step": 1}),
        ] {
            assert_eq!(convert_turn_start(&data), Err(Malformed), "{data}");
        }
        assert_eq!(
            convert(json!({"type": "turn/start", "seq": 7, "time": 1,
                "data": {"turn": 1, "trigger": "retry"}})),
            Err(r#"session "s" contains malformed pre-react-loop turn/start at seq 7"#.into())
        );
    }

    fn turn_end(reason: Value) -> Result<Option<String>, Malformed> {
        convert_turn_end(&json!({"turn": 3, "reason": reason}))
            .map(|d| d.map(|d| text(&d["reason"])))
    }

    #[test]
    fn turn_end_bare_aborted_becomes_a_legacy_abort() {
        assert_eq!(
            turn_end(json!({"kind": "aborted"})),
            Ok(Some(
                r#"{"kind":"aborted","reason":{"kind":"legacy"}}"#.into()
            ))
        );
        // Already current: unchanged and unchecked.
        assert_eq!(
            turn_end(json!({"kind": "aborted", "reason": {"kind": "user"}, "x": 1})),
            Ok(None)
        );
        assert_eq!(
            turn_end(json!({"kind": "aborted", "step": 1})),
            Err(Malformed)
        );
    }

    #[test]
    fn turn_end_disposed_becomes_a_disposed_abort() {
        assert_eq!(
            turn_end(json!({"kind": "disposed"})),
            Ok(Some(
                r#"{"kind":"aborted","reason":{"kind":"disposed"}}"#.into()
            ))
        );
        assert_eq!(
            turn_end(json!({"kind": "disposed", "step": 2})),
            Err(Malformed)
        );
    }

    #[test]
    fn turn_end_old_failure_becomes_the_error() {
        assert_eq!(
            turn_end(json!({"kind": "error", "step": 2, "failure": {"message": "m", "code": "C",
                "status": 429, "providerRetryAfterMs": 10, "requestId": "r"}})),
            Ok(Some(
                r#"{"kind":"error","error":{"message":"m","code":"C","status":429,"providerRetryAfterMs":10,"requestId":"r"}}"#
                    .into()
            ))
        );
        for failure in [
            json!({"message": "m", "code": "C", "retryable": true}),
            json!({"message": "m"}),
            json!({"message": "m", "code": 5}),
            json!({"message": "m", "code": "C", "status": "429"}),
            json!({"message": "m", "code": "C", "requestId": 1}),
        ] {
            assert_eq!(
                turn_end(json!({"kind": "error", "step": 2, "failure": failure})),
                Err(Malformed),
                "{failure}"
            );
        }
    }

    #[test]
    fn turn_end_old_message_error_gets_a_code() {
        assert_eq!(
            turn_end(json!({"kind": "error", "step": 0, "message": "m", "code": "E"})),
            Ok(Some(
                r#"{"kind":"error","error":{"message":"m","code":"E"}}"#.into()
            ))
        );
        assert_eq!(
            turn_end(json!({"kind": "error", "step": 1, "message": "m"})),
            Ok(Some(
                r#"{"kind":"error","error":{"message":"m","code":"UNKNOWN"}}"#.into()
            ))
        );
        for reason in [
            json!({"kind": "error", "step": 1, "message": "m", "code": null}),
            json!({"kind": "error", "step": 1, "message": 5}),
            json!({"kind": "error", "message": "m"}),
            json!({"kind": "error", "step": -1, "message": "m"}),
            json!({"kind": "error", "step": 1, "message": "m", "extra": 1}),
            json!({"kind": "error", "step": 1, "failure": {"message": "m", "code": "C"}, "message": "m"}),
        ] {
            assert_eq!(turn_end(reason.clone()), Err(Malformed), "{reason}");
        }
        // Already current: unchanged, a stray step and all.
        assert_eq!(
            turn_end(json!({"kind": "error", "step": 1, "error": {"message": "m"}})),
            Ok(None)
        );
    }

    #[test]
    fn turn_end_envelope_and_plain_kinds() {
        assert_eq!(turn_end(json!({"kind": "completed"})), Ok(None));
        assert_eq!(turn_end(json!({"kind": "max-tokens"})), Ok(None));
        assert_eq!(turn_end(json!({"kind": "handoff", "to": "x"})), Ok(None));
        assert_eq!(
            turn_end(json!({"kind": "completed", "x": 1})),
            Err(Malformed)
        );
        assert_eq!(turn_end(json!({"kind": 5})), Err(Malformed));
        for data in [
            json!({"turn": 1, "step": 1, "reason": {"kind": "completed"}}),
            json!({"turn": 0, "reason": {"kind": "completed"}}),
            json!({"turn": 1}),
            json!({"turn": 1, "reason": "completed"}),
            json!(7),
        ] {
            assert_eq!(convert_turn_end(&data), Err(Malformed), "{data}");
        }
        // The converted reason keeps its place among the data's keys.
        assert_eq!(
            text(
                &convert_turn_end(&json!({"reason": {"kind": "disposed"}, "turn": 1}))
                    .unwrap()
                    .unwrap()
            ),
            r#"{"reason":{"kind":"aborted","reason":{"kind":"disposed"}},"turn":1}"#
        );
    }

    #[test]
    fn wrapped_steering_becomes_its_message() {
        assert_eq!(
            converted(json!({"type": "steering/message", "seq": 7, "time": 1,
                "data": {"turn": 1, "message": {"content": [], "source": {"kind": "user"},
                    "role": "user", "id": "u"}}, "surfaceOp": "append"})),
            r#"{"type":"user/message","seq":7,"time":1,"data":{"content":[],"source":{"kind":"user"},"role":"user","id":"u"},"surfaceOp":"append"}"#
        );
        // A wrapped flat message is converted twice: then by the user/message rule.
        assert_eq!(
            converted(json!({"type": "steering/message", "seq": 7, "time": 1,
                "data": {"turn": 1, "message": {"content": [], "source": {"kind": "user"}}}})),
            r#"{"type":"user/message","seq":7,"time":1,"data":{"content":[],"source":{"kind":"user"},"id":"legacy-message:s:7","role":"user"}}"#
        );
    }

    #[test]
    fn flat_steering_becomes_a_user_message() {
        assert_eq!(
            converted(json!({"type": "steering/message", "seq": 7, "time": 1,
                "data": {"turn": 1, "content": [], "source": {"kind": "user"}}})),
            r#"{"type":"user/message","seq":7,"time":1,"data":{"content":[],"source":{"kind":"user"},"id":"legacy-message:s:7","role":"user"}}"#
        );
    }

    #[test]
    fn malformed_steering_is_refused() {
        for data in [
            json!({"message": {"content": []}}),
            json!({"turn": "1", "message": {"content": []}}),
            json!({"turn": 1, "message": "hi"}),
            json!({"turn": 1, "message": {}, "extra": 1}),
            json!({"turn": 1, "content": []}),
            json!({"turn": 1.5, "content": [], "source": {}}),
            json!([1]),
        ] {
            assert_eq!(convert_steering(&data, "id"), Err(Malformed), "{data}");
        }
        assert_eq!(
            convert(
                json!({"type": "steering/message", "seq": 7, "time": 1, "data": {"message": {}}})
            ),
            Err(
                r#"session "s" contains malformed pre-react-loop steering/message at seq 7"#.into()
            )
        );
    }

    #[test]
    fn flat_user_message_gets_an_id_and_role() {
        assert_eq!(
            text(
                &convert_user_message(
                    &map(json!({"content": [], "source": {"kind": "user"}})),
                    "L"
                )
                .unwrap()
            ),
            r#"{"content":[],"source":{"kind":"user"},"id":"L","role":"user"}"#
        );
        for current in [
            json!({"content": [], "source": {}, "role": "user", "id": "u"}),
            json!({"content": [], "source": {}, "id": "u"}),
            json!({"content": [], "source": {}, "role": "user"}),
            json!({"content": []}),
            json!({"source": {}}),
        ] {
            assert_eq!(
                convert_user_message(&map(current.clone()), "L"),
                None,
                "{current}"
            );
        }
    }

    #[test]
    fn flat_assistant_message_becomes_a_model_message() {
        let data = map(
            json!({"turn": 1, "step": 2, "content": [{"type": "text", "text": "t"}],
            "provenance": {"provider": "p", "kind": "x", "model": "m"}, "usage": {"inputTokens": 1}}),
        );
        assert_eq!(
            text(&convert_assistant_message(&data, "L").unwrap()),
            r#"{"turn":1,"step":2,"usage":{"inputTokens":1},"message":{"id":"L","role":"assistant","content":[{"type":"text","text":"t"}],"source":{"provider":"p","kind":"model","model":"m"}}}"#
        );
        // A provenance that is no object leaves only the kind.
        let odd = map(json!({"content": [], "provenance": 5}));
        assert_eq!(
            text(&convert_assistant_message(&odd, "L").unwrap()),
            r#"{"message":{"id":"L","role":"assistant","content":[],"source":{"kind":"model"}}}"#
        );
        assert_eq!(
            convert_assistant_message(&map(json!({"content": []})), "L"),
            None
        );
        assert_eq!(
            convert_assistant_message(
                &map(json!({"content": [], "provenance": {}, "message": {}})),
                "L"
            ),
            None
        );
    }

    #[test]
    fn flat_tool_result_becomes_a_tool_message() {
        let data = map(json!({"turn": 1, "step": 1, "callId": "c", "content": [],
            "isError": false, "error": {"name": "E"}, "meta": {"k": 1}}));
        assert_eq!(
            text(&convert_tool_result(&data, Some("L")).unwrap()),
            r#"{"turn":1,"step":1,"error":{"name":"E"},"meta":{"k":1},"message":{"id":"L","role":"user","content":[{"type":"tool-result","toolCallId":"c","content":[],"isError":false}],"source":{"kind":"tool","callId":"c"}}}"#
        );
        assert_eq!(
            convert_tool_result(&map(json!({"callId": "c", "content": []})), Some("L")),
            None
        );
    }

    #[test]
    fn a_flat_replacement_inherits_the_replaced_id() {
        let mut ids = MessageIds::default();
        let flat = |seq: u64, op: Value| {
            map(json!({"type": "tool/result", "seq": seq, "time": 1,
                "data": {"callId": "c", "content": [], "isError": false}, "surfaceOp": op}))
        };
        let first = convert_event("s", &ids, 3, &flat(3, json!("append")))
            .unwrap()
            .unwrap();
        ids.record(3, &first);
        let replace = json!({"op": "replace", "start": 3, "end": 3});
        let second = convert_event("s", &ids, 9, &flat(9, replace))
            .unwrap()
            .unwrap();
        assert_eq!(event_message_id(&second), Some("legacy-message:s:3"));
        ids.record(9, &second);
        // A chain keeps the first id.
        let replace = json!({"op": "replace", "start": 9, "end": 9});
        let third = convert_event("s", &ids, 12, &flat(12, replace))
            .unwrap()
            .unwrap();
        assert_eq!(event_message_id(&third), Some("legacy-message:s:3"));
        // A start with no recorded id gives a message without one.
        let replace = json!({"op": "replace", "start": 5, "end": 5});
        let orphan = convert_event("s", &ids, 13, &flat(13, replace))
            .unwrap()
            .unwrap();
        assert_eq!(event_message_id(&orphan), None);
        assert!(orphan["data"]["message"].get("role").is_some());
    }

    #[test]
    fn current_events_and_old_compaction_types_pass_unconverted() {
        for event in [
            json!({"type": "user/message", "seq": 7, "time": 1,
                "data": {"content": [], "source": {"kind": "user"}, "role": "user", "id": "u"}}),
            json!({"type": "turn/start", "seq": 7, "time": 1, "data": {"turn": 1}}),
            json!({"type": "compact/summary", "seq": 7, "time": 1, "data": {"summary": "s"}}),
            json!({"type": "step/start", "seq": 7, "time": 1, "data": 5}),
        ] {
            assert_eq!(convert(event.clone()), Ok(None), "{event}");
        }
    }
}
