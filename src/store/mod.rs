//! Store backends: the Harness's on-disk formats turned into logical events.
//! Nothing here knows about FUSE.
//!
//! A backend lists sessions from their headers alone, scans one session's stored
//! events in order (resumably, so a growing log is continued rather than
//! re-read), fetches one event again by its location, and writes fork children.

pub mod jsonl;
pub mod lines;
pub mod memory;
pub mod sqlite;
pub mod tail;
pub mod watch;
pub mod zstd_frames;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use crate::json::JsonMap;
use crate::model::Refusal;
use crate::model::Scanned;
use crate::model::activity::WriterPresence;
use crate::model::header::SessionHeader;

/// How a backend finds one session again.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SessionKey {
    /// A JSONL artifact (`session.jsonl` or `session.jsonl.zstd`).
    File(PathBuf),
    /// A row of the SQLite `sessions` table.
    Row(String),
}

impl SessionKey {
    /// Where the session is stored, for messages.
    pub fn describe(&self) -> String {
        match self {
            SessionKey::File(path) => path.display().to_string(),
            SessionKey::Row(id) => format!("sessions row {id:?}"),
        }
    }
}

/// One session as listed: its id and the header stored with it.
#[derive(Clone, Debug)]
pub struct Listing {
    /// The session id (from the header when readable, else decoded from the path).
    pub id: String,
    /// How the backend finds the session again.
    pub key: SessionKey,
    /// The stored header, or why it could not be read.
    pub header: Result<SessionHeader, String>,
    /// For a session whose header cannot be read and whose directory name is no
    /// valid id encoding: that name, to show it by (its id is unknown).
    pub raw_name: Option<String>,
    /// The permission bits of the stored file, when the listing saw them.
    pub mode: Option<u32>,
    /// The stored log's size and last write, when the listing saw them (a
    /// JSONL file's metadata; SQLite keeps neither per session).
    pub stored: Option<StoredFile>,
}

/// What a listing learns of a session's log file without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredFile {
    /// The file's size in bytes (compressed, for zstd).
    pub size: u64,
    /// Its last modification, in ms since the Unix epoch.
    pub modified_ms: i64,
}

impl StoredFile {
    /// The size and modification time of a file's `stat`.
    pub fn of(stat: &libc::stat) -> StoredFile {
        // Before the epoch reads as the epoch; a time past i64 ms (set on
        // purpose) as the last one.
        let modified_ms = match stat.st_mtime {
            s if s >= 0 => s
                .saturating_mul(1000)
                .saturating_add(stat.st_mtime_nsec / 1_000_000),
            _ => 0,
        };
        StoredFile {
            size: stat.st_size as u64,
            modified_ms,
        }
    }
}

impl Listing {
    /// A session whose header was read: it names the session.
    pub fn of(header: SessionHeader, key: SessionKey) -> Listing {
        Listing {
            id: header.id.clone(),
            key,
            header: Ok(header),
            raw_name: None,
            mode: None,
            stored: None,
        }
    }
}

/// A cheap identity of a session's stored bytes: when it is unchanged, nothing was
/// appended. It reads `ARTIFACT:STATE` (JSONL: dev.inode, then size, mtime,
/// ctime; SQLite: incarnation, then revision): a new ARTIFACT means the log was
/// replaced (deleted and created again), so it is read afresh, not continued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revision(pub String);

impl Revision {
    /// True when both revisions name the same stored artifact.
    pub fn same_artifact(&self, other: &Revision) -> bool {
        let artifact = |r: &Revision| r.0.split_once(':').map(|(a, _)| a.to_string());
        artifact(self).is_some() && artifact(self) == artifact(other)
    }

    /// The same artifact in a state no store ever answers: recorded after a
    /// read that ended short of the stated size, so the next refresh reads on.
    pub fn unsettled(&self) -> Revision {
        Revision(format!("{}:short-read", self.0))
    }
}

/// Where one logical event is stored, so it can be read again alone.
/// `record` is the line's byte offset (raw JSONL), the frame's byte offset (zstd)
/// or the row's first seq (SQLite); `within` is the line's offset inside the
/// frame's plaintext (zstd only); `member` is the event's index in a packed row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventLoc {
    /// The line's or frame's byte offset, or the row's first seq.
    pub record: u64,
    /// The line's offset in the frame's plaintext (zstd only).
    pub within: u32,
    /// The event's index in a packed row.
    pub member: u32,
}

/// Where a scan stopped, so the next scan of a growing log starts there.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScanPoint {
    /// Events kept so far (the next expected seq).
    pub events: u64,
    /// Backend position: the committed byte offset in the file (JSONL, zstd) or
    /// the next row seq (SQLite).
    pub offset: u64,
    /// Plaintext bytes consumed so far (zstd) or lines after the header (JSONL).
    pub plain: u64,
    /// Complete frames consumed (zstd).
    pub frames: u64,
}

/// How a scan ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScanEnd {
    /// Every stored byte was accepted.
    Complete,
    /// A tail that was never completely written was left out (it is not an error:
    /// a crash, or a write still in progress).
    Torn {
        /// Where the torn tail starts, as messages say it (`byte 1234 (...)`, `seq 41`).
        at: String,
    },
    /// Every byte read was accepted, but the file ended before the size its
    /// file system stated for it: rclone's cache can serve a file's old bytes
    /// beside its new size. The next refresh reads on.
    ShortRead,
}

/// How a checkpoint after a flush went: whether the store's main file now holds
/// everything written, so a copy of that file alone is a complete backup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checkpoint {
    /// The store keeps no write-ahead log (JSONL; SQLite in a rollback-journal
    /// mode): every write already lands in the store's files.
    NotNeeded,
    /// A passive checkpoint copied `copied` of the `frames` frames in the WAL
    /// into the database file; a reader or writer holds back the rest.
    Passive {
        /// Frames in the WAL.
        frames: u64,
        /// How many of them are now in the database file.
        copied: u64,
    },
    /// Another connection was checkpointing; nothing was waited for.
    Busy,
}

/// What a listing knows of a log file from one `stat`: while it is the same,
/// the file was not written (the change time moves with every write and
/// cannot be set), so its header is the one read before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    /// Device and inode: a replaced file is another file.
    pub dev: u64,
    /// The inode number.
    pub ino: u64,
    /// The size in bytes.
    pub size: u64,
    /// The last modification, in ns since the epoch.
    pub mtime_ns: i128,
    /// The last change of data or metadata, in ns since the epoch.
    pub ctime_ns: i128,
}

impl FileStamp {
    /// The stamp of a file's `stat`.
    pub fn of(stat: &libc::stat) -> FileStamp {
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        FileStamp {
            dev: stat.st_dev,
            ino: stat.st_ino,
            size: stat.st_size as u64,
            mtime_ns: ns(stat.st_mtime, stat.st_mtime_nsec),
            ctime_ns: ns(stat.st_ctime, stat.st_ctime_nsec),
        }
    }
}

/// Headers read by earlier listings, kept by whoever keeps them (the
/// persistent index), so that a listing reads no header whose log is
/// unchanged: one `stat` tells.
pub trait KnownHeaders: Send + Sync {
    /// The header read from the log at `path` when its stamp was `stamp`.
    fn header(&self, path: &Path, stamp: &FileStamp) -> Option<SessionHeader>;

    /// Records the header just read from the log at `path`, stamped `stamp`.
    fn record(&self, path: &Path, stamp: FileStamp, header: &SessionHeader);

    /// A listing of the whole store ended: headers not asked for since the
    /// keeper last started are of logs that are gone.
    fn listed_all(&self) {}
}

/// Receives the stored events of a scan, in seq order.
pub type EventSink<'a> = dyn FnMut(EventLoc, Scanned) -> Result<(), Refusal> + 'a;

/// What a store holds: its sessions, found from headers alone.
pub trait Catalog {
    /// The encoding(s) this store holds, for messages.
    fn describe(&self) -> String;

    /// Every session, from headers alone (never whole logs).
    fn list(&self) -> Vec<Listing>;

    /// As `list`, but a store that cannot be listed right now says so rather
    /// than answering with no sessions, so none is taken for removed.
    fn try_list(&self) -> Result<Vec<Listing>, Refusal> {
        Ok(self.list())
    }

    /// The same listings handed over in parts, so that a caller that keeps
    /// less than a listing need never hold them all. Every session is in one
    /// part, except that the artifacts of one id may be in different parts.
    /// Fails, as `try_list`, when the store cannot be listed right now.
    fn list_parts(&self, each: &mut dyn FnMut(Vec<Listing>)) -> Result<(), Refusal> {
        each(self.try_list()?);
        Ok(())
    }

    /// The artifacts that hold session `id` (more than one is a duplicate id),
    /// found without listing the store. A store keyed by id answers with
    /// [`find_row`].
    fn find(&self, id: &str) -> Vec<Listing>;

    /// True when `id` names a session anywhere in the store.
    fn contains(&self, id: &str) -> bool;

    /// A cheap identity of the set of sessions: while it is unchanged, listing
    /// again would find nothing new. `None` when the store cannot tell.
    fn listing_revision(&self) -> Option<String> {
        None
    }

    /// Where headers read by earlier listings are kept: a store that reads
    /// one file per header asks there first. Others ignore it.
    fn remember_headers(&self, _known: std::sync::Arc<dyn KnownHeaders>) {}
}

/// One session's stored bytes: its header, its events in order, one event
/// again, and cheap identities of what is stored.
pub trait Source {
    /// The header of one session, reading only its header.
    fn header(&self, key: &SessionKey) -> Result<SessionHeader, Refusal>;

    /// The current revision of one session's stored bytes.
    fn revision(&self, key: &SessionKey) -> Result<Revision, Refusal>;

    /// The permission bits of the file that holds the session, where the store
    /// has one: the mount shows no more than they grant.
    fn mode(&self, _key: &SessionKey) -> Option<u32> {
        None
    }

    /// When the session's stored bytes were last modified, where the store knows.
    fn modified(&self, _key: &SessionKey) -> Option<std::time::SystemTime> {
        None
    }

    /// Scans stored events from `from` on, handing each to `sink`, and returns
    /// where it stopped. Corrupt committed data or an unreadable format is a refusal.
    fn scan(
        &self,
        key: &SessionKey,
        from: &ScanPoint,
        sink: &mut EventSink,
    ) -> Result<(ScanPoint, ScanEnd), Refusal>;

    /// Reads one stored event again.
    fn fetch(&self, key: &SessionKey, loc: EventLoc) -> Result<JsonMap, Refusal>;

    /// A digest of the stored bytes before `point`, to tell a log that grew
    /// since it was scanned from one rewritten: a scan saved at `point` is
    /// continued only while it is the same. A store whose revision already
    /// names every rewrite (SQLite's incarnation) answers with a constant;
    /// `None`: the store cannot vouch, and a grown log is read again whole.
    fn prefix_digest(&self, _key: &SessionKey, _point: &ScanPoint) -> Option<u64> {
        None
    }

    /// Whether a process that may still write the session has the store open.
    fn writer_presence(&self, _key: &SessionKey) -> WriterPresence {
        WriterPresence::Unknown
    }
}

/// What sessionfs writes into a store: fork children, crash repairs, and the
/// checkpoint after a flush.
pub trait Writer {
    /// Writes a new session (a fork child) atomically in the store's own encoding.
    /// Fails with `AlreadyExists` when the id is taken anywhere in the store.
    fn create(&self, header: &SessionHeader, events: &[JsonMap]) -> std::io::Result<SessionKey>;

    /// Takes `header.id` in the store for a session `create` will write later,
    /// so that another process sharing the store that takes the same id is
    /// refused with `AlreadyExists` at once. By default nothing is taken, and
    /// `create`'s own check is the only one (SQLite's runs in its transaction).
    fn reserve(&self, _header: &SessionHeader) -> std::io::Result<()> {
        Ok(())
    }

    /// Gives back the reservation of a session that will not be written.
    fn release(&self, _header: &SessionHeader) {}

    /// Makes a crash repair durable as the Harness's own load does (spec §8.2,
    /// §10.5, §10.6, §11.5): the stored bytes after `keep` (a torn tail) are
    /// dropped and `tail` (events recovered from it, then the closers) is
    /// appended in the store's encoding. Refused when the session changed since
    /// `expected` was read.
    fn repair(
        &self,
        key: &SessionKey,
        keep: &ScanPoint,
        expected: &Revision,
        tail: &[JsonMap],
    ) -> std::io::Result<()>;

    /// Moves what was written into the store's main file where that never waits
    /// on another process (SQLite: a PASSIVE WAL checkpoint), so a copy of that
    /// file alone holds it.
    fn checkpoint(&self) -> std::io::Result<Checkpoint> {
        Ok(Checkpoint::NotNeeded)
    }
}

/// Where a store's changes show, for the watcher. Every method has a default:
/// a store that cannot be watched implements it empty.
pub trait Watched {
    /// The directories whose changes may add, remove or write sessions, to be
    /// watched while mounted (JSONL: the root and each project directory;
    /// SQLite: the database's directory). Empty: the store cannot be watched.
    fn watch_dirs(&self) -> Vec<PathBuf> {
        Vec::new()
    }

    /// True when a change to entry `name` of a directory of `watch_dirs`
    /// writes sessions' data itself (SQLite: the database or its WAL), rather
    /// than adding or removing a session.
    fn is_data_change(&self, _name: &str) -> bool {
        false
    }

    /// The directory holding one session's stored bytes, watched while its
    /// view is loaded; `None` where `watch_dirs` already covers it.
    fn session_dir(&self, _key: &SessionKey) -> Option<PathBuf> {
        None
    }

    /// Directories the last listing saw that may yet receive a session (JSONL:
    /// session directories holding no log yet, as the Harness makes them just
    /// before it links the log in), to be watched like `watch_dirs` so that
    /// the session is listed as soon as its log appears.
    fn awaiting_dirs(&self) -> Vec<PathBuf> {
        Vec::new()
    }

    /// A cheap mark that changes whenever a session is added, read after a
    /// data change (see `is_data_change`) to tell whether the listing must be
    /// asked again now. `None` where a data change never adds a session.
    fn added_mark(&self) -> Option<i64> {
        None
    }

    /// The session holding the store's newest event, and that event's time
    /// (ms), read cheaply after a data change (SQLite: the last event row).
    /// `None` where the store cannot tell so (JSONL: each log's own time).
    fn last_written(&self) -> Option<(String, i64)> {
        None
    }
}

/// A whole store, as a mount uses it: every part above. Implemented for any
/// type that has them all.
pub trait Backend: Catalog + Source + Writer + Watched + Send + Sync {}

impl<T: Catalog + Source + Writer + Watched + Send + Sync + ?Sized> Backend for T {}

/// [`Catalog::find`] for a store keyed by id: the one row named `id`, if any.
pub fn find_row(store: &(impl Catalog + Source + ?Sized), id: &str) -> Vec<Listing> {
    if !store.contains(id) {
        return Vec::new();
    }
    let key = SessionKey::Row(id.to_string());
    vec![Listing {
        id: id.to_string(),
        header: store.header(&key).map_err(|r| r.message().to_string()),
        key,
        raw_name: None,
        mode: None,
        stored: None,
    }]
}

/// Opens a store, detecting its kind: a directory of JSONL sessions (raw, zstd or
/// both), or an SQLite database file.
pub fn open(path: &Path) -> Result<Box<dyn Backend>, String> {
    let meta = std::fs::metadata(path)
        .map_err(|e| format!("cannot open store {}: {e}", path.display()))?;
    if meta.is_dir() {
        return Ok(Box::new(jsonl::JsonlStore::open(path)?));
    }
    if meta.is_file() {
        return Ok(Box::new(sqlite::SqliteStore::open(path)?));
    }
    Err(format!(
        "store {} is neither a directory of JSONL sessions nor an SQLite file",
        path.display()
    ))
}

/// Runs `produce` on a second thread, ahead of `consume`, which gets its items
/// in order: a long scan then reads and decodes on one core while it folds on
/// the other. `produce` returns each item and whether more may follow;
/// `consume` breaks to stop early. Items travel in batches of up to `batch`, so
/// the hand-over costs little per item. `Continue` means every item was
/// consumed without a break.
pub(crate) fn read_ahead<I: Send, T>(
    batch: usize,
    mut produce: impl FnMut() -> (I, bool) + Send,
    mut consume: impl FnMut(I) -> ControlFlow<T>,
) -> ControlFlow<T> {
    std::thread::scope(|scope| {
        let (batches, received) = mpsc::sync_channel::<Vec<I>>(2);
        scope.spawn(move || {
            let mut more = true;
            while more {
                let mut items = Vec::with_capacity(batch);
                while more && items.len() < batch {
                    let (item, more_after) = produce();
                    items.push(item);
                    more = more_after;
                }
                // The reading side hung up: it stopped early.
                if batches.send(items).is_err() {
                    return;
                }
            }
        });
        for item in received.iter().flatten() {
            if let ControlFlow::Break(end) = consume(item) {
                return ControlFlow::Break(end);
            }
        }
        ControlFlow::Continue(())
    })
}
