//! The surface fold (spec §5): the ordered list of seqs whose messages the model
//! reads now. Appends add a node; a replace swaps an inclusive range of current
//! nodes for the replacing event. Every rule of spec §5.3 is checked, in the
//! Harness's order, and a failure names the seq and the rule.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use serde_json::Value;

use crate::json::{JsonMap, canonical_text, non_negative_safe_integer};
use crate::model::validate::is_surface_type;

/// How a surface event joins the surface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SurfaceOp {
    /// Adds the event as a new node at the end.
    Append,
    /// Swaps the current nodes from `start` to `end` (inclusive) for the event.
    Replace {
        /// The seq of the first node replaced.
        start: u64,
        /// The seq of the last node replaced.
        end: u64,
    },
}

/// One committed replacement, as the Harness's full fold reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replacement {
    /// The replacing event's seq.
    pub seq: u64,
    /// The seq of the first node it replaced.
    pub start: u64,
    /// The seq of the last node it replaced.
    pub end: u64,
    /// Every node it replaced, in surface order.
    pub shadowed: Vec<u64>,
}

/// What one event did to the surface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SurfaceEffect {
    /// Not a surface event (log-only).
    None,
    /// Added as a new node at the end.
    Appended,
    /// Replaced a range of nodes.
    Replaced(Replacement),
}

/// The running surface fold of one session: the current nodes, and what later
/// replacements are checked against.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct SurfaceFold {
    nodes: Vec<u64>,
    /// For each current `tool/result` node: a hash of its data with the inner
    /// content set aside, so a content-only replacement can be checked (rule 7)
    /// without keeping the original event.
    tool_result_keys: HashMap<u64, u64>,
    /// Seq of the replacement that removed each shadowed node.
    shadowed_by: HashMap<u64, u64>,
    /// Seqs of replacement events, in log order.
    replacements: Vec<u64>,
    replace_generation: u64,
    next_seq: u64,
}

impl SurfaceFold {
    /// The seqs on the surface now, in order.
    pub fn nodes(&self) -> &[u64] {
        &self.nodes
    }

    /// How many replacements have landed: it changes whenever the surface is rewritten
    /// rather than extended.
    pub fn replace_generation(&self) -> u64 {
        self.replace_generation
    }

    /// True when event `seq` is a replacement.
    pub fn is_replacement(&self, seq: u64) -> bool {
        self.replacements.binary_search(&seq).is_ok()
    }

    /// The replacement that shadowed `seq`, if any.
    pub fn shadowed_by(&self, seq: u64) -> Option<u64> {
        self.shadowed_by.get(&seq).copied()
    }

    /// Rule 1, contiguity: takes the next seq, the only rule a log-only event
    /// without surface markers can break.
    pub fn advance(&mut self, seq: u64) -> Result<(), String> {
        if seq != self.next_seq {
            return Err(format!(
                "invalid surface at seq {seq}: expected seq {} (rule 1, contiguity)",
                self.next_seq
            ));
        }
        self.next_seq += 1;
        Ok(())
    }

    /// Applies one event; `Err` names the seq and the broken rule.
    pub fn apply(&mut self, event: &JsonMap) -> Result<SurfaceEffect, String> {
        let seq = event
            .get("seq")
            .and_then(non_negative_safe_integer)
            .unwrap_or(u64::MAX);
        let fail = |rule: &str| Err(format!("invalid surface at seq {seq}: {rule}"));
        self.advance(seq)?;
        let event_type = event.get("type").and_then(Value::as_str).unwrap_or("");
        let op_value = event.get("surfaceOp");
        let sources = event.get("sourceEventSeqs");
        // Rule 2: marker placement.
        if !is_surface_type(event_type) {
            if op_value.is_some() {
                return fail(&format!(
                    "{event_type} is not a surface type but carries surfaceOp (rule 2)"
                ));
            }
            if sources.is_some() {
                return fail(&format!(
                    "{event_type} is not a surface type but carries sourceEventSeqs (rule 2)"
                ));
            }
            return Ok(SurfaceEffect::None);
        }
        let Some(op_value) = op_value else {
            return fail(&format!("{event_type} carries no surfaceOp (rule 2)"));
        };
        // Rule 3: shape.
        let Some(op) = parse_op(op_value) else {
            return fail("surfaceOp is neither \"append\" nor {op:\"replace\",start,end} (rule 3)");
        };
        match op {
            SurfaceOp::Append => {
                check_sources(seq, event_type, sources, &[])?;
                self.nodes.push(seq);
                if event_type == "tool/result" {
                    self.tool_result_keys.insert(seq, tool_result_key(event));
                }
                Ok(SurfaceEffect::Appended)
            }
            SurfaceOp::Replace { start, end } => {
                // Rule 5: endpoints on the surface, in order.
                let Some(i) = self.nodes.iter().position(|n| *n == start) else {
                    return fail(&format!(
                        "replace start {start} is not a current surface node (rule 5)"
                    ));
                };
                let Some(j) = self.nodes.iter().position(|n| *n == end) else {
                    return fail(&format!(
                        "replace end {end} is not a current surface node (rule 5)"
                    ));
                };
                if i > j {
                    return fail(&format!(
                        "replace start {start} comes after end {end} on the surface (rule 5)"
                    ));
                }
                let shadowed: Vec<u64> = self.nodes[i..=j].to_vec();
                // Rules 4 and 6: provenance and coverage.
                check_sources(seq, event_type, sources, &shadowed)?;
                // Rule 7: a tool/result replacement rewrites one tool/result's content only.
                if event_type == "tool/result" {
                    let [original] = shadowed.as_slice() else {
                        return fail(
                            "a tool/result replacement must shadow exactly one node (rule 7)",
                        );
                    };
                    match self.tool_result_keys.get(original) {
                        None => {
                            return fail(&format!(
                                "a tool/result replacement shadows {original}, which is not a tool/result (rule 7)"
                            ));
                        }
                        Some(key) if *key != tool_result_key(event) => {
                            return fail(&format!(
                                "tool/result replacement of {original} changes more than the result content (rule 7)"
                            ));
                        }
                        Some(_) => {}
                    }
                }
                for node in &shadowed {
                    self.tool_result_keys.remove(node);
                    self.shadowed_by.insert(*node, seq);
                }
                self.nodes.splice(i..=j, [seq]);
                if event_type == "tool/result" {
                    self.tool_result_keys.insert(seq, tool_result_key(event));
                }
                self.replace_generation += 1;
                self.replacements.push(seq);
                Ok(SurfaceEffect::Replaced(Replacement {
                    seq,
                    start,
                    end,
                    shadowed,
                }))
            }
        }
    }
}

/// Parses a `surfaceOp`: `"append"`, or exactly `{op: "replace", start, end}`; `None` for
/// any other value.
pub fn parse_op(value: &Value) -> Option<SurfaceOp> {
    match value {
        Value::String(s) if s == "append" => Some(SurfaceOp::Append),
        Value::Object(map) => {
            let keys_ok = map.len() == 3 && map.get("op") == Some(&Value::String("replace".into()));
            let start = map.get("start").and_then(non_negative_safe_integer);
            let end = map.get("end").and_then(non_negative_safe_integer);
            match (keys_ok, start, end) {
                (true, Some(start), Some(end)) => Some(SurfaceOp::Replace { start, end }),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Rules 4 and 6: `sourceEventSeqs` is an array of distinct earlier seqs, non-empty
/// except on `assistant/message`, and cites every shadowed node.
fn check_sources(
    seq: u64,
    event_type: &str,
    sources: Option<&Value>,
    shadowed: &[u64],
) -> Result<(), String> {
    let fail = |rule: String| Err(format!("invalid surface at seq {seq}: {rule}"));
    let Some(sources) = sources else {
        if let Some(first) = shadowed.first() {
            return fail(format!(
                "replacement has no sourceEventSeqs, so it does not cite shadowed node {first} (rule 6)"
            ));
        }
        return Ok(());
    };
    let Some(items) = sources.as_array() else {
        return fail("sourceEventSeqs is not an array (rule 4)".into());
    };
    if items.is_empty() && event_type != "assistant/message" {
        return fail("sourceEventSeqs is empty (rule 4)".into());
    }
    let mut cited = Vec::with_capacity(items.len());
    for item in items {
        let Some(cite) = non_negative_safe_integer(item) else {
            return fail(
                "sourceEventSeqs holds a value that is not a non-negative safe integer (rule 4)"
                    .into(),
            );
        };
        cited.push(cite);
    }
    let mut sorted = cited.clone();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return fail("sourceEventSeqs has duplicates (rule 4)".into());
    }
    if let Some(late) = cited.iter().find(|c| **c >= seq) {
        return fail(format!(
            "sourceEventSeqs cites {late}, which is not an earlier event (rule 4)"
        ));
    }
    if let Some(missing) = shadowed.iter().find(|s| sorted.binary_search(s).is_err()) {
        return fail(format!(
            "sourceEventSeqs does not cite shadowed node {missing} (rule 6)"
        ));
    }
    Ok(())
}

/// A hash of a tool/result's data with `message.content[0].content` set aside.
fn tool_result_key(event: &JsonMap) -> u64 {
    let mut data = event.get("data").cloned().unwrap_or(Value::Null);
    if let Some(block) = data
        .pointer_mut("/message/content/0")
        .and_then(Value::as_object_mut)
    {
        block.remove("content");
    }
    let mut text = String::new();
    canonical_text(&data, &mut text);
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(v: Value) -> JsonMap {
        v.as_object().unwrap().clone()
    }

    fn user(seq: u64, op: Value, sources: Option<Value>) -> JsonMap {
        let mut e = ev(
            json!({"type": "user/message", "seq": seq, "time": 0, "data": {"content": [], "source": {"kind": "user"}, "role": "user", "id": format!("u{seq}")}}),
        );
        if let Some(s) = sources {
            e.insert("sourceEventSeqs".into(), s);
        }
        e.insert("surfaceOp".into(), op);
        e
    }

    fn log_only(seq: u64) -> JsonMap {
        ev(json!({"type": "turn/start", "seq": seq, "time": 0, "data": {"turn": 1}}))
    }

    fn tool_result(seq: u64, text: &str, op: Value, sources: Value) -> JsonMap {
        ev(
            json!({"type": "tool/result", "seq": seq, "time": 0, "data": {"turn": 1, "step": 1, "message": {"source": {"kind": "tool", "callId": "c"}, "content": [{"type": "tool-result", "toolCallId": "c", "content": [{"type": "text", "text": text}]}], "role": "user", "id": "t"}}, "sourceEventSeqs": sources, "surfaceOp": op}),
        )
    }

    fn fold(events: &[JsonMap]) -> Result<SurfaceFold, String> {
        let mut fold = SurfaceFold::default();
        for e in events {
            fold.apply(e)?;
        }
        Ok(fold)
    }

    #[test]
    fn the_spec_example_folds_by_position() {
        let mut events: Vec<JsonMap> = (0..16).map(log_only).collect();
        for s in [2, 5, 7, 9] {
            events[s] = user(s as u64, json!("append"), None);
        }
        events[12] = user(
            12,
            json!({"op": "replace", "start": 2, "end": 7}),
            Some(json!([2, 5, 7])),
        );
        events[15] = user(
            15,
            json!({"op": "replace", "start": 12, "end": 9}),
            Some(json!([12, 9])),
        );
        let f = fold(&events).unwrap();
        assert_eq!(f.nodes(), &[15]);
        assert_eq!(f.replace_generation(), 2);
        assert_eq!(f.shadowed_by(5), Some(12));
        assert_eq!(f.shadowed_by(12), Some(15));
    }

    #[test]
    fn each_rule_has_a_failing_log() {
        let base = vec![
            user(0, json!("append"), None),
            user(1, json!("append"), None),
        ];
        let cases: Vec<(JsonMap, &str)> = vec![
            (user(3, json!("append"), None), "rule 1"),
            (
                {
                    let mut e = log_only(2);
                    e.insert("surfaceOp".into(), json!("append"));
                    e
                },
                "rule 2",
            ),
            (
                {
                    let mut e = log_only(2);
                    e.insert("sourceEventSeqs".into(), json!(null));
                    e
                },
                "rule 2",
            ),
            (
                {
                    let mut e = user(2, json!("append"), None);
                    e.remove("surfaceOp");
                    e
                },
                "rule 2",
            ),
            (
                user(
                    2,
                    json!({"op": "replace", "start": 0, "end": 1, "x": 1}),
                    Some(json!([0, 1])),
                ),
                "rule 3",
            ),
            (
                user(
                    2,
                    json!({"op": "replace", "start": 0, "end": -1}),
                    Some(json!([0])),
                ),
                "rule 3",
            ),
            (user(2, json!("append"), Some(json!([]))), "rule 4"),
            (user(2, json!("append"), Some(json!([1, 1]))), "rule 4"),
            (user(2, json!("append"), Some(json!([2]))), "rule 4"),
            (user(2, json!("append"), Some(json!("1"))), "rule 4"),
            (
                user(
                    2,
                    json!({"op": "replace", "start": 5, "end": 1}),
                    Some(json!([0, 1])),
                ),
                "rule 5",
            ),
            (
                user(
                    2,
                    json!({"op": "replace", "start": 1, "end": 0}),
                    Some(json!([0, 1])),
                ),
                "rule 5",
            ),
            (
                user(
                    2,
                    json!({"op": "replace", "start": 0, "end": 1}),
                    Some(json!([0])),
                ),
                "rule 6",
            ),
            (
                user(2, json!({"op": "replace", "start": 0, "end": 1}), None),
                "rule 6",
            ),
        ];
        for (bad, rule) in cases {
            let mut events = base.clone();
            events.push(bad.clone());
            let err = fold(&events).unwrap_err();
            assert!(err.contains(rule), "{bad:?}: {err}");
        }
        // The passing counterparts.
        let mut ok = base.clone();
        ok.push(user(
            2,
            json!({"op": "replace", "start": 0, "end": 1}),
            Some(json!([1, 0])),
        ));
        assert_eq!(fold(&ok).unwrap().nodes(), &[2]);
        let mut empty_assistant = base.clone();
        empty_assistant.push(ev(json!({"type": "assistant/message", "seq": 2, "time": 0, "data": {}, "sourceEventSeqs": [], "surfaceOp": "append"})));
        assert!(fold(&empty_assistant).is_ok());
    }

    #[test]
    fn tool_result_replacements_may_change_only_content() {
        let base = vec![tool_result(0, "long output", json!("append"), json!([]))];
        let mut base = base;
        base[0].insert("sourceEventSeqs".into(), json!([]));
        base[0].remove("sourceEventSeqs");
        let mut pruned = base.clone();
        pruned.push(tool_result(
            1,
            "short",
            json!({"op": "replace", "start": 0, "end": 0}),
            json!([0]),
        ));
        assert_eq!(fold(&pruned).unwrap().nodes(), &[1]);

        let mut renamed = base.clone();
        let mut bad = tool_result(
            1,
            "short",
            json!({"op": "replace", "start": 0, "end": 0}),
            json!([0]),
        );
        bad["data"]["message"]["id"] = json!("other");
        renamed.push(bad);
        assert!(fold(&renamed).unwrap_err().contains("rule 7"));

        let mut over_user = vec![user(0, json!("append"), None)];
        over_user.push(tool_result(
            1,
            "x",
            json!({"op": "replace", "start": 0, "end": 0}),
            json!([0]),
        ));
        assert!(fold(&over_user).unwrap_err().contains("rule 7"));
    }
}
