//! Row decoding: `sessions` and `events` rows as stored, turned into headers
//! and logical events by the Harness's rules (spec §11.2, §11.3, §11.7).

use std::borrow::Cow;
use std::io::Read;

use rusqlite::ToSql;
use rusqlite::types::{ToSqlOutput, ValueRef};
use serde_json::{Map, Value};

use super::schema::Schema;
use super::varint::decode_source_seqs;
use crate::json::{JsonMap, MAX_SAFE_INTEGER, safe_integer};
use crate::model::ChunkRun;
use crate::model::chunk_rows::{self, RowKind, SQLITE_ROW_LIMITS};
use crate::model::header::SessionHeader;
use crate::model::quick;
use crate::model::validate::CHUNK_TYPE;
use crate::store::tail::Decoded;

/// The schema's limit on a packed row's `data` JSON, text or decompressed (spec §11.3).
pub(super) const MAX_PACKED_DATA_BYTES: usize = 1 << 20;

/// Scalar rows have no limit in the Harness. A BLOB that decompresses beyond
/// this does not decode, rather than being allowed to exhaust memory.
pub(super) const MAX_SCALAR_DATA_BYTES: usize = 64 << 20;

/// `^[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, any case.
pub(super) fn is_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(group, len)| group.len() == len && group.bytes().all(|b| b.is_ascii_hexdigit()))
        && groups[2].starts_with(|c: char| ('1'..='8').contains(&c))
        && groups[3].starts_with(|c: char| matches!(c.to_ascii_lowercase(), '8' | '9' | 'a' | 'b'))
}

/// One stored column value. TEXT is decoded as the Harness's JS runtime decodes
/// it (invalid UTF-8 becomes U+FFFD), so damaged text is a question for the row
/// decoder rather than a failed query.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Cell {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl Cell {
    pub(super) fn read(row: &rusqlite::Row, index: usize) -> rusqlite::Result<Cell> {
        Ok(match row.get_ref(index)? {
            ValueRef::Null => Cell::Null,
            ValueRef::Integer(i) => Cell::Integer(i),
            ValueRef::Real(r) => Cell::Real(r),
            ValueRef::Text(text) => Cell::Text(String::from_utf8_lossy(text).into_owned()),
            ValueRef::Blob(blob) => Cell::Blob(blob.to_vec()),
        })
    }

    pub(super) fn type_name(&self) -> &'static str {
        match self {
            Cell::Null => "NULL",
            Cell::Integer(_) => "INTEGER",
            Cell::Real(_) => "REAL",
            Cell::Text(_) => "TEXT",
            Cell::Blob(_) => "BLOB",
        }
    }

    pub(super) fn safe_integer(&self) -> Option<i64> {
        match self {
            Cell::Integer(i) if i.abs() <= MAX_SAFE_INTEGER => Some(*i),
            _ => None,
        }
    }

    fn optional_text(&self, column: &str) -> Result<Option<String>, String> {
        match self {
            Cell::Null => Ok(None),
            Cell::Text(text) => Ok(Some(text.clone())),
            other => Err(format!(
                "malformed sessions row: {column} is {}, not NULL or TEXT",
                other.type_name()
            )),
        }
    }

    fn optional_count(&self, column: &str) -> Result<Option<u64>, String> {
        match self {
            Cell::Null => Ok(None),
            _ => match self.safe_integer().and_then(|i| u64::try_from(i).ok()) {
                Some(count) => Ok(Some(count)),
                None => Err(format!(
                    "malformed sessions row: {column} is not NULL or a non-negative safe integer"
                )),
            },
        }
    }

    /// A TEXT column holding JSON; NULL is absent. Inlined as the match it
    /// replaces was: every scalar row of a scan passes here.
    #[inline(always)]
    fn optional_json(&self, column: &str) -> Result<Option<Value>, String> {
        match self {
            Cell::Null => Ok(None),
            Cell::Text(text) => parse_json(text, column).map(Some),
            other => Err(format!("{column} is {}", other.type_name())),
        }
    }

    fn text_or_null(value: &Option<String>) -> Cell {
        value.clone().map_or(Cell::Null, Cell::Text)
    }

    fn count_or_null(value: Option<u64>, column: &str) -> Result<Cell, String> {
        match value {
            None => Ok(Cell::Null),
            Some(count) => i64::try_from(count)
                .map(Cell::Integer)
                .map_err(|_| format!("{column} {count} is too large")),
        }
    }
}

impl ToSql for Cell {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Cell::Null => ValueRef::Null,
            Cell::Integer(i) => ValueRef::Integer(*i),
            Cell::Real(r) => ValueRef::Real(*r),
            Cell::Text(text) => ValueRef::Text(text.as_bytes()),
            Cell::Blob(blob) => ValueRef::Blob(blob),
        }))
    }
}

/// A `sessions` row, column by column as stored.
pub(super) struct SessionRow {
    pub(super) id: Cell,
    pub(super) version: Cell,
    pub(super) created_at: Cell,
    pub(super) cwd: Cell,
    pub(super) parent_session: Cell,
    pub(super) seed_length: Cell,
    pub(super) origin: Cell,
    pub(super) delegation_depth: Cell,
    pub(super) agent_preset: Cell,
    pub(super) incarnation: Cell,
    pub(super) revision: Cell,
}

impl SessionRow {
    pub(super) fn read(row: &rusqlite::Row) -> rusqlite::Result<SessionRow> {
        Ok(SessionRow {
            id: Cell::read(row, 0)?,
            version: Cell::read(row, 1)?,
            created_at: Cell::read(row, 2)?,
            cwd: Cell::read(row, 3)?,
            parent_session: Cell::read(row, 4)?,
            seed_length: Cell::read(row, 5)?,
            origin: Cell::read(row, 6)?,
            delegation_depth: Cell::read(row, 7)?,
            agent_preset: Cell::read(row, 8)?,
            incarnation: Cell::read(row, 9)?,
            revision: Cell::read(row, 10)?,
        })
    }

    /// The row a new session is inserted with: NULL for every absent field. It
    /// must decode back by the reader's rules, or the session would be unreadable.
    pub(super) fn for_new_session(
        header: &SessionHeader,
        incarnation: String,
        revision: u64,
    ) -> Result<SessionRow, String> {
        let row = SessionRow {
            id: Cell::Text(header.id.clone()),
            version: safe_integer(&header.version)
                .map(Cell::Integer)
                .ok_or("version is not a safe integer")?,
            created_at: Cell::Integer(header.created_at),
            cwd: Cell::text_or_null(&header.cwd),
            parent_session: Cell::text_or_null(&header.parent_session),
            seed_length: Cell::count_or_null(header.seed_length, "seedLength")?,
            origin: Cell::text_or_null(&header.origin),
            delegation_depth: Cell::count_or_null(header.delegation_depth, "delegationDepth")?,
            agent_preset: Cell::text_or_null(&header.agent_preset),
            incarnation: Cell::Text(incarnation),
            revision: Cell::count_or_null(Some(revision), "revision")?,
        };
        row.header()?;
        Ok(row)
    }

    pub(super) fn cells(&self) -> [&Cell; 11] {
        [
            &self.id,
            &self.version,
            &self.created_at,
            &self.cwd,
            &self.parent_session,
            &self.seed_length,
            &self.origin,
            &self.delegation_depth,
            &self.agent_preset,
            &self.incarnation,
            &self.revision,
        ]
    }

    /// The header, decoded by the Harness's rules (spec §11.2): NULL is absent.
    pub(super) fn header(&self) -> Result<SessionHeader, String> {
        let id = match &self.id {
            Cell::Text(id) if !id.is_empty() => id.clone(),
            _ => return Err("malformed sessions row: id is not a non-empty TEXT".into()),
        };
        let version = self
            .version
            .safe_integer()
            .ok_or("malformed sessions row: version is not a safe integer")?;
        let created_at = self
            .created_at
            .safe_integer()
            .filter(|t| *t >= 0)
            .ok_or("malformed sessions row: created_at is not a non-negative safe integer")?;
        let cwd = self.cwd.optional_text("cwd")?;
        if cwd.as_deref().is_some_and(|cwd| !cwd.starts_with('/')) {
            return Err("malformed sessions row: cwd is not an absolute path".into());
        }
        let origin = self.origin.optional_text("origin")?;
        if origin.as_deref().is_some_and(|origin| origin != "subagent") {
            return Err("malformed sessions row: origin is not NULL or 'subagent'".into());
        }
        if !matches!(&self.incarnation, Cell::Text(incarnation) if is_uuid(incarnation)) {
            return Err("malformed sessions row: incarnation is not a UUID".into());
        }
        if self.revision.safe_integer().is_none_or(|r| r < 0) {
            return Err(
                "malformed sessions row: revision is not a non-negative safe integer".into(),
            );
        }
        Ok(SessionHeader {
            version: version.into(),
            id,
            created_at,
            cwd,
            parent_session: self.parent_session.optional_text("parent_session")?,
            seed_length: self.seed_length.optional_count("seed_length")?,
            origin,
            delegation_depth: self.delegation_depth.optional_count("delegation_depth")?,
            agent_preset: self.agent_preset.optional_text("agent_preset")?,
        })
    }
}

/// One `events` row as stored.
#[derive(Debug)]
pub(super) struct PhysicalRow {
    pub(super) seq: u64,
    pub(super) event_type: Cell,
    pub(super) time: Cell,
    pub(super) data: Cell,
    pub(super) source_event_seqs: Cell,
    pub(super) surface_op: Cell,
    /// Always NULL in schema 14, which has no such column.
    pub(super) ignorable: Cell,
}

/// One batch of a session's rows, decoded: each row's seq and what it holds.
pub(super) struct RowBatch {
    pub(super) rows: Vec<(u64, Decoded)>,
    /// The batch is as long as a batch can be: more rows may follow.
    pub(super) full: bool,
}

impl RowBatch {
    /// Where the next batch starts, when one may follow.
    pub(super) fn next_row(&self) -> Option<i64> {
        let (last, _) = self.rows.last().filter(|_| self.full)?;
        Some(i64::try_from(*last).unwrap_or(i64::MAX).saturating_add(1))
    }
}

impl PhysicalRow {
    pub(super) fn read(row: &rusqlite::Row) -> rusqlite::Result<PhysicalRow> {
        Ok(PhysicalRow {
            // The queries select seq ≥ 0 only.
            seq: row.get::<_, i64>(0).and_then(|seq| {
                u64::try_from(seq).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(0, seq))
            })?,
            event_type: Cell::read(row, 1)?,
            time: Cell::read(row, 2)?,
            data: Cell::read(row, 3)?,
            source_event_seqs: Cell::read(row, 4)?,
            surface_op: Cell::read(row, 5)?,
            ignorable: Cell::read(row, 6)?,
        })
    }

    /// Reads a row of streamed chunks quickly (`model::quick`); `None` means
    /// only that the row is decoded in full.
    pub(super) fn quick(&self) -> Option<ChunkRun> {
        let Cell::Text(event_type) = &self.event_type else {
            return None;
        };
        let time = self.time.safe_integer()?;
        if self.seq > MAX_SAFE_INTEGER as u64 || self.has_scalar_columns() {
            return None;
        }
        match (&self.ignorable, event_type.as_str()) {
            // Schema 14 selects NULL for the column it lacks; its data is TEXT only.
            (Cell::Null, CHUNK_TYPE) if matches!(self.data, Cell::Text(_)) => {
                let data = data_text(&self.data, MAX_SCALAR_DATA_BYTES).ok()?;
                quick::lone_chunk_row(self.seq, time, data.as_bytes())
            }
            (Cell::Integer(0), tag) => {
                let data = data_text(&self.data, MAX_PACKED_DATA_BYTES).ok()?;
                let kind = RowKind::from_tag(tag)?;
                quick::row_data(kind, self.seq, time, data.as_bytes(), SQLITE_ROW_LIMITS)
            }
            _ => None,
        }
    }

    /// The logical events this row holds (spec §11.2, §11.3, §11.7), or why it
    /// does not decode.
    pub(super) fn decode(&self, schema: Schema) -> Result<Vec<JsonMap>, String> {
        if self.seq > MAX_SAFE_INTEGER as u64 {
            return Err("seq is not a safe integer".into());
        }
        let event_type = match &self.event_type {
            Cell::Text(t) if !t.is_empty() => t.as_str(),
            _ => return Err("type is not a non-empty TEXT".into()),
        };
        let time = self
            .time
            .safe_integer()
            .ok_or("time is not a safe integer")?;
        let scalar =
            |source_event_seqs: Option<Value>, ignorable: bool| -> Result<Vec<JsonMap>, String> {
                let data = self.data_json(MAX_SCALAR_DATA_BYTES)?;
                let surface_op = self.surface_op.optional_json("surface_op")?;
                Ok(vec![scalar_event(
                    event_type,
                    self.seq,
                    time,
                    data,
                    source_event_seqs,
                    surface_op,
                    ignorable,
                )])
            };
        match schema {
            Schema::V14 => {
                if !matches!(self.data, Cell::Text(_)) {
                    return Err(format!("data is {}, not TEXT", self.data.type_name()));
                }
                let source_event_seqs =
                    self.source_event_seqs.optional_json("source_event_seqs")?;
                scalar(source_event_seqs, false)
            }
            Schema::V17 => {
                let ignorable = match self.ignorable {
                    Cell::Integer(0) => return self.decode_packed(event_type, time),
                    Cell::Null => false,
                    Cell::Integer(1) => true,
                    _ => return Err("ignorable is not NULL, 0 or 1".into()),
                };
                let source_event_seqs = match &self.source_event_seqs {
                    Cell::Null => None,
                    Cell::Blob(blob) => Some(
                        decode_source_seqs(blob)?
                            .into_iter()
                            .map(Value::from)
                            .collect(),
                    ),
                    other => {
                        return Err(format!(
                            "source_event_seqs is {}, not a BLOB",
                            other.type_name()
                        ));
                    }
                };
                scalar(source_event_seqs, ignorable)
            }
        }
    }

    fn decode_packed(&self, tag: &str, time0: i64) -> Result<Vec<JsonMap>, String> {
        let kind = RowKind::from_tag(tag)
            .ok_or_else(|| format!("packed row type {tag:?} is not a chunk tag"))?;
        if self.has_scalar_columns() {
            return Err("packed row has source_event_seqs or surface_op".into());
        }
        let Value::Object(data) = self.data_json(MAX_PACKED_DATA_BYTES)? else {
            return Err("packed row data is not an object".into());
        };
        // seq ≤ 2^53 − 1 was checked by the caller.
        chunk_rows::expand_row_data(kind, self.seq as i64, time0, &data, SQLITE_ROW_LIMITS)
    }

    /// A row with either scalar-only column set is not a packed row.
    #[inline]
    fn has_scalar_columns(&self) -> bool {
        self.source_event_seqs != Cell::Null || self.surface_op != Cell::Null
    }

    /// The `data` column as JSON, refused beyond `limit` bytes.
    #[inline]
    fn data_json(&self, limit: usize) -> Result<Value, String> {
        parse_json(&data_text(&self.data, limit)?, "data")
    }
}

/// A scalar row's event, keys in the order the Harness decodes them (spec §2.4).
fn scalar_event(
    event_type: &str,
    seq: u64,
    time: i64,
    data: Value,
    source_event_seqs: Option<Value>,
    surface_op: Option<Value>,
    ignorable: bool,
) -> JsonMap {
    let mut event = Map::new();
    event.insert("type".into(), event_type.into());
    event.insert("seq".into(), seq.into());
    event.insert("time".into(), time.into());
    event.insert("data".into(), data);
    if let Some(seqs) = source_event_seqs {
        event.insert("sourceEventSeqs".into(), seqs);
    }
    if let Some(op) = surface_op {
        event.insert("surfaceOp".into(), op);
    }
    if ignorable {
        event.insert("ignorable".into(), true.into());
    }
    event
}

fn parse_json(text: &str, column: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("{column} is not JSON: {e}"))
}

thread_local! {
    /// A decompression context per thread, reused: large rows are compressed
    /// one by one, and a fresh context per row would cost more than the row.
    static BLOB_CONTEXT: std::cell::RefCell<zstd::zstd_safe::DCtx<'static>> =
        std::cell::RefCell::new(zstd::zstd_safe::DCtx::create());
}

/// The JSON text of a `data` column: TEXT as it is, a BLOB zstd-decompressed and
/// decoded as strict UTF-8, either refused beyond `limit` bytes.
pub(super) fn data_text(data: &Cell, limit: usize) -> Result<Cow<'_, str>, String> {
    match data {
        Cell::Text(text) if text.len() > limit => Err(format!("data is longer than {limit} bytes")),
        Cell::Text(text) => Ok(Cow::Borrowed(text)),
        Cell::Blob(blob) => {
            let mut plain = Vec::new();
            BLOB_CONTEXT.with_borrow_mut(|context| {
                context
                    .reset(zstd::zstd_safe::ResetDirective::SessionOnly)
                    .map_err(|code| {
                        format!("data BLOB: {}", zstd::zstd_safe::get_error_name(code))
                    })?;
                zstd::stream::read::Decoder::with_context(&blob[..], context)
                    .take(limit as u64 + 1)
                    .read_to_end(&mut plain)
                    .map_err(|e| format!("data BLOB does not decompress: {e}"))
            })?;
            if plain.len() > limit {
                return Err(format!("data decompresses to more than {limit} bytes"));
            }
            String::from_utf8(plain)
                .map(Cow::Owned)
                .map_err(|_| "decompressed data is not UTF-8".into())
        }
        other => Err(format!("data is {}, not TEXT or BLOB", other.type_name())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(id: &str) -> SessionHeader {
        SessionHeader {
            cwd: Some("/workspace/orbit".into()),
            parent_session: Some("orbit-debug-tools".into()),
            seed_length: Some(3),
            ..SessionHeader::new(id, 1_780_000_000_000)
        }
    }

    fn row(
        seq: u64,
        event_type: &str,
        data: Cell,
        seqs: Cell,
        op: Cell,
        ignorable: Cell,
    ) -> PhysicalRow {
        PhysicalRow {
            seq,
            event_type: Cell::Text(event_type.into()),
            time: Cell::Integer(7),
            data,
            source_event_seqs: seqs,
            surface_op: op,
            ignorable,
        }
    }

    #[test]
    fn row_decoding_follows_the_ignorable_discriminator() {
        let packed_data =
            Cell::Text(r#"{"turn":1,"step":1,"index":0,"dt":[1,1],"texts":["a","b","c"]}"#.into());
        let packed = row(
            4,
            "text-chunks",
            packed_data.clone(),
            Cell::Null,
            Cell::Null,
            Cell::Integer(0),
        );
        assert_eq!(packed.decode(Schema::V17).unwrap().len(), 3);
        // A scalar row with a chunk tag as its type is one event, never a packed row.
        let scalar = row(
            4,
            "text-chunks",
            packed_data.clone(),
            Cell::Null,
            Cell::Null,
            Cell::Integer(1),
        );
        let events = scalar.decode(Schema::V17).unwrap();
        assert_eq!(
            serde_json::to_string(&events[0]).unwrap(),
            format!(
                r#"{{"type":"text-chunks","seq":4,"time":7,"data":{},"ignorable":true}}"#,
                r#"{"turn":1,"step":1,"index":0,"dt":[1,1],"texts":["a","b","c"]}"#
            )
        );

        let rejected = [
            row(
                4,
                "text-chunks",
                packed_data.clone(),
                Cell::Blob(vec![4]),
                Cell::Null,
                Cell::Integer(0),
            ),
            row(
                4,
                "text-chunks",
                packed_data.clone(),
                Cell::Null,
                Cell::Text("\"append\"".into()),
                Cell::Integer(0),
            ),
            row(
                4,
                "user/message",
                packed_data.clone(),
                Cell::Null,
                Cell::Null,
                Cell::Integer(0),
            ),
            row(
                4,
                "user/message",
                packed_data.clone(),
                Cell::Null,
                Cell::Null,
                Cell::Integer(2),
            ),
            row(
                4,
                "user/message",
                Cell::Real(1.0),
                Cell::Null,
                Cell::Null,
                Cell::Null,
            ),
            row(
                4,
                "user/message",
                Cell::Blob(b"{}".to_vec()),
                Cell::Null,
                Cell::Null,
                Cell::Null,
            ),
            row(
                4,
                "user/message",
                Cell::Text("{}".into()),
                Cell::Text("[4]".into()),
                Cell::Null,
                Cell::Null,
            ),
            row(
                4,
                "",
                Cell::Text("{}".into()),
                Cell::Null,
                Cell::Null,
                Cell::Null,
            ),
            row(
                MAX_SAFE_INTEGER as u64 + 1,
                "x/y",
                Cell::Text("{}".into()),
                Cell::Null,
                Cell::Null,
                Cell::Null,
            ),
        ];
        for bad in rejected {
            assert!(bad.decode(Schema::V17).is_err(), "{bad:?}");
        }
        let v14 = row(
            4,
            "tool/result",
            Cell::Text("{}".into()),
            Cell::Text("[1,2]".into()),
            Cell::Text("\"append\"".into()),
            Cell::Null,
        );
        assert_eq!(
            serde_json::to_string(&v14.decode(Schema::V14).unwrap()[0]).unwrap(),
            r#"{"type":"tool/result","seq":4,"time":7,"data":{},"sourceEventSeqs":[1,2],"surfaceOp":"append"}"#
        );
        assert!(
            row(
                4,
                "x/y",
                Cell::Text("{}".into()),
                Cell::Blob(vec![4]),
                Cell::Null,
                Cell::Null
            )
            .decode(Schema::V14)
            .is_err()
        );
    }

    #[test]
    fn session_rows_follow_the_null_rules() {
        let mut session =
            SessionRow::for_new_session(&header("a"), crate::random::uuid_v4().unwrap(), 1)
                .unwrap();
        assert!(matches!(&session.incarnation, Cell::Text(uuid) if is_uuid(uuid)));
        assert_eq!(session.header().unwrap(), header("a"));
        session.cwd = Cell::Text("relative/dir".into());
        assert!(session.header().is_err());
        session.cwd = Cell::Null;
        session.origin = Cell::Text("parent".into());
        assert!(session.header().is_err());
        session.origin = Cell::Null;
        session.delegation_depth = Cell::Integer(-1);
        assert!(session.header().is_err());
        session.delegation_depth = Cell::Null;
        session.incarnation = Cell::Text("not-a-uuid".into());
        assert!(session.header().is_err());
        assert!(is_uuid("18036197-390D-4076-B22E-730784217679"));
        assert!(!is_uuid("18036197-390d-9076-b22e-730784217679"));
    }
}
