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
//! full decoder accepts, and give the same seqs, times, turns and steps (a
//! property test holds them to it). `None` never means "invalid", only "decode
//! this record in full", which then gives the authoritative answer or refusal.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use crate::json::{JsonMap, MAX_SAFE_INTEGER};
use crate::model::chunk_rows::{RowKind, RowLimits, member_times};

/// One stored event as a backend hands it to the fold.
#[derive(Clone, Debug, PartialEq)]
pub enum Scanned {
    Event(JsonMap),
    /// A streamed `assistant/chunk` other than a `finish`: its contents stay in
    /// the store and are fetched when its file is read.
    Chunk {
        seq: u64,
        time: i64,
        step: ChunkStep,
    },
}

/// The `data.turn` and `data.step` of a chunk, as numbers compare in the
/// Harness's JS (the boundary rule of `steps/` matches them to a `step/start`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChunkStep {
    pub turn: f64,
    pub step: f64,
}

/// A run of `assistant/chunk` events of one step: the first seq and each event's time.
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkRun {
    pub seq0: u64,
    pub times: Vec<i64>,
    pub step: ChunkStep,
}

impl ChunkRun {
    pub fn events(&self) -> impl Iterator<Item = Scanned> + '_ {
        (self.seq0..)
            .zip(&self.times)
            .map(|(seq, time)| Scanned::Chunk {
                seq,
                time: *time,
                step: self.step,
            })
    }
}

/// Reads a JSONL record quickly when it is a packed row or a lone
/// `assistant/chunk` event with only the envelope keys, written type first as
/// the Harness writes them, whose data names its turn and step and whose chunk
/// is no `finish` (the boundary rule of `steps/` needs a finish's kind).
pub fn jsonl_record(line: &[u8], limits: RowLimits) -> Option<ChunkRun> {
    const CHUNK: &[u8] = br#"{"type":"assistant/chunk","#;
    if line.starts_with(CHUNK) {
        let event: LoneChunk = serde_json::from_slice(line).ok()?;
        let seq = safe_seq(event.seq)?;
        let time = safe_time(event.time)?;
        return Some(ChunkRun {
            seq0: seq,
            times: vec![time],
            step: event.data.step()?,
        });
    }
    let tag = line.strip_prefix(br#"{"type":""#)?;
    let kind = [RowKind::Text, RowKind::Reasoning, RowKind::ToolCall]
        .into_iter()
        .find(|kind| {
            tag.strip_prefix(kind.tag().as_bytes())
                .is_some_and(|rest| rest.starts_with(b"\","))
        })?;
    let (seq0, time0, members, dt, step) = match kind {
        RowKind::ToolCall => {
            let row: RowRecord<ToolRow> = serde_json::from_slice(line).ok()?;
            let step = ChunkStep {
                turn: row.data.turn.0,
                step: row.data.step.0,
            };
            (row.seq0, row.time0, row.data.args.len(), row.data.dt, step)
        }
        _ => {
            let row: RowRecord<TextRow> = serde_json::from_slice(line).ok()?;
            let step = ChunkStep {
                turn: row.data.turn.0,
                step: row.data.step.0,
            };
            (row.seq0, row.time0, row.data.texts.len(), row.data.dt, step)
        }
    };
    run(
        safe_seq(seq0)?,
        safe_time(time0)?,
        members,
        &dt,
        step,
        limits,
    )
}

/// Reads the `data` of a packed SQLite row quickly (its seq and time are columns).
pub fn row_data(
    kind: RowKind,
    seq0: u64,
    time0: i64,
    data: &[u8],
    limits: RowLimits,
) -> Option<ChunkRun> {
    let (members, dt, step) = match kind {
        RowKind::ToolCall => {
            let data: ToolRow = serde_json::from_slice(data).ok()?;
            let step = ChunkStep {
                turn: data.turn.0,
                step: data.step.0,
            };
            (data.args.len(), data.dt, step)
        }
        _ => {
            let data: TextRow = serde_json::from_slice(data).ok()?;
            let step = ChunkStep {
                turn: data.turn.0,
                step: data.step.0,
            };
            (data.texts.len(), data.dt, step)
        }
    };
    run(
        safe_seq(seq0)?,
        safe_time(time0)?,
        members,
        &dt,
        step,
        limits,
    )
}

/// Reads the `data` of a scalar `assistant/chunk` SQLite row quickly: its
/// turn and step, when it names them and its chunk is no `finish`.
pub fn lone_chunk_data(data: &[u8]) -> Option<ChunkStep> {
    serde_json::from_slice::<LoneChunkData>(data).ok()?.step()
}

fn run(
    seq0: u64,
    time0: i64,
    members: usize,
    dt: &[i64],
    step: ChunkStep,
    limits: RowLimits,
) -> Option<ChunkRun> {
    if members == 0
        || members < limits.min_members
        || members > limits.max_members
        || dt.len() != members - 1
    {
        return None;
    }
    let deltas = dt
        .iter()
        .map(|d| (d.abs() <= MAX_SAFE_INTEGER).then_some(*d));
    let times = member_times(seq0 as i64, time0, deltas).ok()?;
    Some(ChunkRun { seq0, times, step })
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
    turn: JsonNumber,
    step: JsonNumber,
    #[serde(rename = "index")]
    _index: JsonNumber,
    dt: Vec<i64>,
    texts: Vec<JsonString>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolRow {
    turn: JsonNumber,
    step: JsonNumber,
    #[serde(rename = "index")]
    _index: JsonNumber,
    #[serde(rename = "id")]
    _id: JsonString,
    /// Optional, but a string when present (`null` is refused, as in full).
    #[serde(rename = "name", default)]
    _name: JsonString,
    dt: Vec<i64>,
    args: Vec<JsonString>,
}

/// A JSON string, checked and not kept.
#[derive(Default)]
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
