//! The SQLite backend (spec §11): one database file holding every session, in
//! the reference tag's schema 17 (packed chunk rows, zstd BLOBs, varint seq
//! lists) or the published package's schema 14 (one JSON-text row per event).
//!
//! Reads share one read-only connection and end every transaction before they
//! return, so the Harness can keep writing and checkpointing. Fork children are
//! written through a separate read-write connection in one `BEGIN IMMEDIATE`
//! transaction (spec §11.5, §11.7).

use std::borrow::Cow;
use std::io::{self, Read};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rusqlite::types::{ToSqlOutput, Value as SqlValue, ValueRef};
use rusqlite::{
    Connection, ErrorCode, OpenFlags, OptionalExtension, ToSql, Transaction, TransactionBehavior,
    params,
};
use serde_json::{Map, Value};

use super::tail::{Decoded, TailScanner};
use super::{
    Backend, EventLoc, EventSink, Listing, Revision, ScanEnd, ScanPoint, SessionKey, read_ahead,
};
use crate::json::{JsonMap, MAX_SAFE_INTEGER, non_negative_safe_integer, safe_integer};
use crate::model::Refusal;
use crate::model::chunk_rows::{self, JSONL_ROW_LIMITS, RowKind, SQLITE_ROW_LIMITS};
use crate::model::fold::CHUNK_TYPE;
use crate::model::header::SessionHeader;
use crate::model::quick::{self, ChunkRun};
use crate::model::validate::check_envelope;

/// `PRAGMA application_id` of a Harness database: the ASCII bytes "DSHP".
const APPLICATION_ID: i64 = 0x4453_4850;

/// The Harness's default busy timeout (spec §11.1).
/// Rows read per read transaction while scanning.
const SCAN_BATCH_ROWS: i64 = 4096;

const BUSY_TIMEOUT: Duration = Duration::from_millis(5000);

/// The schema's limit on a packed row's `data` JSON, text or decompressed (spec §11.3).
const MAX_PACKED_DATA_BYTES: usize = 1 << 20;

/// Scalar rows have no limit in the Harness. A BLOB that decompresses beyond
/// this does not decode, rather than being allowed to exhaust memory.
const MAX_SCALAR_DATA_BYTES: usize = 64 << 20;

/// `data` JSON text of this many bytes or more is offered to zstd (spec §11.3).
const COMPRESS_FROM_BYTES: usize = 4096;

const ZSTD_LEVEL: i32 = 3;

/// The user-schema table definitions with whitespace runs collapsed (spec §11.2,
/// §11.7), in the `ORDER BY type, name` order they are compared in.
const EVENTS_17_SQL: &str = "CREATE TABLE events ( session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, seq INTEGER NOT NULL, type TEXT NOT NULL, time INTEGER NOT NULL, data ANY NOT NULL, source_event_seqs ANY, surface_op TEXT, ignorable INTEGER CHECK (ignorable IS NULL OR ignorable IN (0, 1)), PRIMARY KEY (session_id, seq) ) STRICT";
const EVENTS_14_SQL: &str = "CREATE TABLE events ( session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, seq INTEGER NOT NULL, type TEXT NOT NULL, time INTEGER NOT NULL, data TEXT NOT NULL, source_event_seqs TEXT, surface_op TEXT, PRIMARY KEY (session_id, seq) ) STRICT";
const PERSISTENCE_STATE_SQL: &str = "CREATE TABLE persistence_state ( singleton INTEGER PRIMARY KEY CHECK (singleton = 1), store_id TEXT NOT NULL ) STRICT";
const SESSIONS_SQL: &str = "CREATE TABLE sessions ( id TEXT PRIMARY KEY, version INTEGER NOT NULL, created_at INTEGER NOT NULL, cwd TEXT, parent_session TEXT, seed_length INTEGER, origin TEXT, delegation_depth INTEGER, agent_preset TEXT, incarnation TEXT NOT NULL, revision INTEGER NOT NULL ) STRICT";

const USER_SCHEMA: &str = "SELECT type, name, tbl_name, sql FROM sqlite_schema WHERE name NOT GLOB 'sqlite_*' ORDER BY type, name";

const LIST_SESSIONS: &str = "SELECT id, version, created_at, cwd, parent_session, seed_length, origin, delegation_depth, agent_preset, incarnation, revision FROM sessions";
const SESSION_BY_ID: &str = "SELECT id, version, created_at, cwd, parent_session, seed_length, origin, delegation_depth, agent_preset, incarnation, revision FROM sessions WHERE id = ?1";
const SESSION_EXISTS: &str = "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)";
const INSERT_SESSION: &str = "INSERT INTO sessions (id, version, created_at, cwd, parent_session, seed_length, origin, delegation_depth, agent_preset, incarnation, revision) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";

// Schema 14 has no `ignorable` column; selecting NULL in its place lets both
// schemas share one row type.
const ROWS_FROM_17: &str = "SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable FROM events WHERE session_id = ?1 AND seq >= ?2 ORDER BY seq LIMIT ?3";
const ROWS_FROM_14: &str = "SELECT seq, type, time, data, source_event_seqs, surface_op, NULL FROM events WHERE session_id = ?1 AND seq >= ?2 ORDER BY seq LIMIT ?3";
const ROW_AT_17: &str = "SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable FROM events WHERE session_id = ?1 AND seq = ?2";
const ROW_AT_14: &str = "SELECT seq, type, time, data, source_event_seqs, surface_op, NULL FROM events WHERE session_id = ?1 AND seq = ?2";
const INSERT_EVENT_17: &str = "INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, surface_op, ignorable) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
const INSERT_EVENT_14: &str = "INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, surface_op) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// The two row layouts, selected by `PRAGMA user_version`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Schema {
    V14,
    V17,
}

impl Schema {
    fn from_user_version(version: i64) -> Option<Schema> {
        match version {
            14 => Some(Schema::V14),
            17 => Some(Schema::V17),
            _ => None,
        }
    }

    fn number(self) -> u32 {
        match self {
            Schema::V14 => 14,
            Schema::V17 => 17,
        }
    }

    /// `(name, collapsed sql)` of each table, in `ORDER BY type, name` order.
    fn tables(self) -> [(&'static str, &'static str); 3] {
        let events = match self {
            Schema::V14 => EVENTS_14_SQL,
            Schema::V17 => EVENTS_17_SQL,
        };
        [
            ("events", events),
            ("persistence_state", PERSISTENCE_STATE_SQL),
            ("sessions", SESSIONS_SQL),
        ]
    }

    fn rows_from_sql(self) -> &'static str {
        match self {
            Schema::V14 => ROWS_FROM_14,
            Schema::V17 => ROWS_FROM_17,
        }
    }

    fn row_at_sql(self) -> &'static str {
        match self {
            Schema::V14 => ROW_AT_14,
            Schema::V17 => ROW_AT_17,
        }
    }

    /// The Harness's committed-corruption message, which the two schemas word
    /// differently (spec §8.3, §8.4).
    fn bad_row_message(self, seq: u64) -> String {
        match self {
            Schema::V14 => format!("corrupt session log: unparsable committed event at seq {seq}"),
            Schema::V17 => {
                format!("corrupt session log: invalid committed physical row at seq {seq}")
            }
        }
    }
}

/// A Harness session database, schema 14 or 17.
pub struct SqliteStore {
    path: PathBuf,
    schema: Schema,
    reader: Mutex<Connection>,
}

impl SqliteStore {
    /// Opens `path` read-only and checks that it is a Harness session database
    /// of a schema sessionfs reads (spec §11.1, §11.7). Nothing is written.
    pub fn open(path: &Path) -> Result<SqliteStore, String> {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let unreadable = |e: rusqlite::Error| {
            format!(
                "cannot read session database at \"{}\": {e}",
                path.display()
            )
        };
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let reader = Connection::open_with_flags(&path, flags).map_err(unreadable)?;
        reader.busy_timeout(BUSY_TIMEOUT).map_err(unreadable)?;
        reader
            .execute_batch("PRAGMA trusted_schema = OFF")
            .map_err(unreadable)?;
        let schema = check_identity(&reader, &path)?;
        Ok(SqliteStore {
            path,
            schema,
            reader: Mutex::new(reader),
        })
    }

    /// Runs `query` inside one short read transaction on the shared connection.
    fn read<T>(
        &self,
        query: impl FnOnce(&Transaction) -> rusqlite::Result<T>,
    ) -> Result<T, Refusal> {
        let mut reader = self.reader.lock().unwrap_or_else(PoisonError::into_inner);
        let transaction = reader.transaction().map_err(|e| self.unreadable(e))?;
        let result = query(&transaction).map_err(|e| self.unreadable(e))?;
        transaction.commit().map_err(|e| self.unreadable(e))?;
        Ok(result)
    }

    /// A failed read: damage when SQLite says the file is no database or is
    /// corrupt, else trouble reading it now (busy past the timeout, locked,
    /// permission, I/O), answered with the nearest errno.
    /// The database's write-ahead log (present in WAL mode).
    pub fn wal_path(&self) -> PathBuf {
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        PathBuf::from(wal)
    }

    fn unreadable(&self, error: rusqlite::Error) -> Refusal {
        use rusqlite::ErrorCode::*;
        let errno = match error.sqlite_error_code() {
            Some(DatabaseBusy | DatabaseLocked) => Some(libc::EBUSY),
            Some(PermissionDenied | ReadOnly) => Some(libc::EACCES),
            Some(CannotOpen | SystemIoFailure) => Some(libc::EIO),
            Some(OutOfMemory) => Some(libc::ENOMEM),
            _ => None,
        };
        let message = format!(
            "cannot read session database at \"{}\": {error}",
            self.path.display()
        );
        match errno {
            Some(errno) => Refusal::Unavailable {
                errno,
                reason: message,
            },
            None => Refusal::Corrupt(message),
        }
    }

    /// A session removed from the database while it was being read.
    fn gone(&self, id: &str) -> Refusal {
        Refusal::Unavailable {
            errno: libc::ENOENT,
            reason: format!(
                "session {id:?} no longer exists in session database at \"{}\"",
                self.path.display()
            ),
        }
    }

    fn session_row(&self, id: &str) -> Result<SessionRow, Refusal> {
        self.read(|tx| {
            tx.prepare_cached(SESSION_BY_ID)?
                .query_row([id], SessionRow::read)
                .optional()
        })?
        .ok_or_else(|| self.gone(id))
    }

    /// A read-write connection for one write; the journal mode is the Harness's
    /// to choose, so only per-connection settings are made.
    fn writer(&self) -> io::Result<Connection> {
        let failed = |e: rusqlite::Error| write_error(&self.path, e);
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let writer = Connection::open_with_flags(&self.path, flags).map_err(failed)?;
        writer.busy_timeout(BUSY_TIMEOUT).map_err(failed)?;
        writer
            .execute_batch(
                "PRAGMA trusted_schema = OFF; PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL;",
            )
            .map_err(failed)?;
        Ok(writer)
    }

    /// `BEGIN IMMEDIATE`, then the identity checks the Harness repeats inside every
    /// write transaction (spec §11.1).
    fn write_transaction<'a>(&self, writer: &'a mut Connection) -> io::Result<Transaction<'a>> {
        let transaction = writer
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| write_error(&self.path, e))?;
        let schema = check_identity(&transaction, &self.path).map_err(io::Error::other)?;
        if schema != self.schema {
            return Err(io::Error::other(format!(
                "session database at \"{}\" changed from schema {} to {} while mounted",
                self.path.display(),
                self.schema.number(),
                schema.number()
            )));
        }
        Ok(transaction)
    }

    fn insert_rows(
        &self,
        transaction: &Transaction,
        id: &str,
        rows: &[NewEventRow],
    ) -> io::Result<()> {
        let failed = |e: rusqlite::Error| write_error(&self.path, e);
        let insert = match self.schema {
            Schema::V14 => INSERT_EVENT_14,
            Schema::V17 => INSERT_EVENT_17,
        };
        let mut insert = transaction.prepare_cached(insert).map_err(failed)?;
        for row in rows {
            let data = &row.data;
            let (seqs, op) = (&row.source_event_seqs, &row.surface_op);
            match self.schema {
                Schema::V14 => insert.execute(params![
                    id,
                    row.seq,
                    row.event_type,
                    row.time,
                    data,
                    seqs,
                    op
                ]),
                Schema::V17 => insert.execute(params![
                    id,
                    row.seq,
                    row.event_type,
                    row.time,
                    data,
                    seqs,
                    op,
                    row.ignorable
                ]),
            }
            .map_err(failed)?;
        }
        Ok(())
    }

    /// Reads the rows of session `id` from row seq `from` on, at most one batch,
    /// in a short read transaction of its own (so memory stays bounded and a
    /// writer is never held up by a long read), and decodes them.
    fn decoded_batch(&self, id: &str, from: i64) -> Result<RowBatch, Refusal> {
        let rows = self.read(|tx| {
            if !session_exists(tx, id)? {
                return Ok(None);
            }
            let mut select = tx.prepare_cached(self.schema.rows_from_sql())?;
            let rows = select
                .query_map(params![id, from, SCAN_BATCH_ROWS], PhysicalRow::read)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(Some(rows))
        })?;
        let rows = rows.ok_or_else(|| self.gone(id))?;
        Ok(RowBatch {
            full: rows.len() == SCAN_BATCH_ROWS as usize,
            rows: rows
                .iter()
                .map(|row| (row.seq, self.decode_for_scan(row)))
                .collect(),
        })
    }

    /// Turns one physical row into the scanner's input.
    fn decode_for_scan(&self, row: &PhysicalRow) -> Decoded {
        if let Some(run) = row.quick() {
            return Decoded::Chunks(run);
        }
        match row.decode(self.schema) {
            Ok(events) => Decoded::Events(events),
            Err(reason) => {
                log::debug!(
                    "{}: row at seq {} does not decode: {reason}",
                    self.path.display(),
                    row.seq
                );
                Decoded::Bad(self.schema.bad_row_message(row.seq))
            }
        }
    }

    /// Builds the rows of a new session, validating everything that would make
    /// it unreadable before the database is touched.
    fn encode_session(
        &self,
        header: &SessionHeader,
        events: &[JsonMap],
    ) -> io::Result<(SessionRow, Vec<NewEventRow>)> {
        let session =
            SessionRow::for_new_session(header, crate::random::uuid_v4()?).map_err(|reason| {
                invalid_input(format!("cannot store the session header: {reason}"))
            })?;
        for (index, event) in events.iter().enumerate() {
            let seq = check_envelope(event).map_err(invalid_input)?;
            if seq != index as u64 {
                return Err(invalid_input(format!(
                    "event {index} has seq {seq}; a new session's seqs start at 0 without gaps"
                )));
            }
            if event.get("type").and_then(Value::as_str) == Some("") {
                return Err(invalid_input(format!(
                    "event {seq} has an empty type, which SQLite rows cannot hold"
                )));
            }
            if self.schema == Schema::V14 && event.contains_key("ignorable") {
                return Err(invalid_input(format!(
                    "event {seq} is marked ignorable, which a schema-14 database cannot store; the child would be unreadable"
                )));
            }
        }
        let rows = match self.schema {
            Schema::V14 => events
                .iter()
                .map(NewEventRow::scalar_v14)
                .collect::<io::Result<_>>()?,
            Schema::V17 => pack_rows(events)
                .iter()
                .map(NewEventRow::v17)
                .collect::<io::Result<_>>()?,
        };
        Ok((session, rows))
    }
}

impl Backend for SqliteStore {
    fn describe(&self) -> String {
        format!(
            "sqlite schema {} database {}",
            self.schema.number(),
            self.path.display()
        )
    }

    fn list(&self) -> Vec<Listing> {
        self.try_list().unwrap_or_else(|refusal| {
            log::error!("cannot list sessions: {refusal}");
            Vec::new()
        })
    }

    fn watch_dirs(&self) -> Vec<PathBuf> {
        self.path
            .parent()
            .map(Path::to_path_buf)
            .into_iter()
            .collect()
    }

    /// Writes land in the database file or its WAL; `-shm` and `-journal`
    /// are SQLite's bookkeeping and change with reads too.
    fn is_data_change(&self, name: &str) -> bool {
        let file = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
        Some(name.to_string()) == file(&self.path)
            || Some(name.to_string()) == file(&self.wal_path())
    }

    fn try_list(&self) -> Result<Vec<Listing>, Refusal> {
        let rows: Vec<SessionRow> = self.read(|tx| {
            tx.prepare_cached(LIST_SESSIONS)?
                .query_map([], SessionRow::read)?
                .collect()
        })?;
        Ok(rows
            .into_iter()
            .filter_map(|row| {
                let Cell::Text(id) = &row.id else {
                    // Without a text id the row cannot be looked up again.
                    log::warn!(
                        "{}: skipping a sessions row whose id is {}",
                        self.path.display(),
                        row.id.type_name()
                    );
                    return None;
                };
                Some(Listing {
                    id: id.clone(),
                    key: SessionKey::Row(id.clone()),
                    header: row.header(),
                    raw_name: None,
                })
            })
            .collect())
    }

    fn header(&self, key: &SessionKey) -> Result<SessionHeader, Refusal> {
        let id = row_id(key)?;
        self.session_row(id)?
            .header()
            .map_err(|reason| Refusal::Corrupt(format!("session {id:?}: {reason}")))
    }

    fn revision(&self, key: &SessionKey) -> Result<Revision, Refusal> {
        let id = row_id(key)?;
        let row = self.session_row(id)?;
        match (&row.incarnation, row.revision.safe_integer()) {
            (Cell::Text(incarnation), Some(revision)) => {
                Ok(Revision(format!("{incarnation}:{revision}")))
            }
            _ => Err(Refusal::Corrupt(format!(
                "session {id:?}: malformed sessions row: incarnation or revision is invalid"
            ))),
        }
    }

    /// The database's last write: the later of the file and its write-ahead log.
    /// Per-session times are not stored, so a write to any session counts. An
    /// empty write-ahead log holds no write: opening the database (sessionfs's
    /// own reader does) creates it, and `-shm` is never a write of data.
    fn modified(&self, _key: &SessionKey) -> Option<std::time::SystemTime> {
        let written = |path: PathBuf| {
            std::fs::metadata(path)
                .ok()
                .filter(|m| m.len() > 0)
                .and_then(|m| m.modified().ok())
        };
        let wal = self.wal_path();
        [written(self.path.clone()), written(wal)]
            .into_iter()
            .flatten()
            .max()
    }

    fn scan(
        &self,
        key: &SessionKey,
        from: &ScanPoint,
        sink: &mut EventSink,
    ) -> Result<(ScanPoint, ScanEnd), Refusal> {
        let id = row_id(key)?;
        let first_row = i64::try_from(from.offset).unwrap_or(i64::MAX);
        let mut scanner = TailScanner::new(from.events);
        let mut first_torn_row = None;
        let mut feed = |batch: Vec<(u64, Decoded)>| -> Result<(), Refusal> {
            for (seq, decoded) in batch {
                let expected = scanner.next_seq();
                let gap = || {
                    format!(
                        "corrupt session log: committed row at seq {seq} breaks seq contiguity (expected seq {expected})"
                    )
                };
                match scanner.feed(decoded, gap)? {
                    Some(record) => record.deliver(|member, event| {
                        let loc = EventLoc {
                            record: seq,
                            within: 0,
                            member,
                        };
                        sink(loc, event)
                    })?,
                    None => {
                        first_torn_row.get_or_insert(seq);
                    }
                }
            }
            Ok(())
        };
        let batch = self.decoded_batch(id, first_row)?;
        let next_row = batch.next_row();
        feed(batch.rows)?;
        if let Some(next_row) = next_row {
            // A long session: later batches are read and decoded on a second
            // thread while the fold works on earlier ones.
            let mut from = next_row;
            let next = || {
                let batch = self.decoded_batch(id, from);
                let next = batch.as_ref().ok().and_then(RowBatch::next_row);
                from = next.unwrap_or(from);
                (batch, next.is_some())
            };
            let fold = |batch: Result<RowBatch, Refusal>| match batch.and_then(|b| feed(b.rows)) {
                Ok(()) => ControlFlow::Continue(()),
                Err(refusal) => ControlFlow::Break(refusal),
            };
            if let ControlFlow::Break(refusal) = read_ahead(1, next, fold) {
                return Err(refusal);
            }
        }
        let events = scanner.next_seq();
        Ok(match first_torn_row {
            None => (
                ScanPoint {
                    events,
                    offset: events,
                    ..ScanPoint::default()
                },
                ScanEnd::Complete,
            ),
            // The next scan re-reads the torn row, and any rows a repair puts
            // before it (a gap leaves the torn row after the next expected seq).
            Some(torn) => (
                ScanPoint {
                    events,
                    offset: torn.min(events),
                    ..ScanPoint::default()
                },
                ScanEnd::Torn {
                    at: format!("seq {torn}"),
                },
            ),
        })
    }

    fn fetch(&self, key: &SessionKey, loc: EventLoc) -> Result<JsonMap, Refusal> {
        let id = row_id(key)?;
        let record = i64::try_from(loc.record).unwrap_or(i64::MAX);
        let row = self.read(|tx| {
            tx.prepare_cached(self.schema.row_at_sql())?
                .query_row(params![id, record], PhysicalRow::read)
                .optional()
        })?;
        let missing = || {
            Refusal::Corrupt(format!(
                "session {id:?} no longer has an event at seq {}",
                loc.record
            ))
        };
        let row = row.ok_or_else(missing)?;
        let events = row
            .decode(self.schema)
            .map_err(|_| Refusal::Corrupt(self.schema.bad_row_message(row.seq)))?;
        events
            .into_iter()
            .nth(loc.member as usize)
            .ok_or_else(missing)
    }

    fn repair(
        &self,
        key: &SessionKey,
        keep: &ScanPoint,
        expected: &Revision,
        tail: &[JsonMap],
    ) -> io::Result<()> {
        let id = row_id(key).map_err(|r| invalid_input(r.message()))?;
        // Closers are inserted as scalar rows (spec §11.5, "Repair").
        let rows = tail
            .iter()
            .map(|event| match self.schema {
                Schema::V14 => NewEventRow::scalar_v14(event),
                Schema::V17 => NewEventRow::v17(event),
            })
            .collect::<io::Result<Vec<_>>>()?;
        let failed = |e: rusqlite::Error| write_error(&self.path, e);
        let mut writer = self.writer()?;
        let transaction = self.write_transaction(&mut writer)?;
        let current = transaction
            .prepare_cached(SESSION_BY_ID)
            .and_then(|mut s| s.query_row([id], SessionRow::read).optional())
            .map_err(failed)?;
        let current =
            current.and_then(
                |row| match (&row.incarnation, row.revision.safe_integer()) {
                    (Cell::Text(incarnation), Some(revision)) => {
                        Some(Revision(format!("{incarnation}:{revision}")))
                    }
                    _ => None,
                },
            );
        if current.as_ref() != Some(expected) {
            return Err(io::Error::other(format!(
                "session {id:?} changed since it was read; not repairing it"
            )));
        }
        let first_dropped = i64::try_from(keep.offset).unwrap_or(i64::MAX);
        transaction
            .execute(
                "DELETE FROM events WHERE session_id = ?1 AND seq >= ?2",
                params![id, first_dropped],
            )
            .map_err(failed)?;
        self.insert_rows(&transaction, id, &rows)?;
        transaction
            .execute(
                "UPDATE sessions SET revision = revision + 1 WHERE id = ?1",
                [id],
            )
            .map_err(failed)?;
        transaction.commit().map_err(failed)
    }

    fn create(&self, header: &SessionHeader, events: &[JsonMap]) -> io::Result<SessionKey> {
        let (session, rows) = self.encode_session(header, events)?;
        let failed = |e: rusqlite::Error| write_error(&self.path, e);
        let mut writer = self.writer()?;
        let transaction = self.write_transaction(&mut writer)?;
        if session_exists(&transaction, &header.id).map_err(failed)? {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "session {:?} already exists in session database at \"{}\"",
                    header.id,
                    self.path.display()
                ),
            ));
        }
        transaction
            .execute(INSERT_SESSION, session.cells())
            .map_err(failed)?;
        self.insert_rows(&transaction, &header.id, &rows)?;
        transaction.commit().map_err(failed)?;
        Ok(SessionKey::Row(header.id.clone()))
    }

    fn contains(&self, id: &str) -> bool {
        // On a read error the answer is "no": create() checks again inside its
        // write transaction, so a wrong answer cannot overwrite a session.
        self.read(|tx| session_exists(tx, id))
            .unwrap_or_else(|refusal| {
                log::warn!("cannot look up session {id:?}: {refusal}");
                false
            })
    }
}

fn row_id(key: &SessionKey) -> Result<&str, Refusal> {
    match key {
        SessionKey::Row(id) => Ok(id),
        SessionKey::File(_) => Err(Refusal::Corrupt(format!(
            "{} is not a session of an SQLite store",
            key.describe()
        ))),
    }
}

fn session_exists(connection: &Connection, id: &str) -> rusqlite::Result<bool> {
    connection
        .prepare_cached(SESSION_EXISTS)?
        .query_row([id], |row| row.get(0))
}

/// Checks the application id, the schema version and the table definitions
/// (spec §11.1), and returns the row layout they select.
fn check_identity(connection: &Connection, path: &Path) -> Result<Schema, String> {
    let unreadable = |e: rusqlite::Error| {
        format!(
            "cannot read session database at \"{}\": {e}",
            path.display()
        )
    };
    let application_id: i64 = connection
        .pragma_query_value(None, "application_id", |row| row.get(0))
        .map_err(unreadable)?;
    if application_id != APPLICATION_ID {
        return Err(format!(
            "\"{}\" is not a DeepSeek Harness session database (application_id {application_id}, expected {APPLICATION_ID})",
            path.display()
        ));
    }
    let user_version: i64 = connection
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(unreadable)?;
    let schema = Schema::from_user_version(user_version).ok_or_else(|| {
        format!(
            "session database at \"{}\" has schema version {user_version}; sessionfs reads 14 and 17",
            path.display()
        )
    })?;
    let mut select = connection.prepare(USER_SCHEMA).map_err(unreadable)?;
    let objects = select
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, Option<String>>(3)?,
            ))
        })
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(unreadable)?;
    let mismatch = |what: String| {
        format!(
            "session database at \"{}\" does not have the schema-{} tables: {what}",
            path.display(),
            schema.number()
        )
    };
    let expected = schema.tables();
    for (index, (kind, name, table, sql)) in objects.iter().enumerate() {
        let Some((expected_name, expected_sql)) = expected.get(index) else {
            return Err(mismatch(format!("unexpected {kind} {name}")));
        };
        if kind != "table" || name != expected_name || table != expected_name {
            return Err(mismatch(format!(
                "expected table {expected_name}, found {kind} {name}"
            )));
        }
        if sql.as_deref().map(collapse_whitespace).as_deref() != Some(*expected_sql) {
            return Err(mismatch(format!("table {name} is defined differently")));
        }
    }
    if let Some((missing, _)) = expected.get(objects.len()) {
        return Err(mismatch(format!("table {missing} is missing")));
    }
    Ok(schema)
}

fn collapse_whitespace(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn invalid_input(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message.into())
}

fn write_error(path: &Path, error: rusqlite::Error) -> io::Error {
    let kind = match error.sqlite_error_code() {
        Some(ErrorCode::ReadOnly | ErrorCode::PermissionDenied) => io::ErrorKind::PermissionDenied,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(
        kind,
        format!(
            "cannot write session database at \"{}\": {error}",
            path.display()
        ),
    )
}

/// `^[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, any case.
fn is_uuid(text: &str) -> bool {
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
enum Cell {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl Cell {
    fn read(row: &rusqlite::Row, index: usize) -> rusqlite::Result<Cell> {
        Ok(match row.get_ref(index)? {
            ValueRef::Null => Cell::Null,
            ValueRef::Integer(i) => Cell::Integer(i),
            ValueRef::Real(r) => Cell::Real(r),
            ValueRef::Text(text) => Cell::Text(String::from_utf8_lossy(text).into_owned()),
            ValueRef::Blob(blob) => Cell::Blob(blob.to_vec()),
        })
    }

    fn type_name(&self) -> &'static str {
        match self {
            Cell::Null => "NULL",
            Cell::Integer(_) => "INTEGER",
            Cell::Real(_) => "REAL",
            Cell::Text(_) => "TEXT",
            Cell::Blob(_) => "BLOB",
        }
    }

    fn safe_integer(&self) -> Option<i64> {
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
struct SessionRow {
    id: Cell,
    version: Cell,
    created_at: Cell,
    cwd: Cell,
    parent_session: Cell,
    seed_length: Cell,
    origin: Cell,
    delegation_depth: Cell,
    agent_preset: Cell,
    incarnation: Cell,
    revision: Cell,
}

impl SessionRow {
    fn read(row: &rusqlite::Row) -> rusqlite::Result<SessionRow> {
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

    /// The row a materialisation inserts: NULL for every absent field, and
    /// revision 1, as after the Harness's first batch (spec §11.5). It must
    /// decode back by the reader's rules, or the child would be unreadable.
    fn for_new_session(header: &SessionHeader, incarnation: String) -> Result<SessionRow, String> {
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
            revision: Cell::Integer(1),
        };
        row.header()?;
        Ok(row)
    }

    fn cells(&self) -> [&Cell; 11] {
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
    fn header(&self) -> Result<SessionHeader, String> {
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
struct PhysicalRow {
    seq: u64,
    event_type: Cell,
    time: Cell,
    data: Cell,
    source_event_seqs: Cell,
    surface_op: Cell,
    /// Always NULL in schema 14, which has no such column.
    ignorable: Cell,
}

/// One batch of a session's rows, decoded: each row's seq and what it holds.
struct RowBatch {
    rows: Vec<(u64, Decoded)>,
    /// The batch is as long as a batch can be: more rows may follow.
    full: bool,
}

impl RowBatch {
    /// Where the next batch starts, when one may follow.
    fn next_row(&self) -> Option<i64> {
        let (last, _) = self.rows.last().filter(|_| self.full)?;
        Some(i64::try_from(*last).unwrap_or(i64::MAX).saturating_add(1))
    }
}

impl PhysicalRow {
    fn read(row: &rusqlite::Row) -> rusqlite::Result<PhysicalRow> {
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
    fn quick(&self) -> Option<ChunkRun> {
        let Cell::Text(event_type) = &self.event_type else {
            return None;
        };
        let time = self.time.safe_integer()?;
        if self.seq > MAX_SAFE_INTEGER as u64
            || self.source_event_seqs != Cell::Null
            || self.surface_op != Cell::Null
        {
            return None;
        }
        match (&self.ignorable, event_type.as_str()) {
            // Schema 14 selects NULL for the column it lacks; its data is TEXT only.
            (Cell::Null, CHUNK_TYPE) if matches!(self.data, Cell::Text(_)) => {
                let data = data_text(&self.data, MAX_SCALAR_DATA_BYTES).ok()?;
                quick::is_json(data.as_bytes()).then(|| ChunkRun {
                    seq0: self.seq,
                    times: vec![time],
                })
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
    fn decode(&self, schema: Schema) -> Result<Vec<JsonMap>, String> {
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
                let data = parse_json(&data_text(&self.data, MAX_SCALAR_DATA_BYTES)?, "data")?;
                let surface_op = match &self.surface_op {
                    Cell::Null => None,
                    Cell::Text(text) => Some(parse_json(text, "surface_op")?),
                    other => return Err(format!("surface_op is {}", other.type_name())),
                };
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
                let source_event_seqs = match &self.source_event_seqs {
                    Cell::Null => None,
                    Cell::Text(text) => Some(parse_json(text, "source_event_seqs")?),
                    other => return Err(format!("source_event_seqs is {}", other.type_name())),
                };
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
        if self.source_event_seqs != Cell::Null || self.surface_op != Cell::Null {
            return Err("packed row has source_event_seqs or surface_op".into());
        }
        let data = parse_json(&data_text(&self.data, MAX_PACKED_DATA_BYTES)?, "data")?;
        let Value::Object(data) = data else {
            return Err("packed row data is not an object".into());
        };
        // seq ≤ 2^53 − 1 was checked by the caller.
        chunk_rows::expand_row_data(kind, self.seq as i64, time0, &data, SQLITE_ROW_LIMITS)
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
fn data_text(data: &Cell, limit: usize) -> Result<Cow<'_, str>, String> {
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

/// Writes `data` JSON text as the Harness does: TEXT under 4096 bytes, else a
/// zstd frame (level 3, content size, no checksum) when strictly smaller.
fn encode_data(text: String) -> io::Result<SqlValue> {
    if text.len() < COMPRESS_FROM_BYTES {
        return Ok(SqlValue::Text(text));
    }
    let mut compressor = zstd::bulk::Compressor::new(ZSTD_LEVEL)?;
    compressor.include_checksum(false)?;
    compressor.include_contentsize(true)?;
    let blob = compressor.compress(text.as_bytes())?;
    Ok(if blob.len() < text.len() {
        SqlValue::Blob(blob)
    } else {
        SqlValue::Text(text)
    })
}

fn json_text(value: &Value) -> io::Result<String> {
    serde_json::to_string(value).map_err(io::Error::other)
}

/// An `events` row about to be inserted.
struct NewEventRow {
    seq: i64,
    event_type: String,
    time: i64,
    data: SqlValue,
    source_event_seqs: SqlValue,
    surface_op: SqlValue,
    ignorable: SqlValue,
}

impl NewEventRow {
    /// A schema-14 row: one event, JSON text in every column, never compressed.
    fn scalar_v14(event: &JsonMap) -> io::Result<NewEventRow> {
        let source_event_seqs = match event.get("sourceEventSeqs") {
            Some(seqs) => SqlValue::Text(json_text(seqs)?),
            None => SqlValue::Null,
        };
        NewEventRow::scalar(
            event,
            SqlValue::Text(json_text(field(event, "data")?)?),
            source_event_seqs,
        )
    }

    /// A schema-17 row from `pack_rows`: a packed row, or one scalar event.
    fn v17(row: &JsonMap) -> io::Result<NewEventRow> {
        let Some(kind) = packed_kind(row) else {
            let source_event_seqs = match row.get("sourceEventSeqs") {
                Some(seqs) => SqlValue::Blob(encode_source_seqs(&source_seqs_of(seqs)?)),
                None => SqlValue::Null,
            };
            return NewEventRow::scalar(
                row,
                encode_data(json_text(field(row, "data")?)?)?,
                source_event_seqs,
            );
        };
        Ok(NewEventRow {
            seq: integer_field(row, "seq0")?,
            event_type: kind.tag().to_string(),
            time: integer_field(row, "time0")?,
            data: encode_data(json_text(field(row, "data")?)?)?,
            source_event_seqs: SqlValue::Null,
            surface_op: SqlValue::Null,
            ignorable: SqlValue::Integer(0),
        })
    }

    /// The columns both schemas fill alike for one event.
    fn scalar(
        event: &JsonMap,
        data: SqlValue,
        source_event_seqs: SqlValue,
    ) -> io::Result<NewEventRow> {
        let event_type = field(event, "type")?
            .as_str()
            .ok_or_else(|| invalid_input("event type is not a string"))?;
        Ok(NewEventRow {
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

/// Packs events into schema-17 rows as the Harness's writer does (spec §11.3,
/// "Writer partitioning"): runs of up to 1024 members, and a row whose data
/// would exceed 1 MiB cut into the longest prefixes of at least 3 members that
/// fit, with single members left over written as scalar rows.
fn pack_rows(events: &[JsonMap]) -> Vec<JsonMap> {
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

/// Decodes a schema-17 `source_event_seqs` BLOB (spec §11.3): a LEB128 varint of
/// the first seq, then zigzag varints of the differences.
pub fn decode_source_seqs(bytes: &[u8]) -> Result<Vec<u64>, String> {
    const MAX_SAFE: u64 = MAX_SAFE_INTEGER as u64;
    let mut seqs: Vec<u64> = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let value = read_varint(&mut rest)?;
        let seq = match seqs.last() {
            None if value > MAX_SAFE => {
                return Err(format!("first source seq {value} is not a safe integer"));
            }
            None => value,
            Some(_) if value > 2 * MAX_SAFE => {
                return Err(format!("source seq delta {value} is out of range"));
            }
            Some(&previous) => {
                // Both fit easily in i64: previous ≤ 2^53 − 1, |delta| ≤ 2^53.
                let delta = if value % 2 == 0 {
                    (value / 2) as i64
                } else {
                    -(value.div_ceil(2) as i64)
                };
                let seq = previous as i64 + delta;
                if !(0..=MAX_SAFE_INTEGER).contains(&seq) {
                    return Err(format!("source seq {seq} is out of range"));
                }
                seq as u64
            }
        };
        seqs.push(seq);
    }
    Ok(seqs)
}

/// Reads one canonical unsigned LEB128 varint of at most 9 bytes.
fn read_varint(bytes: &mut &[u8]) -> Result<u64, String> {
    let mut value = 0u64;
    for (index, &byte) in bytes.iter().enumerate().take(9) {
        value |= u64::from(byte & 0x7f) << (7 * index);
        if byte & 0x80 == 0 {
            if index > 0 && byte == 0 {
                return Err("non-canonical varint in source seqs".into());
            }
            *bytes = &bytes[index + 1..];
            return Ok(value);
        }
    }
    if bytes.len() >= 9 {
        Err("varint in source seqs is longer than 9 bytes".into())
    } else {
        Err("truncated varint in source seqs".into())
    }
}

/// Encodes seqs for a schema-17 `source_event_seqs` BLOB; the inverse of
/// [`decode_source_seqs`] for seqs up to 2^53 − 1.
pub fn encode_source_seqs(seqs: &[u64]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut previous: Option<u64> = None;
    for &seq in seqs {
        let value = match previous {
            None => u128::from(seq),
            Some(previous) => {
                let delta = i128::from(seq) - i128::from(previous);
                if delta >= 0 {
                    delta.unsigned_abs() * 2
                } else {
                    delta.unsigned_abs() * 2 - 1
                }
            }
        };
        write_varint(value, &mut out);
        previous = Some(seq);
    }
    out
}

fn write_varint(mut value: u128, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn fixtures() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
    }

    fn read_json(relative: &str) -> Value {
        let text = std::fs::read_to_string(fixtures().join(relative)).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    /// A copy of a fixture database in its own temp directory, removed on drop:
    /// opening a WAL database creates `-wal`/`-shm` files next to it.
    struct TempDb {
        dir: PathBuf,
        path: PathBuf,
    }

    impl TempDb {
        fn empty() -> TempDb {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "sessionfs-sqlite-test-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("sessions.db");
            TempDb { dir, path }
        }

        fn copy_of(store: &str) -> TempDb {
            let db = TempDb::empty();
            std::fs::copy(
                fixtures().join("stores").join(store).join("sessions.db"),
                &db.path,
            )
            .unwrap();
            db
        }

        fn open(&self) -> SqliteStore {
            SqliteStore::open(&self.path).unwrap()
        }
    }

    impl Drop for TempDb {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn key(id: &str) -> SessionKey {
        SessionKey::Row(id.to_string())
    }

    type ScanResult = (Vec<(EventLoc, JsonMap)>, ScanPoint, ScanEnd);

    /// Scans, fetching the chunks that were read quickly, to compare whole events.
    fn scan_from(store: &SqliteStore, id: &str, from: &ScanPoint) -> Result<ScanResult, Refusal> {
        let mut scanned = Vec::new();
        let (point, end) = store.scan(&key(id), from, &mut |loc, event| {
            scanned.push((loc, event));
            Ok(())
        })?;
        let events = scanned
            .into_iter()
            .map(|(loc, event)| match event {
                quick::Scanned::Event(event) => Ok((loc, event)),
                quick::Scanned::Chunk { .. } => store.fetch(&key(id), loc).map(|e| (loc, e)),
            })
            .collect::<Result<_, _>>()?;
        Ok((events, point, end))
    }

    fn scan_all(store: &SqliteStore, id: &str) -> Vec<JsonMap> {
        let (events, _, end) = scan_from(store, id, &ScanPoint::default()).unwrap();
        assert_eq!(end, ScanEnd::Complete, "{id}");
        events.into_iter().map(|(_, event)| event).collect()
    }

    /// Value equality plus key order: the compact texts must be identical.
    fn assert_same_events(actual: &[JsonMap], expected: &[Value], what: &str) {
        assert_eq!(actual.len(), expected.len(), "{what}: event count");
        for (event, expected) in actual.iter().zip(expected) {
            assert_eq!(&Value::Object(event.clone()), expected, "{what}");
            assert_eq!(
                serde_json::to_string(event).unwrap(),
                serde_json::to_string(expected).unwrap(),
                "{what}: key order"
            );
        }
    }

    fn session_files() -> Vec<(String, String)> {
        let manifest = read_json("expected/manifest.json");
        manifest["sessionFiles"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(id, file)| (id.clone(), file.as_str().unwrap().to_string()))
            .collect()
    }

    fn expected_events(file: &str) -> Vec<Value> {
        read_json(&format!("expected/{file}"))["events"]
            .as_array()
            .unwrap()
            .clone()
    }

    #[test]
    fn source_seqs_match_the_spec_table() {
        let table: [(&[u64], &[u8]); 7] = [
            (&[5, 6, 7, 8, 9, 10], &[0x05, 0x02, 0x02, 0x02, 0x02, 0x02]),
            (&[300, 12], &[0xAC, 0x02, 0xBF, 0x04]),
            (&[12, 300], &[0x0C, 0xC0, 0x04]),
            (&[0, 3, 1], &[0x00, 0x06, 0x03]),
            (&[], &[]),
            (
                &[132, 133, 2, 64, 69, 97, 99, 129],
                &[0x84, 0x01, 0x02, 0x85, 0x02, 0x7C, 0x0A, 0x38, 0x04, 0x3C],
            ),
            (&[156], &[0x9C, 0x01]),
        ];
        for (seqs, bytes) in table {
            assert_eq!(encode_source_seqs(seqs), bytes, "{seqs:?}");
            assert_eq!(decode_source_seqs(bytes).unwrap(), seqs, "{bytes:02x?}");
        }
        let extremes = [MAX_SAFE_INTEGER as u64, 0, MAX_SAFE_INTEGER as u64];
        assert_eq!(
            decode_source_seqs(&encode_source_seqs(&extremes)).unwrap(),
            extremes
        );
    }

    #[test]
    fn source_seqs_reject_malformed_varints() {
        let rejected: [&[u8]; 8] = [
            &[0x80],                                                       // truncated (crash case s2)
            &[0x05, 0x82],                                                 // truncated second value
            &[0x85, 0x00],                                                 // non-canonical
            &[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01], // longer than 9 bytes
            &[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10],       // first value 2^60
            &[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10],             // first value 2^53
            &[0x05, 0x0B],                                                 // 5 − 6 < 0
            &[0x00, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40], // delta value above 2·(2^53 − 1)
        ];
        for bytes in rejected {
            assert!(decode_source_seqs(bytes).is_err(), "{bytes:02x?}");
        }
        // Nine bytes is the longest accepted form.
        assert_eq!(
            decode_source_seqs(&[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F]).unwrap(),
            [MAX_SAFE_INTEGER as u64]
        );
        assert!(
            decode_source_seqs(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00]).is_err()
        );
    }

    #[test]
    fn clean_schema_17_sessions_decode_to_the_expected_logs() {
        let db = TempDb::copy_of("sqlite17");
        let store = db.open();
        assert_eq!(
            store.describe(),
            format!("sqlite schema 17 database {}", db.path.display())
        );
        for (id, file) in session_files() {
            assert_same_events(&scan_all(&store, &id), &expected_events(&file), &id);
        }
    }

    #[test]
    fn clean_schema_14_sessions_decode_to_the_expected_logs() {
        let db = TempDb::copy_of("sqlite14");
        let store = db.open();
        for (id, file) in session_files() {
            let mut expected = expected_events(&file);
            if id == "metrics-ignorable" {
                // Schema 14 dropped the marker and the resume failed: only seqs 0–21 exist.
                expected.truncate(22);
                for event in &mut expected {
                    event.as_object_mut().unwrap().shift_remove("ignorable");
                }
            }
            assert_same_events(&scan_all(&store, &id), &expected, &id);
        }
    }

    #[test]
    fn listed_headers_match_the_harness_list() {
        for format in ["sqlite14", "sqlite17"] {
            let db = TempDb::copy_of(format);
            let store = db.open();
            let listings = store.list();
            let expected = read_json(&format!("expected/formats/{format}.json"))["listedHeaders"]
                .as_array()
                .unwrap()
                .clone();
            assert_eq!(listings.len(), expected.len(), "{format}");
            for want in expected {
                let id = want["id"].as_str().unwrap();
                let listing = listings.iter().find(|l| l.id == id).unwrap();
                assert_eq!(listing.key, key(id));
                let header = listing.header.as_ref().unwrap();
                // The SQLite header: NULL columns, delegationDepth included, are absent.
                let mut got = header.to_json();
                if header.delegation_depth.is_none() {
                    got.shift_remove("delegationDepth");
                }
                assert_eq!(
                    serde_json::to_string(&got).unwrap(),
                    serde_json::to_string(&want).unwrap(),
                    "{format}"
                );
                assert_eq!(&store.header(&key(id)).unwrap(), header);
            }
        }
    }

    #[test]
    fn crash_cases_keep_the_stored_prefix_or_refuse() {
        for format in ["sqlite14", "sqlite17"] {
            let db = TempDb::copy_of(&format!("crash/{format}"));
            let store = db.open();
            let dir = fixtures().join("expected/crash").join(format);
            let entries: Vec<_> = std::fs::read_dir(dir).unwrap().collect();
            assert_eq!(
                entries.len(),
                8,
                "{format}: crash cases a, b, b2, f, g, h, s1, s2"
            );
            for entry in entries {
                let case: Value =
                    serde_json::from_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap())
                        .unwrap();
                let id = case["case"]["id"].as_str().unwrap();
                let stored = &case["loadStored"];
                let what = format!("{format} {id}");
                match scan_from(&store, id, &ScanPoint::default()) {
                    Err(refusal) => assert_eq!(
                        refusal,
                        Refusal::Corrupt(stored["error"]["message"].as_str().unwrap().into()),
                        "{what}"
                    ),
                    Ok((events, point, end)) => {
                        let count = stored["eventCount"].as_u64().unwrap();
                        assert_eq!(events.len() as u64, count, "{what}");
                        assert_eq!(point.events, count, "{what}");
                        match stored["tornMarker"].as_u64() {
                            None => assert_eq!(
                                (end, point.offset),
                                (ScanEnd::Complete, count),
                                "{what}"
                            ),
                            Some(marker) => {
                                assert_eq!(
                                    end,
                                    ScanEnd::Torn {
                                        at: format!("seq {marker}")
                                    },
                                    "{what}"
                                );
                                assert_eq!(
                                    point.offset, marker,
                                    "{what}: the next scan re-reads the torn row"
                                );
                                let (again, _, end) = scan_from(&store, id, &point).unwrap();
                                assert!(
                                    again.is_empty()
                                        && end
                                            == ScanEnd::Torn {
                                                at: format!("seq {marker}")
                                            },
                                    "{what}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn scans_resume_at_a_row_boundary_and_fetch_reads_one_event() {
        let db = TempDb::copy_of("sqlite17");
        let store = db.open();
        let id = "orbit-debug-tools";
        let (all, end_point, _) = scan_from(&store, id, &ScanPoint::default()).unwrap();
        assert_eq!(
            (end_point.events, end_point.offset),
            (all.len() as u64, all.len() as u64)
        );
        let (nothing, same, end) = scan_from(&store, id, &end_point).unwrap();
        assert!(nothing.is_empty() && same == end_point && end == ScanEnd::Complete);

        let packed = all
            .iter()
            .find(|(loc, _)| loc.member == 2 && loc.record > 100)
            .unwrap()
            .0;
        let boundary = packed.record;
        let (rest, point, _) = scan_from(
            &store,
            id,
            &ScanPoint {
                events: boundary,
                offset: boundary,
                ..ScanPoint::default()
            },
        )
        .unwrap();
        assert_eq!(point, end_point);
        assert_eq!(rest, all[boundary as usize..]);

        for (loc, event) in &all {
            assert_eq!(&store.fetch(&key(id), *loc).unwrap(), event, "{loc:?}");
        }
        assert!(
            store
                .fetch(
                    &key(id),
                    EventLoc {
                        record: packed.record,
                        within: 0,
                        member: 5000
                    }
                )
                .is_err()
        );
        assert!(
            store
                .fetch(
                    &key(id),
                    EventLoc {
                        record: 1 << 40,
                        within: 0,
                        member: 0
                    }
                )
                .is_err()
        );
    }

    #[test]
    fn revision_and_missing_sessions() {
        let db = TempDb::copy_of("sqlite17");
        let store = db.open();
        assert_eq!(
            store.revision(&key("ledger-chat")).unwrap(),
            Revision("18036197-390d-4076-b22e-730784217679:61".into())
        );
        assert!(store.contains("ledger-chat"));
        assert!(!store.contains("no-such-session"));
        let gone = store
            .scan(
                &key("no-such-session"),
                &ScanPoint::default(),
                &mut |_, _| Ok(()),
            )
            .unwrap_err();
        assert!(gone.message().contains("no longer exists"), "{gone}");
        assert!(store.header(&key("no-such-session")).is_err());
        assert!(store.revision(&key("no-such-session")).is_err());
    }

    #[test]
    fn open_refuses_foreign_and_other_version_databases() {
        let foreign = TempDb::empty();
        Connection::open(&foreign.path)
            .unwrap()
            .execute_batch("CREATE TABLE t (x)")
            .unwrap();
        let message = SqliteStore::open(&foreign.path).err().unwrap();
        assert!(
            message.contains("is not a DeepSeek Harness session database (application_id 0"),
            "{message}"
        );

        let newer = TempDb::copy_of("sqlite17");
        Connection::open(&newer.path)
            .unwrap()
            .execute_batch("PRAGMA user_version = 18")
            .unwrap();
        let message = SqliteStore::open(&newer.path).err().unwrap();
        assert!(
            message.ends_with("has schema version 18; sessionfs reads 14 and 17"),
            "{message}"
        );

        let extra = TempDb::copy_of("sqlite14");
        Connection::open(&extra.path)
            .unwrap()
            .execute_batch("CREATE INDEX by_type ON events (type)")
            .unwrap();
        let message = SqliteStore::open(&extra.path).err().unwrap();
        assert!(
            message.contains(
                "does not have the schema-14 tables: expected table events, found index by_type"
            ),
            "{message}"
        );

        let not_sqlite = TempDb::empty();
        std::fs::write(
            &not_sqlite.path,
            "this is not a database, just some text that is long enough",
        )
        .unwrap();
        assert!(SqliteStore::open(&not_sqlite.path).is_err());
        assert!(SqliteStore::open(&not_sqlite.dir.join("missing.db")).is_err());
    }

    fn child_header(id: &str) -> SessionHeader {
        SessionHeader {
            cwd: Some("/workspace/orbit".into()),
            parent_session: Some("orbit-debug-tools".into()),
            seed_length: Some(3),
            ..SessionHeader::new(id, 1_780_000_000_000)
        }
    }

    #[test]
    fn create_writes_a_child_that_reads_back_exactly() {
        let sources = [
            ("sqlite17", "orbit-debug-tools"),
            ("sqlite17", "metrics-ignorable"),
            ("sqlite14", "pipeline-compaction"),
        ];
        for (format, source) in sources {
            let db = TempDb::copy_of(format);
            let store = db.open();
            let events = scan_all(&store, source);
            let child = format!("session-child-of-{source}");
            let header = child_header(&child);
            assert_eq!(store.create(&header, &events).unwrap(), key(&child));
            assert_eq!(
                store.create(&header, &events).unwrap_err().kind(),
                io::ErrorKind::AlreadyExists
            );

            let reopened = db.open();
            assert_eq!(reopened.header(&key(&child)).unwrap(), header);
            assert!(reopened.revision(&key(&child)).unwrap().0.ends_with(":1"));
            let expected: Vec<Value> = events.iter().cloned().map(Value::Object).collect();
            assert_same_events(&scan_all(&reopened, &child), &expected, &child);
            assert!(reopened.contains(&child));
            assert_physical_layout(&db, &child, events.len());
        }
    }

    /// Schema 17: packed rows carry a chunk tag and no seq list; BLOBs are zstd
    /// frames with a content size and no checksum. Schema 14: one TEXT row per event.
    fn assert_physical_layout(db: &TempDb, id: &str, event_count: usize) {
        let connection =
            Connection::open_with_flags(&db.path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        let version: i64 = connection
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .unwrap();
        let count = |sql: &str| {
            connection
                .query_row(sql, [id], |row| row.get::<_, i64>(0))
                .unwrap() as usize
        };
        let rows = count("SELECT count(*) FROM events WHERE session_id = ?1");
        if version == 14 {
            assert_eq!(rows, event_count);
            assert_eq!(
                count(
                    "SELECT count(*) FROM events WHERE session_id = ?1 AND typeof(data) != 'text'"
                ),
                0
            );
            return;
        }
        let packed = "FROM events WHERE session_id = ?1 AND ignorable = 0";
        assert!(rows < event_count && count(&format!("SELECT count(*) {packed}")) > 0);
        let malformed = "AND (type NOT LIKE '%-chunks' OR source_event_seqs IS NOT NULL OR surface_op IS NOT NULL)";
        assert_eq!(count(&format!("SELECT count(*) {packed} {malformed}")), 0);
        let mut blobs = connection
            .prepare("SELECT data FROM events WHERE session_id = ?1 AND typeof(data) = 'blob'")
            .unwrap();
        let blobs: Vec<Vec<u8>> = blobs
            .query_map([id], |row| row.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        // orbit-debug-tools has 13 KB values; every compressed value has a 2-byte content size.
        assert_eq!(blobs.is_empty(), id != "session-child-of-orbit-debug-tools");
        for blob in blobs {
            assert_eq!((&blob[..4], blob[4]), (&[0x28, 0xB5, 0x2F, 0xFD][..], 0x60));
        }
    }

    #[test]
    fn schema_14_refuses_ignorable_events_and_nothing_is_written() {
        let source = TempDb::copy_of("sqlite17");
        let events = scan_all(&source.open(), "metrics-ignorable");
        let db = TempDb::copy_of("sqlite14");
        let store = db.open();
        let error = store.create(&child_header("child"), &events).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert!(!store.contains("child"));
    }

    #[test]
    fn compressed_data_is_byte_identical_to_the_harness() {
        let db = TempDb::copy_of("sqlite17");
        let connection =
            Connection::open_with_flags(&db.path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        let mut select = connection
            .prepare("SELECT data FROM events WHERE typeof(data) = 'blob'")
            .unwrap();
        let blobs: Vec<Vec<u8>> = select
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(blobs.len(), 7);
        for blob in blobs {
            let text = data_text(&Cell::Blob(blob.clone()), MAX_SCALAR_DATA_BYTES)
                .unwrap()
                .into_owned();
            assert_eq!(encode_data(text).unwrap(), SqlValue::Blob(blob));
        }
        assert_eq!(
            encode_data("x".repeat(4095)).unwrap(),
            SqlValue::Text("x".repeat(4095))
        );
    }

    fn text_delta(seq: u64, text: &str) -> JsonMap {
        let chunk = serde_json::json!({"type": "text-delta", "index": 0, "text": text});
        let event = serde_json::json!({
            "type": "assistant/chunk",
            "seq": seq,
            "time": 1000 + seq,
            "data": {"turn": 1, "step": 1, "chunk": chunk},
        });
        event.as_object().unwrap().clone()
    }

    #[test]
    fn oversized_runs_are_cut_into_rows_that_fit() {
        let big = "y".repeat(300_000);
        let events: Vec<JsonMap> = (0..7).map(|seq| text_delta(seq, &big)).collect();
        let rows = pack_rows(&events);
        let shape: Vec<Option<usize>> = rows
            .iter()
            .map(|r| {
                r.get("seq0")
                    .map(|_| r["data"]["texts"].as_array().unwrap().len())
            })
            .collect();
        assert_eq!(shape, [Some(3), Some(3), None]);
        let huge = "z".repeat(400_000);
        let events: Vec<JsonMap> = (0..4).map(|seq| text_delta(seq, &huge)).collect();
        assert!(
            pack_rows(&events)
                .iter()
                .all(|row| !row.contains_key("seq0"))
        );

        let db = TempDb::copy_of("sqlite17");
        let store = db.open();
        let small: Vec<JsonMap> = (0..5).map(|seq| text_delta(seq, "hi")).collect();
        let mut all: Vec<JsonMap> = (0..7).map(|seq| text_delta(seq, &big)).collect();
        all.extend(small.into_iter().enumerate().map(|(k, mut e)| {
            e["seq"] = (7 + k as u64).into();
            e
        }));
        store.create(&child_header("big"), &all).unwrap();
        let expected: Vec<Value> = all.into_iter().map(Value::Object).collect();
        assert_same_events(&scan_all(&store, "big"), &expected, "big");
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
            SessionRow::for_new_session(&child_header("a"), crate::random::uuid_v4().unwrap())
                .unwrap();
        assert!(matches!(&session.incarnation, Cell::Text(uuid) if is_uuid(uuid)));
        assert_eq!(session.header().unwrap(), child_header("a"));
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
