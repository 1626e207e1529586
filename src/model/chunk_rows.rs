//! Packed chunk rows: one storage record holding a run of streamed
//! `assistant/chunk` deltas (spec §10.4, §11.3). Expansion restores the exact
//! original events, key order included.

use serde_json::{Map, Value};

use crate::json::{JsonMap, MAX_SAFE_INTEGER, safe_integer};
use crate::model::validate::CHUNK_TYPE;

/// The three storage tags. They have no slash, so they never clash with event types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKind {
    /// `text-chunks`: `text-delta` chunks, a member per delta's `text`.
    Text,
    /// `reasoning-chunks`: `reasoning-delta` chunks, a member per delta's `text`.
    Reasoning,
    /// `tool-call-chunks`: one call's `tool-call-delta` chunks, a member per `argumentsDelta`.
    ToolCall,
}

impl RowKind {
    /// The kind a storage tag names; `None` for an event type or an unknown tag.
    pub fn from_tag(tag: &str) -> Option<RowKind> {
        match tag {
            "text-chunks" => Some(RowKind::Text),
            "reasoning-chunks" => Some(RowKind::Reasoning),
            "tool-call-chunks" => Some(RowKind::ToolCall),
            _ => None,
        }
    }

    /// The storage tag, stored where an event's type would be.
    pub fn tag(self) -> &'static str {
        match self {
            RowKind::Text => "text-chunks",
            RowKind::Reasoning => "reasoning-chunks",
            RowKind::ToolCall => "tool-call-chunks",
        }
    }
}

/// Member limits: JSONL accepts any non-empty row; SQLite schema 17 owns 3..=1024.
#[derive(Clone, Copy, Debug)]
pub struct RowLimits {
    /// The fewest members a row may hold.
    pub min_members: usize,
    /// The most members a row may hold.
    pub max_members: usize,
}

/// JSONL accepts a packed row of any non-zero number of members.
pub const JSONL_ROW_LIMITS: RowLimits = RowLimits {
    min_members: 1,
    max_members: usize::MAX,
};
/// SQLite schema 17 packs 3 to 1024 members per row (the Harness's writer partitioning).
pub const SQLITE_ROW_LIMITS: RowLimits = RowLimits {
    min_members: 3,
    max_members: 1024,
};

/// The parts of a packed row, validated.
struct Row<'a> {
    kind: RowKind,
    seq0: i64,
    turn: &'a Value,
    step: &'a Value,
    index: &'a Value,
    /// Each member's time.
    times: Vec<i64>,
    id: Option<&'a Value>,
    name: Option<&'a Value>,
    members: &'a [Value],
}

fn exact_keys(map: &JsonMap, keys: &[&str]) -> bool {
    map.len() == keys.len() && keys.iter().all(|k| map.contains_key(*k))
}

/// Checks a JSONL packed row (`{type, seq0, time0, data}`) and expands it.
pub fn expand_jsonl_row(
    kind: RowKind,
    record: &JsonMap,
    limits: RowLimits,
) -> Result<Vec<JsonMap>, String> {
    if !exact_keys(record, &["type", "seq0", "time0", "data"]) {
        return Err(format!(
            "malformed {} row: envelope keys must be type, seq0, time0, data",
            kind.tag()
        ));
    }
    let seq0 = safe_integer(&record["seq0"]).filter(|s| *s >= 0);
    let time0 = safe_integer(&record["time0"]);
    let (Some(seq0), Some(time0)) = (seq0, time0) else {
        return Err(format!(
            "malformed {} row: seq0/time0 are not safe integers",
            kind.tag()
        ));
    };
    let Some(data) = record["data"].as_object() else {
        return Err(format!(
            "malformed {} row: data is not an object",
            kind.tag()
        ));
    };
    expand_row_data(kind, seq0, time0, data, limits)
}

/// Expands a row given its first seq, first time and `data` object (the SQLite
/// packed-row columns, or the JSONL envelope's fields).
pub fn expand_row_data(
    kind: RowKind,
    seq0: i64,
    time0: i64,
    data: &JsonMap,
    limits: RowLimits,
) -> Result<Vec<JsonMap>, String> {
    let row = parse_row(kind, seq0, time0, data, limits)
        .map_err(|why| format!("malformed {} row: {why}", kind.tag()))?;
    Ok(expand(&row))
}

fn parse_row<'a>(
    kind: RowKind,
    seq0: i64,
    time0: i64,
    data: &'a JsonMap,
    limits: RowLimits,
) -> Result<Row<'a>, &'static str> {
    let (members_key, shape_ok) = match kind {
        RowKind::Text | RowKind::Reasoning => (
            "texts",
            exact_keys(data, &["turn", "step", "index", "dt", "texts"]),
        ),
        RowKind::ToolCall => (
            "args",
            exact_keys(data, &["turn", "step", "index", "id", "dt", "args"])
                || exact_keys(data, &["turn", "step", "index", "id", "name", "dt", "args"]),
        ),
    };
    if !shape_ok {
        return Err("data has unexpected keys");
    }
    let (turn, step, index) = (&data["turn"], &data["step"], &data["index"]);
    if !turn.is_number() || !step.is_number() || !index.is_number() {
        return Err("turn, step and index must be numbers");
    }
    let (id, name) = match kind {
        RowKind::ToolCall => {
            let id = &data["id"];
            let name = data.get("name");
            if !id.is_string() || name.is_some_and(|n| !n.is_string()) {
                return Err("id and name must be strings");
            }
            (Some(id), name)
        }
        _ => (None, None),
    };
    let Some(members) = data[members_key].as_array() else {
        return Err("members are not an array");
    };
    if members.is_empty() || !members.iter().all(Value::is_string) {
        return Err("members must be a non-empty array of strings");
    }
    if members.len() < limits.min_members || members.len() > limits.max_members {
        return Err("member count outside the backend's limits");
    }
    let Some(dt_values) = data["dt"].as_array() else {
        return Err("dt is not an array");
    };
    if dt_values.len() != members.len() - 1 {
        return Err("dt must have one entry fewer than the members");
    }
    let times = member_times(seq0, time0, dt_values.iter().map(safe_integer))?;
    Ok(Row {
        kind,
        seq0,
        turn,
        step,
        index,
        times,
        id,
        name,
        members,
    })
}

/// Each member's time from the first time and the deltas (`None` for a delta
/// that is no safe integer), checking that every time and the last member's seq
/// stay in the safe range. Shared by the full and the quick decoder.
pub(crate) fn member_times(
    seq0: i64,
    time0: i64,
    deltas: impl ExactSizeIterator<Item = Option<i64>>,
) -> Result<Vec<i64>, &'static str> {
    let mut times = Vec::with_capacity(deltas.len() + 1);
    let mut time = time0;
    times.push(time);
    for delta in deltas {
        let delta = delta.ok_or("dt entries must be safe integers")?;
        time = time
            .checked_add(delta)
            .filter(|t| t.abs() <= MAX_SAFE_INTEGER)
            .ok_or("running time leaves the safe range")?;
        times.push(time);
    }
    if seq0
        .checked_add(times.len() as i64 - 1)
        .is_none_or(|last| last > MAX_SAFE_INTEGER)
    {
        return Err("last member seq leaves the safe range");
    }
    Ok(times)
}

fn expand(row: &Row) -> Vec<JsonMap> {
    let mut events = Vec::with_capacity(row.members.len());
    for (k, (member, time)) in row.members.iter().zip(&row.times).enumerate() {
        let time = *time;
        let mut chunk = Map::new();
        match row.kind {
            RowKind::Text | RowKind::Reasoning => {
                let kind = if row.kind == RowKind::Text {
                    "text-delta"
                } else {
                    "reasoning-delta"
                };
                chunk.insert("type".into(), kind.into());
                chunk.insert("index".into(), row.index.clone());
                chunk.insert("text".into(), member.clone());
            }
            RowKind::ToolCall => {
                chunk.insert("type".into(), "tool-call-delta".into());
                chunk.insert("index".into(), row.index.clone());
                chunk.insert("id".into(), row.id.cloned().unwrap_or(Value::Null));
                if let Some(name) = row.name {
                    chunk.insert("name".into(), name.clone());
                }
                chunk.insert("argumentsDelta".into(), member.clone());
            }
        }
        let mut data = Map::new();
        data.insert("turn".into(), row.turn.clone());
        data.insert("step".into(), row.step.clone());
        data.insert("chunk".into(), Value::Object(chunk));
        let mut event = Map::new();
        event.insert("type".into(), CHUNK_TYPE.into());
        event.insert("seq".into(), (row.seq0 + k as i64).into());
        event.insert("time".into(), time.into());
        event.insert("data".into(), Value::Object(data));
        events.push(event);
    }
    events
}

/// Packs a batch of events the way the Harness does (runs of at least three
/// eligible deltas become rows; spec §10.4 "Encoder eligibility"). Used when
/// sessionfs writes a fork child, so the child looks like a Harness artifact.
/// `max_members` caps a row (1024 for SQLite schema 17, unbounded for JSONL).
pub fn pack(events: &[JsonMap], max_members: usize) -> Vec<JsonMap> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < events.len() {
        let Some(first) = Eligible::of(&events[i]) else {
            out.push(events[i].clone());
            i += 1;
            continue;
        };
        let mut end = i + 1;
        while end < events.len() && end - i < max_members {
            match Eligible::of(&events[end]) {
                Some(next)
                    if first.continues(&Eligible::of(&events[end - 1]).unwrap_or(first), &next) =>
                {
                    end += 1
                }
                _ => break,
            }
        }
        if end - i >= 3 {
            out.push(make_row(&events[i..end], first.kind));
        } else {
            out.extend(events[i..end].iter().cloned());
        }
        i = end;
    }
    out
}

#[derive(Clone, Copy)]
struct Eligible<'a> {
    kind: RowKind,
    seq: i64,
    time: i64,
    turn: &'a Value,
    step: &'a Value,
    index: &'a Value,
    id: Option<&'a Value>,
    name: Option<&'a Value>,
}

impl<'a> Eligible<'a> {
    fn of(event: &'a JsonMap) -> Option<Eligible<'a>> {
        if !exact_keys(event, &["type", "seq", "time", "data"]) || event["type"] != CHUNK_TYPE {
            return None;
        }
        let seq = safe_integer(&event["seq"]).filter(|s| *s >= 0)?;
        let time = safe_integer(&event["time"])?;
        let data = event["data"].as_object()?;
        if !exact_keys(data, &["turn", "step", "chunk"])
            || !data["turn"].is_number()
            || !data["step"].is_number()
        {
            return None;
        }
        let chunk = data["chunk"].as_object()?;
        let index = chunk.get("index").filter(|v| v.is_number())?;
        let (kind, id, name) = match chunk.get("type")?.as_str()? {
            "text-delta"
                if exact_keys(chunk, &["type", "index", "text"]) && chunk["text"].is_string() =>
            {
                (RowKind::Text, None, None)
            }
            "reasoning-delta"
                if exact_keys(chunk, &["type", "index", "text"]) && chunk["text"].is_string() =>
            {
                (RowKind::Reasoning, None, None)
            }
            "tool-call-delta" => {
                let plain = exact_keys(chunk, &["type", "index", "id", "argumentsDelta"]);
                let named = exact_keys(chunk, &["type", "index", "id", "name", "argumentsDelta"]);
                if !(plain || named)
                    || !chunk["id"].is_string()
                    || !chunk["argumentsDelta"].is_string()
                {
                    return None;
                }
                let name = chunk.get("name");
                if name.is_some_and(|n| !n.is_string()) {
                    return None;
                }
                (RowKind::ToolCall, chunk.get("id"), name)
            }
            _ => return None,
        };
        Some(Eligible {
            kind,
            seq,
            time,
            turn: &data["turn"],
            step: &data["step"],
            index,
            id,
            name,
        })
    }

    fn continues(&self, previous: &Eligible, next: &Eligible) -> bool {
        next.kind == self.kind
            && next.seq == previous.seq + 1
            && (next.time - previous.time).abs() <= MAX_SAFE_INTEGER
            && next.turn == self.turn
            && next.step == self.step
            && next.index == self.index
            && next.id == self.id
            && next.name == self.name
    }
}

fn make_row(run: &[JsonMap], kind: RowKind) -> JsonMap {
    let members: Vec<Eligible> = run.iter().filter_map(Eligible::of).collect();
    let first = members[0];
    let dt: Vec<Value> = members
        .windows(2)
        .map(|w| (w[1].time - w[0].time).into())
        .collect();
    let texts: Vec<Value> = run
        .iter()
        .map(|e| {
            let chunk = &e["data"]["chunk"];
            if kind == RowKind::ToolCall {
                chunk["argumentsDelta"].clone()
            } else {
                chunk["text"].clone()
            }
        })
        .collect();
    let mut data = Map::new();
    data.insert("turn".into(), first.turn.clone());
    data.insert("step".into(), first.step.clone());
    data.insert("index".into(), first.index.clone());
    data.insert("dt".into(), Value::Array(dt));
    if kind == RowKind::ToolCall {
        data.insert("id".into(), first.id.cloned().unwrap_or(Value::Null));
        if let Some(name) = first.name {
            data.insert("name".into(), name.clone());
        }
        data.insert("args".into(), Value::Array(texts));
    } else {
        data.insert("texts".into(), Value::Array(texts));
    }
    let mut row = Map::new();
    row.insert("type".into(), kind.tag().into());
    row.insert("seq0".into(), first.seq.into());
    row.insert("time0".into(), first.time.into());
    row.insert("data".into(), Value::Object(data));
    row
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> JsonMap {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn expands_the_spec_example_exactly() {
        let row = parse(
            r#"{"type":"tool-call-chunks","seq0":6,"time0":1760000000301,"data":{"turn":1,"step":1,"index":0,"dt":[4,-1],"id":"c-9","name":"sh","args":["{\"cmd\"",":\"ls","\"}"]}}"#,
        );
        let events = expand_jsonl_row(RowKind::ToolCall, &row, JSONL_ROW_LIMITS).unwrap();
        let text: Vec<String> = events
            .iter()
            .map(|e| serde_json::to_string(e).unwrap())
            .collect();
        assert_eq!(
            text[1],
            r#"{"type":"assistant/chunk","seq":7,"time":1760000000305,"data":{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":0,"id":"c-9","name":"sh","argumentsDelta":":\"ls"}}}"#
        );
        assert_eq!(events[2]["time"], 1760000000304i64);
        assert_eq!(pack(&events, usize::MAX), vec![row]);
    }

    #[test]
    fn rejects_malformed_rows() {
        let cases = [
            r#"{"type":"text-chunks","seq0":0,"time0":0,"data":{"turn":1,"step":1,"index":0,"dt":[1],"texts":["a"]}}"#,
            r#"{"type":"text-chunks","seq0":0,"time0":0,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":[]}}"#,
            r#"{"type":"text-chunks","seq0":-1,"time0":0,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"]}}"#,
            r#"{"type":"text-chunks","seq0":0,"time0":0,"extra":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"]}}"#,
            r#"{"type":"text-chunks","seq0":0,"time0":0,"data":{"turn":1,"step":1,"index":0,"dt":[1.5],"texts":["a","b"]}}"#,
            r#"{"type":"text-chunks","seq0":0,"time0":0,"data":{"turn":"1","step":1,"index":0,"dt":[],"texts":["a"]}}"#,
        ];
        for case in cases {
            assert!(
                expand_jsonl_row(RowKind::Text, &parse(case), JSONL_ROW_LIMITS).is_err(),
                "{case}"
            );
        }
        let two = parse(
            r#"{"type":"text-chunks","seq0":0,"time0":0,"data":{"turn":1,"step":1,"index":0,"dt":[1],"texts":["a","b"]}}"#,
        );
        assert!(expand_jsonl_row(RowKind::Text, &two, JSONL_ROW_LIMITS).is_ok());
        assert!(expand_jsonl_row(RowKind::Text, &two, SQLITE_ROW_LIMITS).is_err());
    }
}
