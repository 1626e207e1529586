//! The SQLite backend (spec §11): one database file holding every session, in
//! the reference tag's schema 17 (packed chunk rows, zstd BLOBs, varint seq
//! lists) or the published package's schema 14 (one JSON-text row per event).
//!
//! Reads share one read-only connection and end every transaction before they
//! return, so the Harness can keep writing and checkpointing. Fork children are
//! written through a separate read-write connection in one `BEGIN IMMEDIATE`
//! transaction (spec §11.5, §11.7).
//!
//! This file is the `Backend`. `schema` holds the identity checks and table
//! definitions, `rows` decodes stored rows, `encode` is the one row encoder
//! every writer uses (fork children, repairs, the benchmark's store
//! generator), and `varint` is the `source_event_seqs` codec.

mod encode;
mod liveness;
mod rows;
mod schema;
mod varint;

use std::io;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{
    Connection, ErrorCode, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};
use serde_json::Value;

use encode::invalid_input;
pub use encode::{EventRow, NewSession, RowEncoder, insert_events};
use rows::{Cell, PhysicalRow, RowBatch, SessionRow};
use schema::{LIST_SESSIONS, SESSION_BY_ID, SESSION_EXISTS, check_identity};
pub use schema::{Schema, initialise};
pub use varint::{decode_source_seqs, encode_source_seqs};

use super::tail::{Decoded, TailScanner};
use super::{
    Backend, Checkpoint, EventLoc, EventSink, Listing, Revision, ScanEnd, ScanPoint, SessionKey,
    read_ahead,
};
use crate::json::JsonMap;
use crate::model::Refusal;
use crate::model::activity::Writer;
use crate::model::header::SessionHeader;
use crate::model::validate::check_envelope;

/// Rows read per read transaction while scanning.
const SCAN_BATCH_ROWS: i64 = 4096;

/// The Harness's default busy timeout (spec §11.1).
const BUSY_TIMEOUT: Duration = Duration::from_millis(5000);

/// A Harness session database, schema 14 or 17.
pub struct SqliteStore {
    path: PathBuf,
    schema: Schema,
    reader: Mutex<Connection>,
    /// Declared after `reader`, so dropped after it: its descriptors must
    /// not close while the reader holds locks (see `liveness`).
    probe: liveness::WriterProbe,
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
            probe: liveness::WriterProbe::new(&path),
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

    /// The database's write-ahead log (present in WAL mode).
    pub fn wal_path(&self) -> PathBuf {
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        PathBuf::from(wal)
    }

    /// A failed read: damage when SQLite says the file is no database or is
    /// corrupt, else trouble reading it now (busy past the timeout, locked,
    /// permission, I/O), answered with the nearest errno.
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
    ) -> io::Result<(NewSession, Vec<EventRow>)> {
        // Revision 1, as after the Harness's first batch (spec §11.5).
        let session = NewSession::new(header, crate::random::uuid_v4()?, 1)?;
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
        let rows = RowEncoder::new(self.schema)?.batch(events)?;
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

    /// A new session is a new `sessions` row, with a rowid above every other
    /// (O(log n) to find); a removed one is seen at the next listing.
    fn added_mark(&self) -> Option<i64> {
        self.read(|tx| {
            tx.query_row("SELECT coalesce(max(rowid), 0) FROM sessions", [], |row| {
                row.get(0)
            })
        })
        .ok()
    }

    fn try_list(&self) -> Result<Vec<Listing>, Refusal> {
        let rows: Vec<SessionRow> = self.read(|tx| {
            tx.prepare_cached(LIST_SESSIONS)?
                .query_map([], SessionRow::read)?
                .collect()
        })?;
        // Every session lives in the one database file.
        let mode = self.mode(&SessionKey::Row(String::new()));
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
                    mode,
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

    /// Every session lives in the one database file.
    fn mode(&self, _key: &SessionKey) -> Option<u32> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(&self.path)
            .ok()
            .map(|m| m.permissions().mode() & 0o7777)
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

    /// Every session shares the database: another connection may be the
    /// Harness writing any of them.
    fn writer(&self, _key: &SessionKey) -> Writer {
        self.probe.writer()
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
        let rows = RowEncoder::new(self.schema)?.scalar_rows(tail)?;
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
        insert_events(&transaction, self.schema, id, &rows).map_err(failed)?;
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
        session.insert(&transaction).map_err(failed)?;
        insert_events(&transaction, self.schema, &header.id, &rows).map_err(failed)?;
        transaction.commit().map_err(failed)?;
        Ok(SessionKey::Row(header.id.clone()))
    }

    fn checkpoint(&self) -> io::Result<Checkpoint> {
        let failed = |e: rusqlite::Error| write_error(&self.path, e);
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let connection = Connection::open_with_flags(&self.path, flags).map_err(failed)?;
        // PASSIVE never invokes the busy handler; a zero timeout keeps the
        // connection's own locking from waiting on the Harness either.
        connection.busy_timeout(Duration::ZERO).map_err(failed)?;
        connection
            .execute_batch("PRAGMA trusted_schema = OFF")
            .map_err(failed)?;
        let (busy, frames, copied): (i64, i64, i64) = connection
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })
            .map_err(failed)?;
        Ok(match (u64::try_from(frames), u64::try_from(copied)) {
            (Ok(frames), Ok(copied)) => Checkpoint::Passive { frames, copied },
            // -1: not a WAL database (or another connection was checkpointing).
            _ if busy != 0 => Checkpoint::Busy,
            _ => Checkpoint::NotNeeded,
        })
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

fn write_error(path: &Path, error: rusqlite::Error) -> io::Error {
    // The kind carries SQLite's reason to `error.rs`, which picks the errno.
    let kind = match error.sqlite_error_code() {
        Some(ErrorCode::ReadOnly | ErrorCode::PermissionDenied) => io::ErrorKind::PermissionDenied,
        Some(ErrorCode::DiskFull) => io::ErrorKind::StorageFull,
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => io::ErrorKind::ResourceBusy,
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

#[cfg(test)]
mod tests {
    use super::encode::pack_rows;
    use super::rows::{MAX_SCALAR_DATA_BYTES, data_text};
    use super::*;
    use crate::model::quick;
    use rusqlite::types::Value as SqlValue;
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
        // One encoder for every row: its reused compressor must not carry state over.
        let mut encoder = RowEncoder::new(Schema::V17).unwrap();
        for blob in blobs {
            let text = data_text(&Cell::Blob(blob.clone()), MAX_SCALAR_DATA_BYTES)
                .unwrap()
                .into_owned();
            assert_eq!(encoder.data_column(text).unwrap(), SqlValue::Blob(blob));
        }
        assert_eq!(
            encoder.data_column("x".repeat(4095)).unwrap(),
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

    #[test]
    fn an_initialised_database_is_a_store_that_takes_sessions() {
        let db = TempDb::empty();
        let connection = Connection::open(&db.path).unwrap();
        initialise(&connection, "b1f5c3de-1a2b-4c3d-8e9f-0a1b2c3d4e5f").unwrap();
        drop(connection);
        let store = db.open();
        assert!(store.list().is_empty());
        let events: Vec<JsonMap> = (0..5).map(|seq| text_delta(seq, "hi")).collect();
        store.create(&child_header("first"), &events).unwrap();
        let expected: Vec<Value> = events.into_iter().map(Value::Object).collect();
        assert_same_events(&scan_all(&db.open(), "first"), &expected, "first");
    }

    #[test]
    fn a_new_session_row_moves_the_added_mark() {
        let db = TempDb::copy_of("sqlite17");
        let store = db.open();
        let before = store.added_mark().unwrap();
        assert!(before > 0);
        let writer = Connection::open(&db.path).unwrap();
        writer
            .execute(
                "INSERT INTO sessions SELECT 'marked', version, created_at, cwd, NULL, NULL, origin, delegation_depth, agent_preset, 'inc-marked', 1 FROM sessions WHERE id = 'ledger-chat'",
                [],
            )
            .unwrap();
        assert!(store.added_mark().unwrap() > before);
    }
}
