//! The writer's half: logical events turned into `events` rows and a header
//! into a `sessions` row, as the Harness's writer stores them (spec §11.3,
//! §11.5). One encoder serves fork children (`create`), repairs and the
//! benchmark's store generator.

use std::io;

use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, params};
use serde_json::Value;

use super::rows::{MAX_PACKED_DATA_BYTES, SessionRow};
use super::schema::{INSERT_EVENT_14, INSERT_EVENT_17, INSERT_SESSION, Schema};
use super::varint::encode_source_seqs;
use crate::json::{JsonMap, non_negative_safe_integer, safe_integer};
use crate::model::chunk_rows::{self, JSONL_ROW_LIMITS, RowKind, SQLITE_ROW_LIMITS};
use crate::model::header::SessionHeader;

/// `data` JSON text of this many bytes or more is offered to zstd (spec §11.3).
const COMPRESS_FROM_BYTES: usize = 4096;

const ZSTD_LEVEL: i32 = 3;

/// An `events` row about to be inserted.
#[derive(Debug, PartialEq)]
pub struct EventRow {
    seq: i64,
    event_type: String,
    time: i64,
    data: SqlValue,
    source_event_seqs: SqlValue,
    surface_op: SqlValue,
    ignorable: SqlValue,
}

/// Encodes events into the rows of one schema. It holds its zstd compressor
/// for reuse: a fresh context per row costs more than compressing the row.
pub struct RowEncoder {
    schema: Schema,
    compressor: zstd::bulk::Compressor<'static>,
}

impl RowEncoder {
    /// An encoder for `schema`'s rows, with a zstd compressor set up as the Harness's
    /// (level 3, content size, no checksum).
    pub fn new(schema: Schema) -> io::Result<RowEncoder> {
        // As the Harness: level 3, a content size, no checksum.
        let mut compressor = zstd::bulk::Compressor::new(ZSTD_LEVEL)?;
        compressor.include_checksum(false)?;
        compressor.include_contentsize(true)?;
        Ok(RowEncoder { schema, compressor })
    }

    /// The rows of one committed batch of events. Schema 17 packs runs of
    /// streamed chunks as the Harness's writer does (spec §11.3, "Writer
    /// partitioning"): up to 1024 members, and a run whose data would exceed
    /// 1 MiB cut into the longest prefixes of at least 3 members that fit, with
    /// single members left over written as scalar rows. Schema 14 writes one
    /// JSON-text row per event.
    pub fn batch(&mut self, events: &[JsonMap]) -> io::Result<Vec<EventRow>> {
        match self.schema {
            Schema::V14 => self.scalar_rows(events),
            Schema::V17 => pack_rows(events).iter().map(|row| self.v17(row)).collect(),
        }
    }

    /// One row per event, never packed: a repair's recovered events and
    /// closers (spec §11.5, "Repair").
    pub fn scalar_rows(&mut self, events: &[JsonMap]) -> io::Result<Vec<EventRow>> {
        events
            .iter()
            .map(|event| match self.schema {
                Schema::V14 => scalar_v14(event),
                Schema::V17 => self.v17(event),
            })
            .collect()
    }

    /// A schema-17 row from `pack_rows`: a packed row, or one scalar event.
    fn v17(&mut self, row: &JsonMap) -> io::Result<EventRow> {
        let Some(kind) = packed_kind(row) else {
            let source_event_seqs = match row.get("sourceEventSeqs") {
                Some(seqs) => SqlValue::Blob(encode_source_seqs(&source_seqs_of(seqs)?)),
                None => SqlValue::Null,
            };
            let data = self.data_column(json_text(field(row, "data")?)?)?;
            return scalar(row, data, source_event_seqs);
        };
        Ok(EventRow {
            seq: integer_field(row, "seq0")?,
            event_type: kind.tag().to_string(),
            time: integer_field(row, "time0")?,
            data: self.data_column(json_text(field(row, "data")?)?)?,
            source_event_seqs: SqlValue::Null,
            surface_op: SqlValue::Null,
            ignorable: SqlValue::Integer(0),
        })
    }

    /// Writes `data` JSON text as the Harness does: TEXT under 4096 bytes, else
    /// a zstd frame (level 3, content size, no checksum) when strictly smaller.
    pub(super) fn data_column(&mut self, text: String) -> io::Result<SqlValue> {
        if text.len() < COMPRESS_FROM_BYTES {
            return Ok(SqlValue::Text(text));
        }
        let blob = self.compressor.compress(text.as_bytes())?;
        Ok(if blob.len() < text.len() {
            SqlValue::Blob(blob)
        } else {
            SqlValue::Text(text)
        })
    }
}

/// Inserts `rows` of session `session_id` (in the caller's transaction).
pub fn insert_events(
    connection: &Connection,
    schema: Schema,
    session_id: &str,
    rows: &[EventRow],
) -> rusqlite::Result<()> {
    let insert = match schema {
        Schema::V14 => INSERT_EVENT_14,
        Schema::V17 => INSERT_EVENT_17,
    };
    let mut insert = connection.prepare_cached(insert)?;
    for row in rows {
        let (data, seqs, op) = (&row.data, &row.source_event_seqs, &row.surface_op);
        let (seq, event_type, time) = (row.seq, &row.event_type, row.time);
        match schema {
            Schema::V14 => {
                insert.execute(params![session_id, seq, event_type, time, data, seqs, op])
            }
            Schema::V17 => insert.execute(params![
                session_id,
                seq,
                event_type,
                time,
                data,
                seqs,
                op,
                row.ignorable
            ]),
        }?;
    }
    Ok(())
}

/// The `sessions` row of a new session, checked before any write: NULL for
/// every absent field, and the given incarnation and revision (the number of
/// committed batches, spec §11.5).
pub struct NewSession(SessionRow);

impl NewSession {
    /// Refused (`InvalidInput`) when the header would not decode back by the
    /// reader's rules, which would leave the session unreadable.
    pub fn new(
        header: &SessionHeader,
        incarnation: String,
        revision: u64,
    ) -> io::Result<NewSession> {
        SessionRow::for_new_session(header, incarnation, revision)
            .map(NewSession)
            .map_err(|reason| invalid_input(format!("cannot store the session header: {reason}")))
    }

    /// Inserts the `sessions` row.
    pub fn insert(&self, connection: &Connection) -> rusqlite::Result<()> {
        connection
            .prepare_cached(INSERT_SESSION)?
            .execute(self.0.cells())
            .map(drop)
    }
}

pub(super) fn invalid_input(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message.into())
}

/// A schema-14 row: one event, JSON text in every column, never compressed.
fn scalar_v14(event: &JsonMap) -> io::Result<EventRow> {
    let source_event_seqs = match event.get("sourceEventSeqs") {
        Some(seqs) => SqlValue::Text(json_text(seqs)?),
        None => SqlValue::Null,
    };
    scalar(
        event,
        SqlValue::Text(json_text(field(event, "data")?)?),
        source_event_seqs,
    )
}

/// The columns both schemas fill alike for one event.
fn scalar(event: &JsonMap, data: SqlValue, source_event_seqs: SqlValue) -> io::Result<EventRow> {
    let event_type = field(event, "type")?
        .as_str()
        .ok_or_else(|| invalid_input("event type is not a string"))?;
    Ok(EventRow {
        seq: integer_field(event, "seq")?,
        event_type: event_type.to_string(),
        time: integer_field(event, "time")?,
        data,
        source_event_seqs,
        surface_op: match event.get("surfaceOp") {
            Some(op) => SqlValue::Text(json_text(op)?),
            None => SqlValue::Null,
        },
        ignorable: if event.contains_key("ignorable") {
            SqlValue::Integer(1)
        } else {
            SqlValue::Null
        },
    })
}

fn json_text(value: &Value) -> io::Result<String> {
    serde_json::to_string(value).map_err(io::Error::other)
}

fn field<'a>(map: &'a JsonMap, key: &str) -> io::Result<&'a Value> {
    map.get(key)
        .ok_or_else(|| invalid_input(format!("event has no {key}")))
}

fn integer_field(map: &JsonMap, key: &str) -> io::Result<i64> {
    safe_integer(field(map, key)?)
        .ok_or_else(|| invalid_input(format!("event {key} is not a safe integer")))
}

fn source_seqs_of(value: &Value) -> io::Result<Vec<u64>> {
    value
        .as_array()
        .and_then(|seqs| seqs.iter().map(non_negative_safe_integer).collect())
        .ok_or_else(|| {
            invalid_input("sourceEventSeqs is not an array of non-negative safe integers")
        })
}

/// Packs events into schema-17 rows; see [`RowEncoder::batch`].
pub(super) fn pack_rows(events: &[JsonMap]) -> Vec<JsonMap> {
    let mut rows = Vec::new();
    for row in chunk_rows::pack(events, SQLITE_ROW_LIMITS.max_members) {
        let oversized_run = packed_kind(&row)
            .filter(|_| packed_data_len(&row) > MAX_PACKED_DATA_BYTES)
            .and_then(|kind| chunk_rows::expand_jsonl_row(kind, &row, JSONL_ROW_LIMITS).ok());
        match oversized_run {
            Some(members) => split_oversized_run(&members, &mut rows),
            None => rows.push(row),
        }
    }
    rows
}

/// The tag of a packed row made by `chunk_rows::pack`; `None` for an event.
fn packed_kind(row: &JsonMap) -> Option<RowKind> {
    if !row.contains_key("seq0") {
        return None;
    }
    row.get("type")
        .and_then(Value::as_str)
        .and_then(RowKind::from_tag)
}

fn packed_data_len(row: &JsonMap) -> usize {
    row.get("data")
        .and_then(|data| serde_json::to_string(data).ok())
        .map_or(0, |text| text.len())
}

/// Cuts one run of packable events into rows whose data fits in 1 MiB.
fn split_oversized_run(members: &[JsonMap], rows: &mut Vec<JsonMap>) {
    let min = SQLITE_ROW_LIMITS.min_members;
    let packed_if_fits = |run: &[JsonMap]| {
        let mut packed = chunk_rows::pack(run, SQLITE_ROW_LIMITS.max_members);
        (packed.len() == 1 && packed_data_len(&packed[0]) <= MAX_PACKED_DATA_BYTES)
            .then(|| packed.remove(0))
    };
    let mut rest = members;
    while rest.len() >= min {
        let Some(mut best) = packed_if_fits(&rest[..min]) else {
            rows.push(rest[0].clone());
            rest = &rest[1..];
            continue;
        };
        // Binary search for the longest prefix that fits: `fits` members do.
        let (mut fits, mut too_long) = (min, rest.len() + 1);
        while too_long - fits > 1 {
            let middle = (fits + too_long) / 2;
            match packed_if_fits(&rest[..middle]) {
                Some(row) => (fits, best) = (middle, row),
                None => too_long = middle,
            }
        }
        rows.push(best);
        rest = &rest[fits..];
    }
    rows.extend(rest.iter().cloned());
}
