//! The filesystem model without a mount, over `MemoryStore`, as mountpoint-s3's
//! `tests/fs.rs` drives its filesystem over a mock client: listing by cookie,
//! lookups of new sessions, removal, the view cache under a budget, handle
//! snapshots and growth, fork validation, exact sizes, and the scale
//! invariants (what a lookup, a listing batch and a poll ask of the store).
//! Real mounts are kept for what needs the kernel.

#[path = "../common/mod.rs"]
mod common;

mod files;
mod forks;
mod lists;
mod readahead;
mod status;
mod table;
mod views;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use sessionfs::bytes::SEGMENT;
use sessionfs::error::Error;
use sessionfs::fs::inode::ROOT;
use sessionfs::fs::{FsConfig, Kind, SessionFs};
use sessionfs::json::JsonMap;
use sessionfs::model::Scanned;
use sessionfs::model::header::SessionHeader;
use sessionfs::model::{Cause, Refusal};
use sessionfs::store::memory::MemoryStore;
use sessionfs::store::{
    Catalog, EventLoc, EventSink, Listing, Revision, ScanEnd, ScanPoint, SessionKey, Source,
    Watched, Writer,
};

/// Counts what the filesystem asks of the store; `busy` makes the store
/// unreadable for now, as a database locked past its timeout is.
#[derive(Default)]
struct Calls {
    list: AtomicUsize,
    find: AtomicUsize,
    revision: AtomicUsize,
    scan: AtomicUsize,
    fetch: AtomicUsize,
    busy: std::sync::atomic::AtomicBool,
    /// Bumped to replace every stored log by a new artifact (deleted and
    /// written again), which is read afresh rather than continued.
    incarnation: AtomicUsize,
    /// When set, a scan stops after this many events until `release`.
    hold_after: Mutex<Option<usize>>,
    /// When set, a listing stops after this many parts until `release`.
    hold_parts: Mutex<Option<usize>>,
    released: Condvar,
    /// Called with each session the store is asked to write, before it is.
    before_create: Mutex<Option<CreateHook>>,
    /// Makes every write into the store fail, as a full disk would.
    refuse_writes: std::sync::atomic::AtomicBool,
    /// The sessions whose reservation in the store was given back.
    given_back: Mutex<Vec<String>>,
}

type CreateHook = Box<dyn Fn(&SessionHeader) + Send + Sync>;

impl Calls {
    fn hold(&self, after: usize) {
        *self.hold_after.lock().unwrap() = Some(after);
    }

    fn release(&self) {
        *self.hold_after.lock().unwrap() = None;
        *self.hold_parts.lock().unwrap() = None;
        self.released.notify_all();
    }

    fn hold_listing(&self, after_parts: usize) {
        *self.hold_parts.lock().unwrap() = Some(after_parts);
    }

    /// Blocks a listing that handed over `parts` parts while a hold is set there.
    fn wait_if_listing_held(&self, parts: usize) {
        self.wait_while_held(&self.hold_parts, parts);
    }

    /// Blocks a scan that has passed `events` while a hold is set there.
    fn wait_if_held(&self, events: usize) {
        self.wait_while_held(&self.hold_after, events);
    }

    /// Blocks while `hold` is set at `reached` or below, for 10 s at most: a
    /// test that waits on the held work fails instead of hanging.
    fn wait_while_held(&self, hold: &Mutex<Option<usize>>, reached: usize) {
        let hold = hold.lock().unwrap();
        let (mut hold, waited) = self
            .released
            .wait_timeout_while(hold, Duration::from_secs(10), |hold| {
                hold.is_some_and(|after| reached >= after)
            })
            .unwrap();
        if waited.timed_out() {
            *hold = None;
        }
    }
}

impl Calls {
    fn check_busy(&self) -> Result<(), Refusal> {
        match self.busy.load(Ordering::Relaxed) {
            true => Err(Refusal::Unavailable {
                cause: Cause::Busy,
                reason: "the store is busy".into(),
            }),
            false => Ok(()),
        }
    }
}

/// A `MemoryStore` that counts calls, shared with the test. It hands its
/// listing over in parts of `part` sessions, then `extra` as a last part.
struct Counted {
    inner: Arc<MemoryStore>,
    calls: Arc<Calls>,
    part: usize,
    extra: Vec<Listing>,
}

impl Catalog for Counted {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn list(&self) -> Vec<Listing> {
        self.calls.list.fetch_add(1, Ordering::Relaxed);
        let mut all = self.inner.list();
        // A store lists in a stable order; the memory store's map has none.
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }

    fn list_parts(&self, each: &mut dyn FnMut(Vec<Listing>)) -> Result<(), Refusal> {
        let all = self.try_list()?;
        for (k, part) in all.chunks(self.part).enumerate() {
            each(part.to_vec());
            self.calls.wait_if_listing_held(k + 1);
        }
        each(self.extra.clone());
        Ok(())
    }

    fn find(&self, id: &str) -> Vec<Listing> {
        self.calls.find.fetch_add(1, Ordering::Relaxed);
        self.inner.find(id)
    }

    fn contains(&self, id: &str) -> bool {
        self.inner.contains(id)
    }
}

impl Source for Counted {
    fn header(&self, key: &SessionKey) -> Result<SessionHeader, Refusal> {
        self.calls.check_busy()?;
        self.inner.header(key)
    }

    fn revision(&self, key: &SessionKey) -> Result<Revision, Refusal> {
        self.calls.revision.fetch_add(1, Ordering::Relaxed);
        self.calls.check_busy()?;
        let incarnation = self.calls.incarnation.load(Ordering::Relaxed);
        let Revision(inner) = self.inner.revision(key)?;
        Ok(Revision(format!("{incarnation}.{inner}")))
    }

    fn scan(
        &self,
        key: &SessionKey,
        from: &ScanPoint,
        sink: &mut EventSink,
    ) -> Result<(ScanPoint, ScanEnd), Refusal> {
        self.calls.scan.fetch_add(1, Ordering::Relaxed);
        self.calls.check_busy()?;
        let mut seen = 0;
        let calls = self.calls.clone();
        self.inner.scan(key, from, &mut |loc, scanned| {
            seen += 1;
            calls.wait_if_held(seen);
            sink(loc, scanned)
        })
    }

    fn fetch(&self, key: &SessionKey, loc: EventLoc) -> Result<JsonMap, Refusal> {
        self.calls.fetch.fetch_add(1, Ordering::Relaxed);
        self.inner.fetch(key, loc)
    }
}

impl Writer for Counted {
    fn create(&self, header: &SessionHeader, events: &[JsonMap]) -> std::io::Result<SessionKey> {
        if let Some(hook) = &*self.calls.before_create.lock().unwrap() {
            hook(header);
        }
        if self.calls.refuse_writes.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("the store refuses writes"));
        }
        self.inner.create(header, events)
    }

    fn reserve(&self, header: &SessionHeader) -> std::io::Result<()> {
        self.inner.reserve(header)
    }

    fn release(&self, header: &SessionHeader) {
        self.calls
            .given_back
            .lock()
            .unwrap()
            .push(header.id.clone());
        self.inner.release(header)
    }

    fn repair(
        &self,
        key: &SessionKey,
        keep: &ScanPoint,
        expected: &Revision,
        tail: &[JsonMap],
    ) -> std::io::Result<()> {
        self.inner.repair(key, keep, expected, tail)
    }
}

impl Watched for Counted {}

/// The logical events of a fixture session (packed chunk rows expanded).
fn fixture_events(id: &str) -> Vec<JsonMap> {
    let store = sessionfs::store::open(&common::fixtures().join("stores/jsonl")).expect("store");
    let listing = store
        .list()
        .into_iter()
        .find(|l| l.id == id)
        .expect("fixture session");
    let mut events = Vec::new();
    let mut sink = |loc: EventLoc, scanned: Scanned| -> Result<(), Refusal> {
        events.push(loc);
        let _ = scanned;
        Ok(())
    };
    store
        .scan(&listing.key, &ScanPoint::default(), &mut sink)
        .expect("scan");
    events
        .into_iter()
        .map(|loc| store.fetch(&listing.key, loc).expect("fetch"))
        .collect()
}

struct World {
    fs: Arc<SessionFs>,
    store: Arc<MemoryStore>,
    calls: Arc<Calls>,
    events: Vec<JsonMap>,
}

impl World {
    /// `sessions` sessions holding the fixture's first `events` events.
    fn new(sessions: usize, events: usize, config: FsConfig) -> World {
        let store = Arc::new(MemoryStore::default());
        let calls = Arc::new(Calls::default());
        let all = fixture_events("release-notes");
        let events = all[..events.min(all.len())].to_vec();
        for n in 0..sessions {
            store.insert(
                SessionHeader::new(&name(n), 1_772_457_300_000),
                events.clone(),
            );
        }
        let fs = SessionFs::new(
            Box::new(Counted {
                inner: store.clone(),
                calls: calls.clone(),
                part: 7,
                extra: Vec::new(),
            }),
            config,
        );
        World {
            fs,
            store,
            calls,
            events: all,
        }
    }

    fn session(&self, name: &str) -> u64 {
        self.fs.lookup(ROOT, name).expect("session").ino
    }

    fn file(&self, session: &str, file: &str) -> u64 {
        self.fs
            .lookup(self.session(session), file)
            .expect("file")
            .ino
    }

    /// Stores session `id` as the fixture's first `events` events (all of
    /// them for `usize::MAX`), replacing what was stored.
    fn put(&self, id: &str, events: usize) {
        let events = &self.events[..events.min(self.events.len())];
        self.store
            .insert(SessionHeader::new(id, 1_772_457_300_000), events.to_vec());
    }

    fn read_all(&self, ino: u64) -> Vec<u8> {
        let (fh, _) = self.fs.open(ino, false).expect("open");
        let bytes = read_handle(&self.fs, fh);
        self.fs.release(fh);
        bytes
    }
}

fn read_handle(fs: &SessionFs, fh: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let chunk = fs.read(fh, out.len() as u64, 4096).expect("read");
        if chunk.as_slice().is_empty() {
            return out;
        }
        out.extend_from_slice(chunk.as_slice());
    }
}

/// The root's own entries: `flush` before the sessions, the lists after them.
const ROOT_OWN: [&str; 5] = ["flush", "sessions.jsonl", "latest", "by-project", "by-date"];

/// The sessions the root lists, in listing order.
fn sessions_listed(fs: &SessionFs, batch: usize) -> Vec<String> {
    let names = list(fs, ROOT, batch);
    let lists = names.len() - (ROOT_OWN.len() - 1);
    assert_eq!(names[0], ROOT_OWN[0]);
    assert_eq!(names[lists..], ROOT_OWN[1..]);
    names[1..lists].to_vec()
}

fn name(n: usize) -> String {
    format!("s{n:06}")
}

/// Sessions are built ahead of a reader on threads of their own: tests that
/// count what is read or loaded keep that off, and `readahead`'s tests turn it on.
fn config() -> FsConfig {
    FsConfig {
        grace: Duration::from_secs(3600),
        relist: Duration::ZERO,
        recheck: Duration::ZERO,
        readahead: false,
        ..FsConfig::default()
    }
}

/// Lists a directory in batches of `batch`, following each entry's cookie.
fn list(fs: &SessionFs, ino: u64, batch: usize) -> Vec<String> {
    let mut names = Vec::new();
    let mut offset = 0;
    loop {
        let entries = fs.readdir(ino, offset, batch).expect("readdir");
        let Some(last) = entries.last() else {
            return names;
        };
        assert!(entries.len() <= batch);
        offset = last.next;
        names.extend(entries.into_iter().map(|e| e.name));
    }
}

/// A turn whose user message is about `len` bytes of text naming its place, so
/// a byte served from the wrong offset shows.
fn long_turn(turn: u64, seq: u64, len: usize) -> Vec<JsonMap> {
    let mut text = String::new();
    for line in 0.. {
        if text.len() >= len {
            break;
        }
        text.push_str(&format!("turn {turn} line {line}\n"));
    }
    [
        serde_json::json!({"type": "turn/start", "seq": seq, "time": 1, "data": {"turn": turn}}),
        serde_json::json!({"type": "step/start", "seq": seq + 1, "time": 2, "data": {"turn": turn, "step": 1}}),
        serde_json::json!({"type": "user/message", "seq": seq + 2, "time": 3, "data": {"content": [{"type": "text", "text": text}], "source": {"kind": "user"}, "role": "user", "id": format!("u{seq}")}, "surfaceOp": "append"}),
        serde_json::json!({"type": "step/end", "seq": seq + 3, "time": 4, "data": {"turn": turn, "step": 1}}),
        serde_json::json!({"type": "turn/end", "seq": seq + 4, "time": 5, "data": {"turn": turn, "reason": {"kind": "completed"}}}),
    ]
    .into_iter()
    .map(|v| v.as_object().cloned().expect("object"))
    .collect()
}

/// Reads on from the end of `out` in reads of `size` to the end of the file.
fn read_on(fs: &SessionFs, fh: u64, out: &mut Vec<u8>, size: u32) {
    loop {
        let chunk = fs.read(fh, out.len() as u64, size).expect("read");
        out.extend_from_slice(chunk.as_slice());
        if chunk.as_slice().len() < size as usize {
            // The kernel takes a short read for the end of the file.
            let next = fs.read(fh, out.len() as u64, size).expect("read");
            assert!(next.as_slice().is_empty(), "short read at {}", out.len());
            return;
        }
    }
}

/// A log of `turns` short turns, five events each.
fn turns(turns: u64) -> Vec<JsonMap> {
    (0..turns)
        .flat_map(|t| long_turn(t + 1, t * 5, 1))
        .collect()
}

/// The seq of the first event of a type.
fn first_of(events: &[JsonMap], event_type: &str) -> usize {
    events
        .iter()
        .position(|e| e.get("type").and_then(|t| t.as_str()) == Some(event_type))
        .expect("event type in the fixture")
}
