//! The persistent index: sessions' saved scans kept on disk between mounts,
//! one file per session under one directory per store, so that a remount
//! reads only what grew (see `view::SavedScans` for what a scan holds and
//! when it is trusted).
//!
//! It is a cache, never a source of truth. Every file is written whole under
//! a temporary name and renamed into place, and read back only when its
//! magic, its zstd checksum, its store and its session all match; anything
//! else is a miss, which costs a full read of the log and nothing more. Its
//! size is bounded: beyond `max_bytes` the least recently used files go.
//! Writes run on a thread of their own, so no request waits on the disk.
//!
//! A first mount saves while it builds, and both compete for the cores: a
//! save is written at a fast zstd level, then compacted at a better one by
//! a third thread at the lowest CPU priority once no file was saved or read
//! for `QUIET`.
//! A file the mount ended before compacting is compacted when a later mount
//! reads it.
//!
//! It also keeps the headers listings read, each with the stamp of its log
//! (one `stat`), so that a remount lists an unchanged store without opening
//! a log ([`KnownHeaders`]).
//!
//! Lock order: a view's lock (a save is made under it), then `queue`, then
//! `pending`; `compaction`, then `compacting`; `headers`, `last_use` and
//! `renames` are each taken alone.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::digest::Fnv;
use crate::model::header::SessionHeader;
use crate::store::{FileStamp, KnownHeaders, SessionKey};
use crate::sync::lock;
use crate::view::SavedScans;

/// The bound on one store's index when `-o index_max=` does not set one.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// Starts every index file; its last byte is the envelope's version.
const MAGIC: &[u8; 8] = b"SFSINDX\x01";

/// The zstd level a save is written at while the mount builds. On a cold grep
/// of a 200-session store, level 1 here made the index writer a quarter of
/// the mount's CPU; this level took 2–3 s less CPU than level 1 and as little
/// as -100, for an index 2.3 times larger until it is compacted (476 MiB).
const FAST_LEVEL: i32 = -30;

/// Saves smaller than this are written compacted at once: compressing them
/// costs little either way, and a mount that reads 10,000 small sessions
/// would otherwise compact 10,000 files once it is quiet.
const FAST_FROM: usize = 256 << 10;

/// The zstd level a file is compacted to once the mount is quiet.
const COMPACT_LEVEL: i32 = 3;

/// How long no file may be saved or read before files are compacted.
const QUIET: Duration = Duration::from_secs(2);

/// How much plaintext compaction moves at a time between checks that the
/// mount is ending.
const COMPACT_PIECE: usize = 1 << 20;

/// How many saves may wait for the writer thread, and how many bytes they
/// may hold together (one save of any size is taken): more are dropped, as a
/// missed save costs the next mount a full read and nothing else, and a queue
/// of huge transcripts would cost memory.
const QUEUED_SAVES: usize = 8;
const QUEUED_BYTES: usize = 64 << 20;

/// The most plaintext an index file may hold: more is a damaged header.
const MAX_PLAINTEXT: u64 = 4 << 30;

/// A temporary file older than this was left by a writer that died.
const ABANDONED: Duration = Duration::from_secs(3600);

/// One store's persistent index.
#[derive(Debug)]
pub struct PersistentIndex {
    shared: Arc<Shared>,
    queue: Mutex<Option<SyncSender<Save>>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Keys of files to compact, for the compacting thread.
    compaction: Mutex<Option<Sender<String>>>,
    compactor: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Headers listings had from the table rather than from their logs.
    headers_known: AtomicU64,
}

/// The name the table of known headers is kept under, beside the sessions'.
const HEADERS_KEY: &str = "listing headers";

#[derive(Debug, Default)]
struct Headers {
    /// By the digest of the log's path: a path of another log with the same
    /// digest is another file, whose stamp (device and inode) differs.
    table: HashMap<u64, Known>,
    loaded: bool,
    /// The order the next header asked for or recorded is seen in.
    next_seen: u64,
    /// A header was recorded since the table was read.
    changed: bool,
    /// A listing of the whole store ended: unseen entries are of logs gone.
    listed_all: bool,
}

/// One known header, kept as its JSON (about half the parsed header's
/// memory: a store of 100,000 sessions holds 100,000 of these).
#[derive(Debug)]
struct Known {
    stamp: FileStamp,
    header: HeaderJson,
    /// When this mount first asked for it or recorded it (`None`: not yet).
    /// The table is saved in this order, so the next mount's listing reads
    /// the loaded headers front to back, not at random.
    seen: Option<u64>,
}

/// A known header's JSON: a range of a shared buffer, the saved table's
/// (every loaded header in one allocation) or its own (recorded by this
/// mount). A listing takes it from under the table's lock without copying
/// it.
#[derive(Debug, Clone)]
struct HeaderJson {
    buffer: Arc<Vec<u8>>,
    range: std::ops::Range<usize>,
}

impl std::ops::Deref for HeaderJson {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.buffer[self.range.clone()]
    }
}

#[derive(Debug)]
struct Shared {
    /// This store's directory.
    dir: PathBuf,
    /// The store's canonical path, which every file names.
    store: String,
    max_bytes: u64,
    /// Bytes of index files, once counted (the first save counts them).
    used: AtomicU64,
    counted: AtomicBool,
    /// Saves queued or being written, for [`PersistentIndex::wait_idle`].
    pending: Mutex<Pending>,
    idle: Condvar,
    /// A failure to write is said once per mount, not once per session.
    warned: AtomicBool,
    /// The headers listings read, by log path; read from disk by the writer
    /// thread as the mount starts, so that a first listing seldom waits for it.
    headers: Mutex<Headers>,
    /// When a file was last written or read for a view: compaction starts only
    /// `QUIET` after it, at the lowest CPU priority, to keep out of the mount's way.
    last_use: Mutex<Option<Instant>>,
    /// Files queued for compaction or being compacted, for `wait_compacted`.
    compacting: Mutex<usize>,
    compacted: Condvar,
    /// The mount is ending: compaction stops where it is.
    ending: AtomicBool,
    /// The saves as the mount ends have begun: they are written compacted.
    last_saves: AtomicBool,
    /// Taken to replace a file and count what it changed, by the writer and
    /// the compactor alike (a compaction must not replace a newer save).
    renames: Mutex<()>,
}

struct Save {
    key: String,
    bytes: Vec<u8>,
    /// Written at the fast level and compacted later; a small save, and the
    /// saves as the mount ends (nothing would be left to compact them), are
    /// written compacted.
    fast: bool,
}

/// Whether a file was written at the compacted level.
struct Settled(bool);

/// The file a compaction read: replaced only while it is still there.
struct Compacted {
    ino: u64,
    /// Its last use, which the compacted file keeps.
    used: SystemTime,
}

/// Saves queued or being written, and the bytes they hold.
#[derive(Debug, Default)]
struct Pending {
    saves: usize,
    bytes: usize,
}

impl PersistentIndex {
    /// Where indexes live unless `-o index=` says: `$XDG_CACHE_HOME/sessionfs`,
    /// else `~/.cache/sessionfs`.
    pub fn default_base() -> Option<PathBuf> {
        let non_empty = |name| std::env::var_os(name).filter(|v| !v.is_empty());
        match non_empty("XDG_CACHE_HOME") {
            Some(cache) => Some(PathBuf::from(cache).join("sessionfs")),
            None => non_empty("HOME").map(|home| PathBuf::from(home).join(".cache/sessionfs")),
        }
    }

    /// The index of the store at `store` (canonical) under `base`, made when
    /// missing (mode 0700); `Err` says why it cannot be used.
    pub fn open(base: &Path, store: &Path, max_bytes: u64) -> Result<PersistentIndex, String> {
        let named = store.display().to_string();
        let dir = base.join(format!("{:016x}", Fnv::of(named.as_bytes())));
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("cannot make index directory {}: {e}", dir.display()))?;
        let canonical = dir
            .canonicalize()
            .map_err(|e| format!("cannot open index directory {}: {e}", dir.display()))?;
        if canonical.starts_with(store) {
            return Err(format!(
                "index directory {} is inside the store, which sessionfs never writes",
                dir.display()
            ));
        }
        // Names the store for people who look; nothing reads it back.
        let _ = std::fs::write(dir.join("STORE"), format!("{named}\n"));
        let shared = Arc::new(Shared {
            dir,
            store: named,
            max_bytes,
            used: AtomicU64::new(0),
            counted: AtomicBool::new(false),
            pending: Mutex::default(),
            idle: Condvar::new(),
            warned: AtomicBool::new(false),
            headers: Mutex::default(),
            last_use: Mutex::default(),
            compacting: Mutex::default(),
            compacted: Condvar::new(),
            ending: AtomicBool::new(false),
            last_saves: AtomicBool::new(false),
            renames: Mutex::default(),
        });
        let (compaction, to_compact) = std::sync::mpsc::channel();
        let compacting = shared.clone();
        let compactor = std::thread::Builder::new()
            .name("sessionfs-compact".into())
            .spawn(move || compacting.compact_all(to_compact))
            .map_err(|e| format!("cannot start the index compactor: {e}"))?;
        let (queue, saves) = std::sync::mpsc::sync_channel(QUEUED_SAVES);
        let writing = shared.clone();
        let written = compaction.clone();
        let writer = std::thread::Builder::new()
            .name("sessionfs-index".into())
            .spawn(move || {
                drop(writing.headers());
                writing.write_all(saves, written)
            })
            .map_err(|e| format!("cannot start the index writer: {e}"))?;
        Ok(PersistentIndex {
            shared,
            queue: Mutex::new(Some(queue)),
            writer: Mutex::new(Some(writer)),
            compaction: Mutex::new(Some(compaction)),
            compactor: Mutex::new(Some(compactor)),
            headers_known: AtomicU64::new(0),
        })
    }

    /// How many headers listings had from the table, not from their logs.
    pub fn headers_known(&self) -> u64 {
        self.headers_known.load(Ordering::Relaxed)
    }

    /// Saves the table of known headers when this mount changed it (or a
    /// whole listing found logs gone), as the mount ends.
    pub fn save_headers(&self) {
        let bytes = {
            let headers = lock(&self.shared.headers);
            let pruned = headers.listed_all && headers.table.values().any(|k| k.seen.is_none());
            if !headers.changed && !pruned {
                return;
            }
            let mut kept: Vec<_> = headers
                .table
                .iter()
                .filter(|(_, known)| known.seen.is_some() || !headers.listed_all)
                .collect();
            kept.sort_unstable_by_key(|(_, known)| known.seen.unwrap_or(u64::MAX));
            let mut out = Vec::new();
            for (path, known) in kept {
                let stamp = &known.stamp;
                for field in [*path, stamp.dev, stamp.ino, stamp.size] {
                    out.extend_from_slice(&field.to_le_bytes());
                }
                for time in [stamp.mtime_ns, stamp.ctime_ns] {
                    out.extend_from_slice(&time.to_le_bytes());
                }
                out.extend_from_slice(&(known.header.len() as u32).to_le_bytes());
                out.extend_from_slice(&known.header);
            }
            out
        };
        // The mount is ending: this save waits for room rather than being dropped.
        self.enqueue(HEADERS_KEY.into(), bytes, true);
    }

    /// Hands `bytes` to the writer thread, to be kept under `key`. A save is
    /// dropped when the queue is full, unless `ending` (the mount is ending:
    /// it waits its turn).
    fn enqueue(&self, key: String, bytes: Vec<u8>, ending: bool) {
        let queue = lock(&self.queue);
        let Some(queue) = queue.as_ref() else {
            return;
        };
        let len = bytes.len();
        if !self.shared.admit(len, ending) {
            return log::debug!("index busy: {key} is not saved");
        }
        let save = Save {
            key,
            fast: !ending
                && bytes.len() >= FAST_FROM
                && !self.shared.last_saves.load(Ordering::Relaxed),
            bytes,
        };
        let sent = match ending {
            true => queue.send(save).map_err(|e| e.0),
            false => queue.try_send(save).map_err(|e| match e {
                TrySendError::Full(save) | TrySendError::Disconnected(save) => save,
            }),
        };
        if let Err(save) = sent {
            log::debug!("index busy: {} is not saved", save.key);
            self.shared.done(len);
        }
    }

    /// This store's index directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Blocks until every file queued for compaction so far is compacted (or
    /// failed): at least `QUIET` after the last save.
    pub fn wait_compacted(&self) {
        let mut compacting = lock(&self.shared.compacting);
        while *compacting > 0 {
            compacting = self
                .shared
                .compacted
                .wait(compacting)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Hands `key` to the compacting thread.
    fn compact(&self, key: String) {
        if let Some(compaction) = lock(&self.compaction).as_ref() {
            self.shared.compaction_queued();
            if compaction.send(key).is_err() {
                self.shared.compaction_done();
            }
        }
    }

    /// Says that the saves made from now on are the mount's last: they are
    /// written compacted, as nothing will be left to compact them.
    pub fn last_saves(&self) {
        self.shared.last_saves.store(true, Ordering::Relaxed);
    }

    /// Blocks until every save queued so far is written (or failed).
    pub fn wait_idle(&self) {
        let mut pending = lock(&self.shared.pending);
        while pending.saves > 0 {
            pending = self
                .shared
                .idle
                .wait(pending)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Fixed bytes before each saved header: the path digest, the stamp and
/// the header's length.
const SAVED_HEADER_FIXED: usize = 4 * 8 + 2 * 16 + 4;

/// The table of known headers as [`PersistentIndex::save_headers`] wrote it,
/// from `buffer[start..]`; the headers stay in `buffer`.
fn read_headers(buffer: Arc<Vec<u8>>, start: usize) -> Option<HashMap<u64, Known>> {
    let mut bytes = buffer.get(start..)?;
    // Sized for headers of about 100 bytes: few regrowths for any store.
    let mut table = HashMap::with_capacity(bytes.len() / (SAVED_HEADER_FIXED + 100));
    while !bytes.is_empty() {
        let (fixed, rest) = bytes.split_at_checked(SAVED_HEADER_FIXED)?;
        bytes = rest;
        let word = |at: usize| u64::from_le_bytes(fixed[at..at + 8].try_into().unwrap_or_default());
        let time =
            |at: usize| i128::from_le_bytes(fixed[at..at + 16].try_into().unwrap_or_default());
        let len = u32::from_le_bytes(fixed[64..68].try_into().ok()?) as usize;
        let stamp = FileStamp {
            dev: word(8),
            ino: word(16),
            size: word(24),
            mtime_ns: time(32),
            ctime_ns: time(48),
        };
        let at = buffer.len() - bytes.len();
        bytes = bytes.get(len..)?;
        let header = HeaderJson {
            buffer: buffer.clone(),
            range: at..at + len,
        };
        table.insert(
            word(0),
            Known {
                stamp,
                header,
                seen: None,
            },
        );
    }
    Some(table)
}

impl Drop for PersistentIndex {
    /// Writes what is queued, then stops the writer, and the compactor where it is.
    fn drop(&mut self) {
        drop(lock(&self.queue).take());
        if let Some(writer) = lock(&self.writer).take() {
            let _ = writer.join();
        }
        self.shared.ending.store(true, Ordering::Relaxed);
        drop(lock(&self.compaction).take());
        if let Some(compactor) = lock(&self.compactor).take() {
            let _ = compactor.join();
        }
    }
}

impl KnownHeaders for PersistentIndex {
    fn header(&self, path: &Path, stamp: &FileStamp) -> Option<SessionHeader> {
        let digest = path_digest(path);
        // Parsed after the table is let go: every listing thread asks it.
        let json = {
            let mut headers = self.shared.headers();
            let order = headers.next_seen;
            let known = headers.table.get_mut(&digest)?;
            if known.seen.is_none() {
                known.seen = Some(order);
            }
            let json = (known.stamp == *stamp).then(|| known.header.clone());
            headers.next_seen += 1;
            json?
        };
        let header = serde_json::from_slice(&json).ok()?;
        self.headers_known.fetch_add(1, Ordering::Relaxed);
        Some(header)
    }

    fn record(&self, path: &Path, stamp: FileStamp, header: &SessionHeader) {
        let Ok(header) = serde_json::to_vec(header) else {
            return;
        };
        let header = HeaderJson {
            range: 0..header.len(),
            buffer: Arc::new(header),
        };
        let mut headers = self.shared.headers();
        let known = Known {
            stamp,
            header,
            seen: Some(headers.next_seen),
        };
        headers.next_seen += 1;
        headers.changed = true;
        headers.table.insert(path_digest(path), known);
    }

    fn listed_all(&self) {
        self.shared.headers().listed_all = true;
    }
}

fn path_digest(path: &Path) -> u64 {
    Fnv::of(path.as_os_str().as_encoded_bytes())
}

impl SavedScans for PersistentIndex {
    fn load(&self, key: &SessionKey) -> Option<Vec<u8>> {
        let key = key.describe();
        let path = self.shared.file_for(&key);
        *lock(&self.shared.last_use) = Some(Instant::now());
        match self.shared.read(&path, &key) {
            Ok((bytes, Settled(true))) => Some(bytes),
            Ok((bytes, Settled(false))) => {
                self.compact(key);
                Some(bytes)
            }
            Err(Miss::Absent) => None,
            Err(Miss::Unusable(why)) => {
                log::info!("index file {} not used: {why}", path.display());
                // A file that cannot be used is replaced by the next save.
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    fn save(&self, key: &SessionKey, bytes: Vec<u8>) {
        self.enqueue(key.describe(), bytes, false);
    }

    fn queued_bytes(&self) -> usize {
        lock(&self.shared.pending).bytes
    }
}

#[derive(Debug)]
enum Miss {
    Absent,
    Unusable(String),
}

impl Shared {
    /// The table of known headers, read from disk at first use (the writer thread's).
    fn headers(&self) -> std::sync::MutexGuard<'_, Headers> {
        let mut headers = lock(&self.headers);
        if !headers.loaded {
            headers.loaded = true;
            let path = self.file_for(HEADERS_KEY);
            match self.read_payload(&path, HEADERS_KEY) {
                Ok((bytes, start, _)) => match read_headers(Arc::new(bytes), start) {
                    Some(table) => headers.table = table,
                    None => log::info!("index file {} not used: damaged", path.display()),
                },
                Err(Miss::Absent) => {}
                Err(Miss::Unusable(why)) => {
                    log::info!("index file {} not used: {why}", path.display())
                }
            }
        }
        headers
    }

    fn file_for(&self, key: &str) -> PathBuf {
        self.dir
            .join(format!("{:016x}.idx", Fnv::of(key.as_bytes())))
    }

    /// Counts a save of `len` bytes as pending, unless the queue holds too
    /// much already (`ending`: the mount is ending, and it waits its turn).
    fn admit(&self, len: usize, ending: bool) -> bool {
        let mut pending = lock(&self.pending);
        if !ending && pending.saves > 0 && pending.bytes + len > QUEUED_BYTES {
            return false;
        }
        pending.saves += 1;
        pending.bytes += len;
        true
    }

    /// A save of `len` bytes was written, or failed.
    fn done(&self, len: usize) {
        let mut pending = lock(&self.pending);
        pending.saves = pending.saves.saturating_sub(1);
        pending.bytes = pending.bytes.saturating_sub(len);
        if pending.saves == 0 {
            self.idle.notify_all();
        }
    }

    /// The payload kept for `key` at `path`, touched as recently used.
    fn read(&self, path: &Path, key: &str) -> Result<(Vec<u8>, Settled), Miss> {
        let (mut plain, payload_at, settled) = self.read_payload(path, key)?;
        // The payload moved to the front of the buffer, not copied out of it.
        plain.drain(..payload_at);
        Ok((plain, settled))
    }

    /// What [`Shared::read`] reads, with the payload left where it is: the
    /// file's plaintext and where the payload starts in it.
    fn read_payload(&self, path: &Path, key: &str) -> Result<(Vec<u8>, usize, Settled), Miss> {
        let unusable = |why: String| Miss::Unusable(why);
        // Opened for writing too where it may be, to mark it used.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .or_else(|_| File::open(path))
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Miss::Absent,
                _ => unusable(e.to_string()),
            })?;
        let _ = file.set_modified(SystemTime::now());
        let size = frame_size(&mut file).map_err(unusable)?;
        let mut compressed = Vec::new();
        file.seek(SeekFrom::Start(MAGIC.len() as u64))
            .and_then(|_| file.read_to_end(&mut compressed))
            .map_err(|e| unusable(e.to_string()))?;
        let plain = zstd::bulk::decompress(&compressed, size as usize)
            .map_err(|e| unusable(format!("damaged: {e}")))?;
        let (envelope, payload_at) =
            read_envelope(&mut &plain[..]).ok_or_else(|| unusable("damaged".into()))?;
        self.check_envelope(&envelope, key).map_err(unusable)?;
        Ok((plain, payload_at, Settled(envelope.settled)))
    }

    fn check_envelope(&self, envelope: &Envelope, key: &str) -> Result<(), String> {
        match envelope.store == self.store && envelope.key == key {
            true => Ok(()),
            false => Err(format!(
                "written for {} in store {}",
                envelope.key, envelope.store
            )),
        }
    }

    fn write_all(&self, saves: Receiver<Save>, compaction: Sender<String>) {
        for save in saves {
            let level = if save.fast { FAST_LEVEL } else { COMPACT_LEVEL };
            let envelope = Envelope {
                store: self.store.clone(),
                key: save.key.clone(),
                settled: !save.fast,
            };
            let payload = save.bytes.len() as u64;
            let written = self.write(&envelope, payload, &mut &save.bytes[..], level, None);
            *lock(&self.last_use) = Some(Instant::now());
            match written {
                Ok(()) if save.fast => {
                    self.compaction_queued();
                    if compaction.send(save.key).is_err() {
                        self.compaction_done();
                    }
                }
                Ok(()) => {}
                Err(why) => self.warn(&why),
            }
            self.done(payload as usize);
        }
    }

    fn warn(&self, why: &str) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            log::warn!(
                "the persistent index in {} cannot be written ({why}): later mounts \
                 read these sessions whole again; said once per mount",
                self.dir.display()
            );
        }
    }

    /// Writes `envelope` and the `payload_len` bytes `payload` reads (and
    /// nothing more) as the file for the envelope's key, at `level`. A
    /// compaction replaces only the file it read, keeps its last use, and
    /// stops where it is when the mount ends.
    fn write(
        &self,
        envelope: &Envelope,
        payload_len: u64,
        payload: &mut impl Read,
        level: i32,
        compacting: Option<&Compacted>,
    ) -> Result<(), String> {
        static TEMPORARIES: AtomicU64 = AtomicU64::new(0);
        let path = self.file_for(&envelope.key);
        let envelope = serde_json::to_vec(envelope).map_err(|e| e.to_string())?;
        let temporary = self.dir.join(format!(
            ".{}.{}.{}.tmp",
            path.file_stem().unwrap_or_default().display(),
            std::process::id(),
            TEMPORARIES.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| -> std::io::Result<()> {
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&temporary)?;
            let mut out = std::io::BufWriter::new(file);
            out.write_all(MAGIC)?;
            let mut encoder = zstd::stream::Encoder::new(out, level)?;
            encoder.include_checksum(true)?;
            let size = 4 + envelope.len() as u64 + payload_len;
            encoder.set_pledged_src_size(Some(size))?;
            encoder.write_all(&(envelope.len() as u32).to_le_bytes())?;
            encoder.write_all(&envelope)?;
            let mut piece = vec![0; COMPACT_PIECE.min(payload_len as usize)];
            let mut left = payload_len;
            while left > 0 {
                if compacting.is_some() && self.ending.load(Ordering::Relaxed) {
                    return Err(std::io::Error::other("the mount is ending"));
                }
                let piece = &mut piece[..left.min(COMPACT_PIECE as u64) as usize];
                payload.read_exact(piece)?;
                encoder.write_all(piece)?;
                left -= piece.len() as u64;
            }
            // A decoder read to its end has checked the frame's checksum: a
            // damaged file is not given a new, sound one.
            if payload.read(&mut [0u8; 1])? != 0 {
                return Err(std::io::Error::other("bytes follow the payload"));
            }
            let file = encoder.finish()?.into_inner().map_err(|e| e.into_error())?;
            let size = file.metadata()?.len();
            let _renaming = lock(&self.renames);
            let current = std::fs::metadata(&path).ok();
            if let Some(compacted) = compacting
                && current.as_ref().map(MetadataExt::ino) != Some(compacted.ino)
            {
                return Err(std::io::Error::other("saved again while compacted"));
            }
            std::fs::rename(&temporary, &path)?;
            if let Some(compacted) = compacting {
                // After the rename: a temporary that looks old is taken for abandoned.
                file.set_modified(compacted.used)?;
            }
            let replaced = current.map_or(0, |m| m.len());
            self.count_replaced(size, replaced);
            Ok(())
        })();
        written.map_err(|e| {
            let _ = std::fs::remove_file(&temporary);
            e.to_string()
        })
    }

    /// Counts a file of `size` bytes that replaced one of `replaced` bytes,
    /// evicting beyond the bound; called under `renames`.
    fn count_replaced(&self, size: u64, replaced: u64) {
        if !self.counted.swap(true, Ordering::Relaxed) {
            self.used.store(self.count(), Ordering::Relaxed);
        } else if size >= replaced {
            self.used.fetch_add(size - replaced, Ordering::Relaxed);
        } else {
            let shrunk = replaced - size;
            let _ = self
                .used
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                    Some(used.saturating_sub(shrunk))
                });
        }
        if self.used.load(Ordering::Relaxed) > self.max_bytes {
            self.evict();
        }
    }

    /// Compacts the files whose keys come from `keys`, one at a time, each
    /// once no file was saved or read for `QUIET`, at the lowest CPU priority.
    fn compact_all(&self, keys: Receiver<String>) {
        // Only this thread's priority: a nice thread cannot be made less nice.
        // SAFETY: setpriority and gettid take and return plain integers.
        unsafe {
            libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19);
        }
        let mut queued = VecDeque::new();
        let mut known = HashSet::new();
        loop {
            let quiet_for = lock(&self.last_use).map_or(QUIET, |at| at.elapsed());
            // With files queued, wait only for the quiet (none left: at once).
            let next = match queued.is_empty() {
                true => keys.recv().map_err(|_| RecvTimeoutError::Disconnected),
                false => keys.recv_timeout(QUIET.saturating_sub(quiet_for)),
            };
            match next {
                Ok(key) if known.insert(key.clone()) => queued.push_back(key),
                // Queued already: counted once.
                Ok(_) => self.compaction_done(),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    let quiet = lock(&self.last_use).is_none_or(|at| at.elapsed() >= QUIET);
                    if quiet && let Some(key) = queued.pop_front() {
                        known.remove(&key);
                        if let Err(why) = self.compact(&key) {
                            log::debug!("index file for {key} not compacted: {why}");
                        }
                        self.compaction_done();
                    }
                }
            }
        }
        // The mount ended: what was not compacted stays as written.
        for _ in queued {
            self.compaction_done();
        }
    }

    /// Rewrites the file for `key` at the compacted level, decoding and
    /// encoding a piece at a time, unless it is compacted already or unusable.
    fn compact(&self, key: &str) -> Result<(), String> {
        let path = self.file_for(key);
        let mut file = File::open(&path).map_err(|e| e.to_string())?;
        let meta = file.metadata().map_err(|e| e.to_string())?;
        let compacted = Compacted {
            ino: meta.ino(),
            used: meta.modified().map_err(|e| e.to_string())?,
        };
        let size = frame_size(&mut file)?;
        file.seek(SeekFrom::Start(MAGIC.len() as u64))
            .map_err(|e| e.to_string())?;
        let mut plain = zstd::stream::Decoder::new(file).map_err(|e| e.to_string())?;
        let (mut envelope, payload_at) = read_envelope(&mut plain).ok_or("damaged")?;
        self.check_envelope(&envelope, key)?;
        if envelope.settled {
            return Ok(());
        }
        envelope.settled = true;
        let payload = size.checked_sub(payload_at as u64).ok_or("damaged")?;
        // The decoder checks the frame's checksum as it reaches its end, so a
        // damaged file fails here and is left for a read to find.
        self.write(
            &envelope,
            payload,
            &mut plain,
            COMPACT_LEVEL,
            Some(&compacted),
        )
    }

    fn compaction_queued(&self) {
        *lock(&self.compacting) += 1;
    }

    fn compaction_done(&self) {
        let mut compacting = lock(&self.compacting);
        *compacting = compacting.saturating_sub(1);
        if *compacting == 0 {
            self.compacted.notify_all();
        }
    }

    /// Bytes of index files in the directory, dropping temporaries that a
    /// writer which died left behind.
    fn count(&self) -> u64 {
        self.files().into_iter().map(|(_, size, _)| size).sum()
    }

    /// Index files as (last use, size, path); abandoned temporaries removed.
    fn files(&self) -> Vec<(SystemTime, u64, PathBuf)> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let now = SystemTime::now();
        let mut files = Vec::new();
        for entry in entries.flatten() {
            let (path, Ok(meta)) = (entry.path(), entry.metadata()) else {
                continue;
            };
            let used = meta.modified().unwrap_or(now);
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".tmp") {
                if now.duration_since(used).unwrap_or_default() > ABANDONED {
                    let _ = std::fs::remove_file(&path);
                }
            } else if name.ends_with(".idx") {
                files.push((used, meta.len(), path));
            }
        }
        files
    }

    /// Removes the least recently used files until the index is at most
    /// nine tenths of its bound, so the next saves do not evict again.
    fn evict(&self) {
        let mut files = self.files();
        files.sort();
        let mut used: u64 = files.iter().map(|(_, size, _)| size).sum();
        let target = self.max_bytes / 10 * 9;
        for (_, size, path) in files {
            if used <= target {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                used -= size;
            }
        }
        self.used.store(used, Ordering::Relaxed);
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Envelope {
    store: String,
    key: String,
    /// Written at the compacted level; files of older versions were.
    #[serde(default = "written_settled")]
    settled: bool,
}

fn written_settled() -> bool {
    true
}

/// The size of the plaintext of the zstd frame after the magic of an index
/// file, from the file's first bytes.
fn frame_size(file: &mut File) -> Result<u64, String> {
    let mut head = [0u8; MAGIC.len() + 18];
    let mut filled = 0;
    while filled < head.len() {
        match file.read(&mut head[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) => return Err(e.to_string()),
        }
    }
    let (magic, frame) = head[..filled].split_at(MAGIC.len().min(filled));
    if filled < MAGIC.len() + 5 {
        return Err("shorter than its header".into());
    }
    if magic != MAGIC {
        return Err("not an index file of this version of sessionfs".into());
    }
    // A zstd frame whose descriptor has the checksum bit: any damage to
    // what follows fails the checksum rather than reading as other bytes.
    if frame[..4] != [0x28, 0xb5, 0x2f, 0xfd] || frame[4] & 0b100 == 0 {
        return Err("its frame is not checksummed zstd".into());
    }
    // Bounded: a damaged header claims anything.
    zstd::zstd_safe::get_frame_content_size(frame)
        .ok()
        .flatten()
        .filter(|size| *size <= MAX_PLAINTEXT)
        .ok_or_else(|| "its frame does not say a plausible size".into())
}

/// The envelope at the start of an index file's plaintext, and where the
/// payload after it starts.
fn read_envelope(plain: &mut impl Read) -> Option<(Envelope, usize)> {
    let mut len = [0; 4];
    plain.read_exact(&mut len).ok()?;
    // A store's path and a session's key: far less than this.
    let len = usize::try_from(u32::from_le_bytes(len)).ok()?.min(1 << 16);
    let mut envelope = vec![0; len];
    plain.read_exact(&mut envelope).ok()?;
    Some((serde_json::from_slice(&envelope).ok()?, 4 + len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_takes_one_save_of_any_size_and_then_only_what_fits() {
        let base = std::env::temp_dir().join(format!("sessionfs-queue-{}", std::process::id()));
        let index = PersistentIndex::open(&base, Path::new("/nonexistent-store"), 1 << 30).unwrap();
        let shared = &index.shared;
        assert!(
            shared.admit(QUEUED_BYTES * 2, false),
            "a lone save is taken whatever its size"
        );
        assert!(!shared.admit(1, false), "nothing more fits");
        assert!(
            shared.admit(1, true),
            "the save as the mount ends waits its turn"
        );
        shared.done(1);
        shared.done(QUEUED_BYTES * 2);
        assert!(shared.admit(QUEUED_BYTES / 2, false));
        assert!(shared.admit(QUEUED_BYTES / 2, false));
        assert!(!shared.admit(1, false));
        shared.done(QUEUED_BYTES / 2);
        shared.done(QUEUED_BYTES / 2);
        index.wait_idle();
        drop(index);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn known_headers_are_saved_in_the_order_this_mount_saw_them_and_read_back() {
        let base = std::env::temp_dir().join(format!("sessionfs-seen-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let store = Path::new("/nonexistent-store");
        let stamp = |n: u64| FileStamp {
            dev: 1,
            ino: n,
            size: 10 * n,
            mtime_ns: i128::from(n),
            ctime_ns: i128::from(n),
        };
        let path = |n: u64| PathBuf::from(format!("/s/p/{n}/session.jsonl"));
        let header = |n: u64| SessionHeader::new(&format!("id-{n}"), n as i64);
        let index = PersistentIndex::open(&base, store, 1 << 30).unwrap();
        for n in [3, 1, 4, 0, 2] {
            index.record(&path(n), stamp(n), &header(n));
        }
        index.save_headers();
        drop(index);
        // Read in another order, so the next save follows that one.
        let index = PersistentIndex::open(&base, store, 1 << 30).unwrap();
        let saved_order = |index: &PersistentIndex| {
            let file = index.shared.file_for(HEADERS_KEY);
            let (payload, _) = index.shared.read(&file, HEADERS_KEY).unwrap();
            let mut digests = Vec::new();
            let mut rest = &payload[..];
            while !rest.is_empty() {
                digests.push(u64::from_le_bytes(rest[..8].try_into().unwrap()));
                let len = u32::from_le_bytes(rest[64..68].try_into().unwrap()) as usize;
                rest = &rest[SAVED_HEADER_FIXED + len..];
            }
            digests
        };
        let digests =
            |order: &[u64]| -> Vec<u64> { order.iter().map(|&n| path_digest(&path(n))).collect() };
        assert_eq!(saved_order(&index), digests(&[3, 1, 4, 0, 2]));
        for n in [0, 1, 2, 3] {
            assert_eq!(index.header(&path(n), &stamp(n)), Some(header(n)));
        }
        assert_eq!(index.header(&path(4), &stamp(5)), None, "another stamp");
        // Read from its log again, as a listing does: the table changed, and
        // is saved again.
        index.record(&path(4), stamp(5), &header(4));
        index.listed_all();
        index.save_headers();
        drop(index);
        let index = PersistentIndex::open(&base, store, 1 << 30).unwrap();
        assert_eq!(saved_order(&index), digests(&[0, 1, 2, 3, 4]));
        drop(index);
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// Prose-like bytes: words from a small vocabulary, lines of a few dozen bytes.
    fn prose(len: usize) -> Vec<u8> {
        let words = [
            "the ",
            "tool ",
            "call ",
            "returned ",
            "a ",
            "result\n",
            "model ",
        ];
        let mut out = Vec::new();
        let mut state = 7u64;
        while out.len() < len {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            out.extend_from_slice(words[(state >> 33) as usize % words.len()].as_bytes());
        }
        out.truncate(len);
        out
    }

    #[test]
    fn saves_are_written_fast_then_compacted_to_the_same_bytes_keeping_their_last_use() {
        let base = std::env::temp_dir().join(format!("sessionfs-compact-{}", std::process::id()));
        let index = PersistentIndex::open(&base, Path::new("/nonexistent-store"), 1 << 30).unwrap();
        let key = SessionKey::Row("compacted".into());
        let payload = prose(3 << 20);
        index.save(&key, payload.clone());
        index.wait_idle();
        let path = index.shared.file_for(&key.describe());
        let fast = std::fs::metadata(&path).unwrap();
        let (bytes, settled) = index.shared.read(&path, &key.describe()).unwrap();
        assert!(
            bytes == payload && !settled.0,
            "written fast, read back whole"
        );
        let used = std::fs::metadata(&path).unwrap().modified().unwrap();
        index.wait_compacted();
        let compacted = std::fs::metadata(&path).unwrap();
        assert!(
            compacted.len() < fast.len(),
            "compacted {} bytes, fast {}",
            compacted.len(),
            fast.len()
        );
        assert_eq!(compacted.modified().unwrap(), used, "its last use is kept");
        let (bytes, settled) = index.shared.read(&path, &key.describe()).unwrap();
        assert!(bytes == payload && settled.0, "compacted, read back whole");

        // A small save is written compacted at once.
        let small = SessionKey::Row("small".into());
        index.save(&small, payload[..FAST_FROM - 1].to_vec());
        index.wait_idle();
        let path = index.shared.file_for(&small.describe());
        let (bytes, settled) = index.shared.read(&path, &small.describe()).unwrap();
        assert!(
            bytes == payload[..FAST_FROM - 1] && settled.0,
            "small, compacted at once"
        );

        // The saves as the mount ends are written compacted: nothing would compact them.
        let last = SessionKey::Row("saved as the mount ends".into());
        index.last_saves();
        index.save(&last, payload.clone());
        index.wait_idle();
        let path = index.shared.file_for(&last.describe());
        let (bytes, settled) = index.shared.read(&path, &last.describe()).unwrap();
        assert!(
            bytes == payload && settled.0,
            "saved as the mount ends, compacted"
        );

        // A file a mount left fast is compacted once a later mount reads it.
        let left = SessionKey::Row("left fast".into());
        let envelope = Envelope {
            store: index.shared.store.clone(),
            key: left.describe(),
            settled: false,
        };
        let shared = &index.shared;
        let len = payload.len() as u64;
        shared
            .write(&envelope, len, &mut &payload[..], FAST_LEVEL, None)
            .unwrap();
        assert!(index.load(&left) == Some(payload.clone()));
        index.wait_compacted();
        let path = shared.file_for(&left.describe());
        let (bytes, settled) = shared.read(&path, &left.describe()).unwrap();
        assert!(bytes == payload && settled.0, "compacted after a read");
        drop(index);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_compaction_replaces_neither_a_newer_save_nor_a_damaged_file() {
        let base = std::env::temp_dir().join(format!("sessionfs-race-{}", std::process::id()));
        let index = PersistentIndex::open(&base, Path::new("/nonexistent-store"), 1 << 30).unwrap();
        let shared = &index.shared;
        let key = SessionKey::Row("raced".into());
        let path = shared.file_for(&key.describe());
        let envelope = |settled| Envelope {
            store: shared.store.clone(),
            key: key.describe(),
            settled,
        };
        let (old, new) = (prose(300 << 10), prose(400 << 10));
        let write = |bytes: &[u8], compacted: Option<&Compacted>| {
            let len = bytes.len() as u64;
            shared.write(
                &envelope(compacted.is_some()),
                len,
                &mut &bytes[..],
                FAST_LEVEL,
                compacted,
            )
        };
        write(&old, None).unwrap();
        let read = std::fs::metadata(&path).unwrap();
        let compacted = Compacted {
            ino: read.ino(),
            used: read.modified().unwrap(),
        };
        write(&new, None).unwrap();
        assert!(
            write(&old, Some(&compacted)).is_err(),
            "a newer save was replaced"
        );
        assert!(shared.read(&path, &key.describe()).unwrap().0 == new);

        // Damage inside the frame: the compaction fails and leaves the file be.
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes.len() - 2;
        bytes[at] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        assert!(shared.compact(&key.describe()).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        drop(index);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
