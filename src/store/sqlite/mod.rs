//! The SQLite backend (spec §11): one database file holding every session, in
//! the reference tag's schema 17 (packed chunk rows, zstd BLOBs, varint seq
//! lists) or the published package's schema 14 (one JSON-text row per event).
//!
//! Reads share one read-only connection and end every transaction before they
//! return, so the Harness can keep writing and checkpointing. Fork children are
//! written through a separate read-write connection in short `BEGIN IMMEDIATE`
//! transactions placed between the Harness's commits, the session row last
//! (`pace`, `pending`; spec §11.5, §11.7).
//!
//! This file is the `Backend`. `schema` holds the identity checks and table
//! definitions, `rows` decodes stored rows, `encode` is the one row encoder
//! every writer uses (fork children, repairs, the benchmark's store
//! generator), and `varint` is the `source_event_seqs` codec.

mod encode;
mod liveness;
mod pace;
mod pending;
mod rows;
mod schema;
mod varint;

use std::io;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

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
    Catalog, Checkpoint, EventLoc, EventSink, Listing, Revision, ScanEnd, ScanPoint, SessionKey,
    Source, Watched, Writer, find_row, read_ahead,
};
use crate::json::JsonMap;
use crate::model::activity::WriterPresence;
use crate::model::header::SessionHeader;
use crate::model::validate::check_envelope;
use crate::model::{Cause, Refusal};
use crate::sync::lock;

/// Rows of an unfinished child removed per transaction.
const HIDDEN_ROWS_PER_DELETE: i64 = 256;
/// Deletes up to ?2 rows of session ?1, only while it has no session row.
const DELETE_HIDDEN_ROWS: &str = "DELETE FROM events WHERE session_id = ?1 AND seq IN (SELECT seq FROM events WHERE session_id = ?1 ORDER BY seq LIMIT ?2) AND NOT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)";

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
    /// The Harness writer's rhythm, learnt while forks wait for gaps.
    cadence: Mutex<pace::Cadence>,
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
        let store = SqliteStore {
            probe: liveness::WriterProbe::new(&path),
            cadence: Mutex::default(),
            path,
            schema,
            reader: Mutex::new(reader),
        };
        store.remove_leftovers();
        Ok(store)
    }

    /// Runs `query` inside one short read transaction on the shared connection.
    fn read<T>(
        &self,
        query: impl FnOnce(&Transaction) -> rusqlite::Result<T>,
    ) -> Result<T, Refusal> {
        let mut reader = lock(&self.reader);
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
    /// permission, I/O), for `error.rs` to answer.
    fn unreadable(&self, error: rusqlite::Error) -> Refusal {
        use rusqlite::ErrorCode::*;
        let cause = match error.sqlite_error_code() {
            Some(DatabaseBusy | DatabaseLocked) => Some(Cause::Busy),
            Some(PermissionDenied | ReadOnly) => Some(Cause::Denied),
            Some(CannotOpen | SystemIoFailure) => Some(Cause::Failed),
            Some(OutOfMemory) => Some(Cause::OutOfMemory),
            _ => None,
        };
        let message = format!(
            "cannot read session database at \"{}\": {error}",
            self.path.display()
        );
        match cause {
            Some(cause) => Refusal::Unavailable {
                cause,
                reason: message,
            },
            None => Refusal::Corrupt(message),
        }
    }

    /// A session removed from the database while it was being read.
    fn gone(&self, id: &str) -> Refusal {
        Refusal::Unavailable {
            cause: Cause::Removed,
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

    /// `BEGIN IMMEDIATE`, waiting up to `BUSY_TIMEOUT` for the write lock,
    /// then the identity checks the Harness repeats inside every write
    /// transaction (spec §11.1).
    fn write_transaction<'a>(&self, writer: &'a mut Connection) -> io::Result<Transaction<'a>> {
        let transaction = writer
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| write_error(&self.path, e))?;
        self.checked(transaction)
    }

    /// `BEGIN IMMEDIATE` in the pacer's gap, then the identity checks, and
    /// when it began. It never waits on another connection's write lock: a
    /// wait ends the instant that writer's commit frees the lock, which is
    /// when a writer that commits twice in a row (a batch, then a flush)
    /// asks for it again, and that second commit would fail (writer_safety:
    /// a Harness commit refused 0.1 ms after its 12 ms batch). A lock found
    /// held sends the pacer to the next gap instead, for `BUSY_TIMEOUT` in all.
    fn paced_transaction<'a>(
        &self,
        writer: &'a Connection,
        pacer: &mut pace::Pacer,
    ) -> io::Result<(Transaction<'a>, Instant)> {
        let failed = |e: rusqlite::Error| write_error(&self.path, e);
        let first_try = Instant::now();
        loop {
            writer.busy_timeout(Duration::ZERO).map_err(failed)?;
            let began = Instant::now();
            let begun = Transaction::new_unchecked(writer, TransactionBehavior::Immediate);
            // Inside the transaction, as in any other: a rollback journal's
            // commit waits for readers to finish.
            writer.busy_timeout(BUSY_TIMEOUT).map_err(failed)?;
            match begun {
                Ok(transaction) => return Ok((self.checked(transaction)?, began)),
                Err(e) if is_busy(&e) && first_try.elapsed() < BUSY_TIMEOUT => pacer.refused(),
                Err(e) => return Err(failed(e)),
            }
        }
    }

    /// `transaction`, once the database is still the one mounted.
    fn checked<'a>(&self, transaction: Transaction<'a>) -> io::Result<Transaction<'a>> {
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

    /// The child's rows in paced transactions, then its session row in one
    /// more: nothing lists a session before its row exists.
    fn write_hidden_child(
        &self,
        writer: &mut Connection,
        pacer: &mut pace::Pacer,
        id: &str,
        session: &NewSession,
        rows: &[EventRow],
    ) -> io::Result<()> {
        let failed = |e: rusqlite::Error| write_error(&self.path, e);
        let taken = || {
            io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "session {id:?} already exists in session database at \"{}\"",
                    self.path.display()
                ),
            )
        };
        if session_exists(writer, id).map_err(failed)? {
            return Err(taken());
        }
        // Rows a crashed write of this very child left (its marker is ours now).
        self.remove_hidden_rows(writer, pacer, id)?;
        // Invisible rows need no fsync of their own; see `pace`.
        // No checkpoint of its own either: it would run inside our commits and
        // stretch the gap; the mount asks for a PASSIVE one after a flush.
        writer
            .execute_batch("PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0;")
            .map_err(failed)?;
        let mut rest = rows;
        while !rest.is_empty() {
            pacer.gap();
            while !rest.is_empty() && pacer.in_window() {
                let (transaction, began) = self.paced_transaction(writer, pacer)?;
                let (started, budget) = (Instant::now(), pacer.row_budget());
                let mut done = 0;
                while done < rest.len() && (done == 0 || started.elapsed() < budget) {
                    insert_events(&transaction, self.schema, id, &rest[done..done + 1])
                        .map_err(failed)?;
                    done += 1;
                }
                transaction.commit().map_err(failed)?;
                pacer.held(began.elapsed());
                rest = &rest[done..];
            }
        }
        let wal: bool = writer
            .query_row("PRAGMA journal_mode", [], |r| r.get::<_, String>(0))
            .map_err(failed)?
            .eq_ignore_ascii_case("wal");
        if !wal {
            // A rollback journal has no WAL to sync afterwards.
            writer
                .execute_batch("PRAGMA synchronous = FULL")
                .map_err(failed)?;
        }
        pacer.gap();
        let (transaction, _) = self.paced_transaction(writer, pacer)?;
        if session_exists(&transaction, id).map_err(failed)? {
            return Err(taken());
        }
        session.insert(&transaction).map_err(failed)?;
        transaction.commit().map_err(failed)?;
        if wal {
            // The fsync that makes the child durable, outside the lock: the
            // WAL holds no lock of SQLite's, so this descriptor may close.
            std::fs::File::open(self.wal_path())?.sync_data()?;
        }
        Ok(())
    }

    /// Removes the rows of `id` while no session row has that id (rows of an
    /// unfinished child), in paced transactions.
    fn remove_hidden_rows(
        &self,
        writer: &mut Connection,
        pacer: &mut pace::Pacer,
        id: &str,
    ) -> io::Result<()> {
        let failed = |e: rusqlite::Error| write_error(&self.path, e);
        loop {
            pacer.gap();
            let (transaction, _) = self.paced_transaction(writer, pacer)?;
            let removed = transaction
                .execute(DELETE_HIDDEN_ROWS, params![id, HIDDEN_ROWS_PER_DELETE])
                .map_err(failed)?;
            transaction.commit().map_err(failed)?;
            if removed == 0 {
                return Ok(());
            }
        }
    }

    /// Removes what crashed fork writes left: rows of children whose session
    /// row was never written, named by markers no live process holds.
    fn remove_leftovers(&self) {
        for (marker, id) in pending::leftovers(&self.path) {
            let removed = self.writer().and_then(|mut writer| {
                let mut pacer = pace::Pacer::new(&self.probe, &self.cadence);
                self.remove_hidden_rows(&mut writer, &mut pacer, &id)
            });
            match removed.and_then(|()| marker.release()) {
                Ok(()) => log::info!("removed what an unfinished fork of {id:?} left"),
                Err(e) => log::warn!("cannot remove what an unfinished fork of {id:?} left: {e}"),
            }
        }
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

impl Catalog for SqliteStore {
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
                    stored: None,
                })
            })
            .collect())
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

    fn find(&self, id: &str) -> Vec<Listing> {
        find_row(self, id)
    }
}

impl Source for SqliteStore {
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

    /// A session's rows are only ever appended (a repair drops only a torn
    /// tail, past any saved point), and a replaced session has a new
    /// incarnation, which its revision names.
    fn prefix_digest(&self, _key: &SessionKey, _point: &ScanPoint) -> Option<u64> {
        Some(0)
    }

    /// Every session shares the database: another connection may be the
    /// Harness writing any of them.
    fn writer_presence(&self, _key: &SessionKey) -> WriterPresence {
        self.probe.writer()
    }
}

impl Writer for SqliteStore {
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

    /// Written in short transactions between the other writer's commits, rows
    /// first and the session row last, so the child is listed only once it is
    /// whole (see `pace`). Returns once the session row is committed.
    fn create(&self, header: &SessionHeader, events: &[JsonMap]) -> io::Result<SessionKey> {
        let (session, rows) = self.encode_session(header, events)?;
        let failed = |e: rusqlite::Error| write_error(&self.path, e);
        let mut writer = self.writer()?;
        // The rows precede their session row, which foreign keys would refuse.
        writer
            .execute_batch("PRAGMA foreign_keys = OFF")
            .map_err(failed)?;
        let (marker, crashed_before) = pending::Marker::claim(&self.path, &header.id)?;
        let mut pacer = pace::Pacer::new(&self.probe, &self.cadence);
        if crashed_before {
            self.remove_hidden_rows(&mut writer, &mut pacer, &header.id)?;
        }
        let written = self.write_hidden_child(&mut writer, &mut pacer, &header.id, &session, &rows);
        if let Err(error) = written {
            // The marker stays when the rows cannot be removed either.
            match self.remove_hidden_rows(&mut writer, &mut pacer, &header.id) {
                Ok(()) => marker.release()?,
                Err(e) => log::warn!("{e}; the rows are removed at the next mount"),
            }
            return Err(error);
        }
        marker.release()?;
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
}

impl Watched for SqliteStore {
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

    fn last_written(&self) -> Option<(String, i64)> {
        // The rowid order is the order rows were added: one step down the
        // table's b-tree, whatever the store's size.
        self.read(|tx| {
            tx.query_row(
                "SELECT session_id, time FROM events ORDER BY rowid DESC LIMIT 1",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
        })
        .ok()
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

/// SQLite's "the database is locked": another connection holds the lock asked for.
fn is_busy(error: &rusqlite::Error) -> bool {
    error.sqlite_error_code() == Some(ErrorCode::DatabaseBusy)
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
mod tests;
