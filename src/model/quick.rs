//! Streamed chunks read without building them.
//!
//! Most of a large log is `assistant/chunk` events, alone or packed in rows, and
//! no view but `events/` shows their contents: the fold needs only each one's seq
//! and time, and the boundary rule of `steps/` its turn and step. Reading those
//! from the stored bytes, instead of building every event as a JSON map, is what
//! makes a cold scan fast. A `finish` chunk is always decoded in full: the rule
//! needs its kind, and there is one per model call.
//!
//! The quick readers are strict and narrow: they accept only records that the
//! full decoder accepts, and give the same seqs, times, turns and steps, and
//! each event's pretty-printed length (what its file in `events/` holds, so
//! that listing `events/` renders nothing); a property test holds them to it.
//! `None` never means "invalid", only "decode this record in full", which then
//! gives the authoritative answer or refusal.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use crate::json::MAX_SAFE_INTEGER;
use crate::json_len::{container_len, int_len, member_len, raw_pretty_len, string_len};
use crate::model::chunk_rows::{RowKind, RowLimits, member_times};
use crate::model::validate::CHUNK_TYPE;
use crate::model::{ChunkRun, ChunkStep};

mod layout;

/// Reads a JSONL record quickly when it is a packed row or a lone
/// `assistant/chunk` event with only the envelope keys, written type first as
/// the Harness writes them, whose data names its turn and step and whose chunk
/// is no `finish` (the boundary rule of `steps/` needs a finish's kind).
pub fn jsonl_record(line: &[u8], limits: RowLimits) -> Option<ChunkRun> {
    if line.starts_with(LONE_CHUNK) {
        return layout::lone_chunk(line).or_else(|| lone_chunk_by_serde(line));
    }
    let kind = row_kind(line)?;
    layout::row(kind, line, limits).or_else(|| row_by_serde(kind, line, limits))
}

/// How a lone chunk event starts when its type is written first.
const LONE_CHUNK: &[u8] = br#"{"type":"assistant/chunk","#;

/// The kind of a packed row whose storage tag is written first.
fn row_kind(line: &[u8]) -> Option<RowKind> {
    let tag = line.strip_prefix(br#"{"type":""#)?;
    [RowKind::Text, RowKind::Reasoning, RowKind::ToolCall]
        .into_iter()
        .find(|kind| {
            tag.strip_prefix(kind.tag().as_bytes())
                .is_some_and(|rest| rest.starts_with(b"\","))
        })
}

/// A lone chunk in any spelling serde accepts; as `jsonl_record`.
fn lone_chunk_by_serde(line: &[u8]) -> Option<ChunkRun> {
    let event: LoneChunk = serde_json::from_slice(line).ok()?;
    let seq = safe_seq(event.seq)?;
    let time = safe_time(event.time)?;
    let step = event.data.step()?;
    Some(ChunkRun {
        seq0: seq,
        times: vec![time],
        sizes: vec![raw_pretty_len(line, 0)? + 1],
        step,
    })
}

/// A packed row in any spelling serde accepts; as `jsonl_record`.
fn row_by_serde(kind: RowKind, line: &[u8], limits: RowLimits) -> Option<ChunkRun> {
    let (seq0, time0, data) = match kind {
        RowKind::ToolCall => {
            let row: RowRecord<ToolRow> = serde_json::from_slice(line).ok()?;
            (row.seq0, row.time0, row.data.into())
        }
        _ => {
            let row: RowRecord<TextRow> = serde_json::from_slice(line).ok()?;
            (row.seq0, row.time0, row.data.into())
        }
    };
    run(kind, safe_seq(seq0)?, safe_time(time0)?, data, limits)
}

/// Reads the `data` of a packed SQLite row quickly (its seq and time are columns).
pub fn row_data(
    kind: RowKind,
    seq0: u64,
    time0: i64,
    data: &[u8],
    limits: RowLimits,
) -> Option<ChunkRun> {
    let data = match kind {
        RowKind::ToolCall => serde_json::from_slice::<ToolRow>(data).ok()?.into(),
        _ => serde_json::from_slice::<TextRow>(data).ok()?.into(),
    };
    run(kind, safe_seq(seq0)?, safe_time(time0)?, data, limits)
}

/// Reads a scalar `assistant/chunk` SQLite row quickly from its seq, time and
/// `data`, when the data names its turn and step and its chunk is no `finish`.
pub fn lone_chunk_row(seq: u64, time: i64, data: &[u8]) -> Option<ChunkRun> {
    let step = serde_json::from_slice::<LoneChunkData>(data).ok()?.step()?;
    let seq = safe_seq(seq)?;
    let time = safe_time(time)?;
    // The event the row decodes to: `{type, seq, time, data}`.
    let fields = member_len("type", string_len(CHUNK_TYPE))
        + member_len("seq", int_len(seq as i64))
        + member_len("time", int_len(time))
        + member_len("data", raw_pretty_len(data, 1)?);
    Some(ChunkRun {
        seq0: seq,
        times: vec![time],
        sizes: vec![container_len(0, 4, fields) + 1],
        step,
    })
}

fn run(kind: RowKind, seq0: u64, time0: i64, data: RowData, limits: RowLimits) -> Option<ChunkRun> {
    let members = data.members.len();
    if members == 0
        || members < limits.min_members
        || members > limits.max_members
        || data.dt.len() != members - 1
    {
        return None;
    }
    let deltas = data
        .dt
        .iter()
        .map(|d| (d.abs() <= MAX_SAFE_INTEGER).then_some(*d));
    let times = member_times(seq0 as i64, time0, deltas).ok()?;
    let step = ChunkStep {
        turn: data.turn.value,
        step: data.step.value,
    };
    let sizes = data.member_sizes(kind, seq0, &times);
    Some(ChunkRun {
        seq0,
        times,
        sizes,
        step,
    })
}

fn safe_seq(seq: u64) -> Option<u64> {
    (seq <= MAX_SAFE_INTEGER as u64).then_some(seq)
}

fn safe_time(time: i64) -> Option<i64> {
    (time.abs() <= MAX_SAFE_INTEGER).then_some(time)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoneChunk<'a> {
    #[serde(rename = "type")]
    _type: JsonString,
    seq: u64,
    time: i64,
    #[serde(borrow)]
    data: LoneChunkData<'a>,
}

/// A lone chunk's data: other keys are the full decoder's business.
#[derive(Deserialize)]
struct LoneChunkData<'a> {
    turn: JsonNumber,
    step: JsonNumber,
    #[serde(borrow)]
    chunk: ChunkHead<'a>,
}

impl LoneChunkData<'_> {
    fn step(&self) -> Option<ChunkStep> {
        (self.chunk.kind != "finish").then_some(ChunkStep {
            turn: self.turn.0,
            step: self.step.0,
        })
    }
}

#[derive(Deserialize)]
struct ChunkHead<'a> {
    /// Borrowed, so not copied: a type written with escapes is read in full.
    #[serde(rename = "type")]
    kind: &'a str,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RowRecord<T> {
    #[serde(rename = "type")]
    _type: JsonString,
    seq0: u64,
    time0: i64,
    data: T,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TextRow {
    turn: SpelledNumber,
    step: SpelledNumber,
    index: SpelledNumber,
    dt: Vec<i64>,
    texts: Vec<StringLen>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolRow {
    turn: SpelledNumber,
    step: SpelledNumber,
    index: SpelledNumber,
    id: StringLen,
    /// Optional, but a string when present (`null` is refused, as in full).
    #[serde(default)]
    name: StringLen,
    dt: Vec<i64>,
    args: Vec<StringLen>,
}

/// The `data` of a packed row of either shape: what its expansion
/// (`chunk_rows::expand`) copies into every member's event.
struct RowData {
    turn: SpelledNumber,
    step: SpelledNumber,
    index: SpelledNumber,
    /// A tool-call row's `id` and `name` (`None` for a text row).
    tool: Option<(StringLen, StringLen)>,
    dt: Vec<i64>,
    members: Vec<StringLen>,
}

impl From<TextRow> for RowData {
    fn from(row: TextRow) -> RowData {
        RowData {
            turn: row.turn,
            step: row.step,
            index: row.index,
            tool: None,
            dt: row.dt,
            members: row.texts,
        }
    }
}

impl From<ToolRow> for RowData {
    fn from(row: ToolRow) -> RowData {
        RowData {
            turn: row.turn,
            step: row.step,
            index: row.index,
            tool: Some((row.id, row.name)),
            dt: row.dt,
            members: row.args,
        }
    }
}

impl RowData {
    /// Each member's event pretty-printed: all alike but for the member's
    /// text, seq and time, so the rest is counted once.
    fn member_sizes(self, kind: RowKind, seq0: u64, times: &[i64]) -> Vec<u64> {
        let delta = match kind {
            RowKind::Text => "text-delta",
            RowKind::Reasoning => "reasoning-delta",
            RowKind::ToolCall => "tool-call-delta",
        };
        let head = member_len("type", string_len(delta)) + member_len("index", self.index.len);
        let (chunk_fields, chunk_count) = match &self.tool {
            None => (head + member_len("text", 0), 3),
            Some((id, StringLen(0))) => (
                head + member_len("id", id.0) + member_len("argumentsDelta", 0),
                4,
            ),
            Some((id, name)) => (
                head + member_len("id", id.0)
                    + member_len("name", name.0)
                    + member_len("argumentsDelta", 0),
                5,
            ),
        };
        let chunk = container_len(2, chunk_count, chunk_fields);
        let data = container_len(
            1,
            3,
            member_len("turn", self.turn.len)
                + member_len("step", self.step.len)
                + member_len("chunk", chunk),
        );
        let event_fields = member_len("type", string_len(CHUNK_TYPE))
            + member_len("seq", 0)
            + member_len("time", 0)
            + member_len("data", data);
        let base = container_len(0, 4, event_fields) + 1;
        // In place of the members' lengths: a run allocates nothing more.
        let mut sizes: Vec<u64> = self.members.into_iter().map(|m| m.0).collect();
        for ((size, seq), time) in sizes.iter_mut().zip(seq0..).zip(times) {
            *size += base + int_len(seq as i64) + int_len(*time);
        }
        sizes
    }
}

/// A JSON string, checked and not kept.
struct JsonString;

impl<'de> Deserialize<'de> for JsonString {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StringOnly;
        impl Visitor<'_> for StringOnly {
            type Value = JsonString;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<JsonString, E> {
                Ok(JsonString)
            }
        }
        deserializer.deserialize_str(StringOnly)
    }
}

/// A JSON string, checked, and the length serde_json writes it in (0 when
/// absent: a written string has at least its quotes).
#[derive(Default)]
struct StringLen(u64);

impl<'de> Deserialize<'de> for StringLen {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Measure;
        impl Visitor<'_> for Measure {
            type Value = StringLen;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<StringLen, E> {
                Ok(StringLen(string_len(text)))
            }
        }
        deserializer.deserialize_str(Measure)
    }
}

/// A JSON integer within 64 bits, as a double, and the length serde_json
/// writes it in. Any other number (a fraction, `-0`, a larger integer) keeps
/// its logged spelling, which this does not see: the row is read in full.
struct SpelledNumber {
    value: f64,
    len: u64,
}

impl<'de> Deserialize<'de> for SpelledNumber {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct IntegerOnly;
        impl Visitor<'_> for IntegerOnly {
            type Value = SpelledNumber;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<SpelledNumber, E> {
                let len = v.checked_ilog10().map_or(1, |l| l + 1);
                Ok(SpelledNumber {
                    value: v as f64,
                    len: len.into(),
                })
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<SpelledNumber, E> {
                Ok(SpelledNumber {
                    value: v as f64,
                    len: int_len(v),
                })
            }
        }
        deserializer.deserialize_f64(IntegerOnly)
    }
}

/// A JSON number of any kind, as a double.
struct JsonNumber(f64);

impl<'de> Deserialize<'de> for JsonNumber {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NumberOnly;
        impl Visitor<'_> for NumberOnly {
            type Value = JsonNumber;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<JsonNumber, E> {
                Ok(JsonNumber(v as f64))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<JsonNumber, E> {
                Ok(JsonNumber(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<JsonNumber, E> {
                Ok(JsonNumber(v))
            }
        }
        deserializer.deserialize_f64(NumberOnly)
    }
}
