//! The filesystem model without a mount, over `MemoryStore`, as mountpoint-s3's
//! `tests/fs.rs` drives its filesystem over a mock client: listing by cookie,
//! lookups of new sessions, removal, the view cache under a budget, handle
//! snapshots and growth, fork validation, exact sizes, and the scale
//! invariants (what a lookup, a listing batch and a poll ask of the store).
//! Real mounts are kept for what needs the kernel.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use sessionfs::bytes::SEGMENT;
use sessionfs::error::Error;
use sessionfs::fs::inode::ROOT;
use sessionfs::fs::{FsConfig, Kind, SessionFs};
use sessionfs::json::JsonMap;
use sessionfs::model::header::SessionHeader;
use sessionfs::model::quick::Scanned;
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
    released: Condvar,
}

impl Calls {
    fn hold(&self, after: usize) {
        *self.hold_after.lock().unwrap() = Some(after);
    }

    fn release(&self) {
        *self.hold_after.lock().unwrap() = None;
        self.released.notify_all();
    }

    /// Blocks a scan that has passed `events` while a hold is set there, for
    /// 10 s at most: a test that waits on the scan fails instead of hanging.
    fn wait_if_held(&self, events: usize) {
        let hold = self.hold_after.lock().unwrap();
        let (mut hold, waited) = self
            .released
            .wait_timeout_while(hold, Duration::from_secs(10), |hold| {
                hold.is_some_and(|after| events >= after)
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
        for part in all.chunks(self.part) {
            each(part.to_vec());
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
        self.inner.create(header, events)
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

fn name(n: usize) -> String {
    format!("s{n:06}")
}

fn config() -> FsConfig {
    FsConfig {
        grace: Duration::from_secs(3600),
        relist: Duration::ZERO,
        recheck: Duration::ZERO,
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

#[test]
fn the_root_lists_every_session_once_by_cookie_and_new_ones_at_the_end() {
    let world = World::new(50, 42, config());
    let first = world.fs.readdir(ROOT, 0, 7).expect("readdir");
    assert_eq!(first[0].name, "flush");
    // A session created mid-listing does not move the entries already listed.
    world.store.insert(
        SessionHeader::new("a-new-one", 1_772_457_300_000),
        world.events.clone(),
    );
    let mut names: Vec<String> = first.iter().map(|e| e.name.clone()).collect();
    let mut offset = first.last().expect("entries").next;
    loop {
        let entries = world.fs.readdir(ROOT, offset, 7).expect("readdir");
        let Some(last) = entries.last() else { break };
        offset = last.next;
        names.extend(entries.into_iter().map(|e| e.name));
    }
    let expected: Vec<String> = std::iter::once("flush".to_string())
        .chain((0..50).map(name))
        .collect();
    assert_eq!(names, expected);
    // A listing from the start shows it.
    let again = list(&world.fs, ROOT, 11);
    assert_eq!(again.len(), 52);
    assert!(again.contains(&"a-new-one".to_string()));
}

#[test]
fn an_id_stored_twice_is_refused_even_when_the_listing_comes_in_parts() {
    let store = Arc::new(MemoryStore::default());
    let events = fixture_events("release-notes");
    for n in 0..20 {
        store.insert(SessionHeader::new(&name(n), 1), events.clone());
    }
    let copy = Listing::of(
        SessionHeader::new(&name(3), 1),
        SessionKey::Row("a second copy".into()),
    );
    let fs = SessionFs::new(
        Box::new(Counted {
            inner: store,
            calls: Arc::default(),
            part: 4,
            extra: vec![copy],
        }),
        config(),
    );
    let names = list(&fs, ROOT, 100);
    assert_eq!(names.len(), 21, "{names:?}");
    let dir = fs.lookup(ROOT, &name(3)).expect("shown").ino;
    let error = fs.lookup(dir, "error").expect("an error file");
    let (fh, _) = fs.open(error.ino, false).expect("open");
    let text = String::from_utf8(read_handle(&fs, fh)).expect("text");
    assert!(text.contains("appears in 2 artifacts"), "{text}");
    assert!(fs.lookup(dir, "transcript.md").is_err());
    let other = fs.lookup(ROOT, &name(4)).expect("shown").ino;
    assert!(fs.lookup(other, "transcript.md").is_ok(), "the others read");
}

#[test]
fn a_new_session_is_found_by_the_first_lookup_without_listing_the_store() {
    let world = World::new(20, 42, config());
    list(&world.fs, ROOT, 100);
    let listed = world.calls.list.load(Ordering::Relaxed);
    for n in 0..20 {
        world.store.insert(
            SessionHeader::new(&format!("late-{n}"), 1_772_457_300_000),
            world.events.clone(),
        );
    }
    for n in 0..20 {
        let attr = world
            .fs
            .lookup(ROOT, &format!("late-{n}"))
            .expect("found at once");
        assert_eq!(attr.kind, Kind::Dir);
    }
    assert_eq!(world.calls.list.load(Ordering::Relaxed), listed);
    assert_eq!(world.calls.find.load(Ordering::Relaxed), 20);
    // Known names ask the store nothing; unknown ones one look each.
    for n in 0..20 {
        world.fs.lookup(ROOT, &name(n)).expect("known");
    }
    assert_eq!(world.calls.find.load(Ordering::Relaxed), 20);
    assert!(matches!(
        world.fs.lookup(ROOT, "nobody"),
        Err(Error::NotFound(_))
    ));
    assert_eq!(world.calls.find.load(Ordering::Relaxed), 21);
    assert_eq!(world.calls.list.load(Ordering::Relaxed), listed);
}

#[test]
fn a_removed_session_leaves_the_listing_but_open_files_keep_their_snapshot() {
    let world = World::new(3, usize::MAX, config());
    list(&world.fs, ROOT, 100);
    let transcript = world.file(&name(1), "transcript.md");
    let (fh, _) = world.fs.open(transcript, false).expect("open");
    let before = world.read_all(transcript);
    world.store.remove(&name(1));
    let names = list(&world.fs, ROOT, 100);
    assert_eq!(names, vec!["flush".to_string(), name(0), name(2)]);
    assert_eq!(world.fs.take_removed(), vec![name(1)], "the kernel is told");
    assert!(world.fs.take_removed().is_empty());
    assert!(world.fs.lookup(ROOT, &name(1)).is_err());
    assert_eq!(read_handle(&world.fs, fh), before);
    world.fs.release(fh);
    // Created again, with other content, it shows the new content.
    world.store.insert(
        SessionHeader::new(&name(1), 1_772_457_300_000),
        world.events[..20].to_vec(),
    );
    let names = list(&world.fs, ROOT, 100);
    assert!(names.contains(&name(1)));
    let after = world.read_all(world.file(&name(1), "transcript.md"));
    assert_ne!(after, before);
}

#[test]
fn views_beyond_the_budget_are_dropped_least_recently_used_first() {
    let config = FsConfig {
        cache_bytes: 1,
        ..config()
    };
    let world = World::new(30, usize::MAX, config);
    let mut first = Vec::new();
    for n in 0..30 {
        let bytes = world.read_all(world.file(&name(n), "surface.jsonl"));
        if n == 0 {
            first = bytes;
        }
        let (views, _) = world.fs.cache_usage();
        assert!(views <= 1, "{views} views loaded under a 1-byte budget");
    }
    let scans = world.calls.scan.load(Ordering::Relaxed);
    assert_eq!(
        world.read_all(world.file(&name(0), "surface.jsonl")),
        first,
        "an evicted session is read again, to the same bytes"
    );
    assert!(world.calls.scan.load(Ordering::Relaxed) > scans);

    // With room for all, each session is built once however often it is read.
    let world = World::new(30, usize::MAX, self::config());
    for _ in 0..3 {
        for n in 0..30 {
            world.read_all(world.file(&name(n), "transcript.md"));
        }
    }
    assert_eq!(world.calls.scan.load(Ordering::Relaxed), 30);
    let (views, bytes) = world.fs.cache_usage();
    assert_eq!(views, 30);
    assert!(bytes > 0);
}

#[test]
fn a_handle_follows_growth_and_keeps_its_snapshot_when_rewritten() {
    let world = World::new(0, 0, config());
    let events = &world.events;
    // Cut inside a tool call, before its result.
    let cut = first_of(events, "tool/call") + 1;
    world.store.insert(
        SessionHeader::new("grow", 1_772_457_300_000),
        events[..cut].to_vec(),
    );
    let transcript = world.file("grow", "transcript.md");
    let (fh, _) = world.fs.open(transcript, false).expect("open");
    let start = read_handle(&world.fs, fh);
    world.store.insert(
        SessionHeader::new("grow", 1_772_457_300_000),
        events.clone(),
    );
    let grown = read_handle(&world.fs, fh);
    assert!(grown.len() > start.len(), "the descriptor reads on");
    assert!(grown.starts_with(&start));
    let attr = world.fs.getattr_open(transcript, fh).expect("fstat");
    assert_eq!(attr.size, grown.len() as u64);
    world.fs.release(fh);
    assert_eq!(world.read_all(transcript), grown);
    assert_eq!(world.fs.open_handles(), 0);
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

#[test]
fn a_transcript_grown_over_many_segments_is_followed_and_spilled_whole() {
    let world = World::new(
        0,
        0,
        FsConfig {
            cache_bytes: 1,
            ..config()
        },
    );
    let spills = world.fs.spill_receiver();
    let header = SessionHeader::new("big", 1_772_457_300_000);
    let mut events = long_turn(1, 0, 700 << 10);
    world.store.insert(header.clone(), events.clone());
    let transcript = world.file("big", "transcript.md");
    let (fh, _) = world.fs.open(transcript, false).expect("open");
    // Reads of a size no segment divides, so some span two segments.
    let mut held = Vec::new();
    read_on(&world.fs, fh, &mut held, 100_000);
    for turn in 2..=8 {
        events.extend(long_turn(turn, events.len() as u64, 700 << 10));
        world.store.insert(header.clone(), events.clone());
        let before = held.len();
        read_on(&world.fs, fh, &mut held, 100_000);
        assert!(held.len() > before, "turn {turn}: the descriptor reads on");
        let attr = world.fs.getattr_open(transcript, fh).expect("fstat");
        assert_eq!(attr.size, held.len() as u64, "turn {turn}");
    }
    assert!(held.len() > 4 * SEGMENT, "{} bytes", held.len());
    world.fs.release(fh);
    let (fh, _) = world.fs.open(transcript, false).expect("open again");
    let mut again = Vec::new();
    read_on(&world.fs, fh, &mut again, 100_000);
    world.fs.release(fh);
    assert!(again == held, "read again from the start");
    let text = String::from_utf8(held.clone()).expect("utf8");
    let lines = text
        .lines()
        .filter(|l| l.starts_with("turn 8 line "))
        .count();
    assert!(lines > 10_000, "{lines} lines of the last turn");

    // Dropped, it goes to the kernel's page cache whole, segment by segment.
    world.store.insert(
        SessionHeader::new("other", 1_772_457_300_000),
        long_turn(1, 0, 10),
    );
    world.file("other", "transcript.md");
    let spill = spills.try_recv().expect("the dropped view's transcript");
    assert_eq!(spill.ino, transcript);
    let sizes: Vec<usize> = spill.bytes.pieces().map(<[u8]>::len).collect();
    assert!(sizes.len() > 3, "{sizes:?}");
    assert_eq!(spill.bytes.to_vec(), held);
}

#[test]
fn a_rewritten_file_keeps_the_snapshot_its_descriptor_opened() {
    // No grace: a log that ends inside a tool call is shown closed at once, with
    // a synthetic result in surface.jsonl that gives way when the log goes on.
    let world = World::new(
        0,
        0,
        FsConfig {
            grace: Duration::ZERO,
            ..config()
        },
    );
    let events = &world.events;
    let cut = first_of(events, "tool/call") + 1;
    world.store.insert(
        SessionHeader::new("quiet", 1_772_457_300_000),
        events[..cut].to_vec(),
    );
    let surface = world.file("quiet", "surface.jsonl");
    let (fh, _) = world.fs.open(surface, false).expect("open");
    let held = read_handle(&world.fs, fh);
    assert!(
        String::from_utf8_lossy(&held).contains("tool"),
        "the synthetic result is shown"
    );
    world.store.insert(
        SessionHeader::new("quiet", 1_772_457_300_000),
        events.clone(),
    );
    let now = world.read_all(surface);
    assert!(!now.starts_with(&held), "the surface was rewritten");
    assert_eq!(
        read_handle(&world.fs, fh),
        held,
        "the descriptor keeps its snapshot"
    );
    world.fs.release(fh);
}

#[test]
fn a_dropped_views_transcript_is_sized_and_opened_without_reading_the_log_again() {
    let world = World::new(
        2,
        30,
        FsConfig {
            cache_bytes: 1,
            ..config()
        },
    );
    assert!(world.events.len() > 30);
    let spills = world.fs.spill_receiver();
    let first = world.file(&name(0), "transcript.md");
    let size = world.fs.getattr(first).expect("stat").size;
    world.file(&name(1), "transcript.md");
    let spill = spills.try_recv().expect("the dropped view's transcript");
    assert_eq!(spill.ino, first);
    assert_eq!(spill.bytes.len() as u64, size);
    let scans = world.calls.scan.load(Ordering::Relaxed);
    assert_eq!(scans, 2);

    // A glob stats it again and grep opens it: the kernel holds its pages.
    assert_eq!(world.file(&name(0), "transcript.md"), first);
    assert_eq!(world.fs.getattr(first).expect("stat").size, size);
    let (fh, _) = world.fs.open(first, false).expect("open");
    assert_eq!(world.fs.getattr_open(first, fh).expect("fstat").size, size);
    assert_eq!(world.calls.scan.load(Ordering::Relaxed), scans);

    // A read the kernel cannot answer reads the session again, to the same bytes.
    assert_eq!(read_handle(&world.fs, fh), spill.bytes.to_vec());
    assert_eq!(world.calls.scan.load(Ordering::Relaxed), scans + 1);

    // Dropped again while the descriptor holds its bytes: the kernel's check
    // before each read (`fstat` through the descriptor) reads nothing again.
    world.read_all(world.file(&name(1), "surface.jsonl"));
    assert_eq!(
        world.fs.cache_usage().0,
        1,
        "only the other session is loaded"
    );
    let scans = world.calls.scan.load(Ordering::Relaxed);
    assert_eq!(world.fs.getattr_open(first, fh).expect("fstat").size, size);
    assert_eq!(world.calls.scan.load(Ordering::Relaxed), scans);
    world.fs.release(fh);

    // A log changed since is read again before its size is given.
    world.store.insert(
        SessionHeader::new(&name(0), 1_772_457_300_000),
        world.events.clone(),
    );
    let before = world.calls.scan.load(Ordering::Relaxed);
    let grown_size = world.fs.getattr(first).expect("stat").size;
    assert!(grown_size > size, "{grown_size} > {size}");
    assert_eq!(world.calls.scan.load(Ordering::Relaxed), before + 1);
}

#[test]
fn a_rewritten_transcript_is_a_new_inode_and_the_old_one_keeps_its_descriptors() {
    let world = World::new(1, usize::MAX, config());
    let old = world.file(&name(0), "transcript.md");
    let (fh, _) = world.fs.open(old, false).expect("open");
    let held = read_handle(&world.fs, fh);

    // The log is replaced by one whose transcript does not extend the old one.
    let mut events = world.events.clone();
    let user = first_of(&events, "user/message");
    events[user]["data"]["content"][0]["text"] = serde_json::json!("a different question");
    world
        .store
        .insert(SessionHeader::new(&name(0), 1_772_457_300_000), events);
    world.calls.incarnation.fetch_add(1, Ordering::Relaxed);

    let new = world.file(&name(0), "transcript.md");
    assert_ne!(new, old, "a rewritten transcript is a new inode");
    let now = world.read_all(new);
    assert!(String::from_utf8_lossy(&now).contains("a different question"));
    // `fstat` comes with or without the descriptor: both give its snapshot.
    assert_eq!(world.fs.getattr(old).expect("stat").size, held.len() as u64);
    assert_eq!(
        world.fs.getattr_open(old, fh).expect("fstat").size,
        held.len() as u64
    );
    assert_eq!(
        read_handle(&world.fs, fh),
        held,
        "the descriptor keeps its bytes"
    );
    world.fs.release(fh);
    let error = world.fs.getattr(old).expect_err("the old lineage is gone");
    assert_eq!(error.errno(), libc::ESTALE, "{error}");
}

/// A log of `turns` short turns, five events each.
fn turns(turns: u64) -> Vec<JsonMap> {
    (0..turns)
        .flat_map(|t| long_turn(t + 1, t * 5, 1))
        .collect()
}

#[test]
fn events_are_listed_while_the_session_is_still_being_read() {
    let world = World::new(0, 0, config());
    world
        .store
        .insert(SessionHeader::new("huge", 1_772_457_300_000), turns(4_000));
    let session = world.session("huge");
    // The scan stops past its first published batch until released.
    world.calls.hold(10_000);
    let events = world
        .fs
        .lookup(session, "events")
        .expect("events/ before the scan ends");
    let first = world.fs.readdir(events.ino, 0, 100).expect("first batch");
    assert_eq!(first.len(), 100);
    assert_eq!(first[0].name, "00000000-turn.start.json");
    let plus = world.fs.entry_plus(first[1].clone());
    assert!(!plus.cacheable, "an event's size waits for the scan");
    assert_eq!(
        world.fs.cache_usage().0,
        0,
        "the session is still being read"
    );
    world.calls.release();

    let streamed: Vec<String> = first.into_iter().map(|e| e.name).collect();
    let all = list(&world.fs, events.ino, 100);
    assert_eq!(all.len(), 20_000);
    assert_eq!(
        all[..100],
        streamed[..],
        "the built view lists the same names"
    );
    assert_eq!(world.calls.scan.load(Ordering::Relaxed), 1, "read once");
    assert!(
        world
            .fs
            .entry_plus(world.fs.readdir(events.ino, 5, 1).unwrap()[0].clone())
            .cacheable
    );
}

/// The seq of the first event of a type.
fn first_of(events: &[JsonMap], event_type: &str) -> usize {
    events
        .iter()
        .position(|e| e.get("type").and_then(|t| t.as_str()) == Some(event_type))
        .expect("event type in the fixture")
}

#[test]
fn every_file_stats_at_the_size_a_read_returns_control_files_included() {
    let world = World::new(2, usize::MAX, config());
    let fork = world.file(&name(0), "fork");
    let boundary = first_of(&world.events, "turn/end");
    world
        .fs
        .write(fork, format!("{boundary}\n").as_bytes())
        .expect("fork");
    let mut stack = vec![ROOT];
    let mut files = 0;
    while let Some(dir) = stack.pop() {
        for entry in list(&world.fs, dir, 64) {
            let attr = world.fs.lookup(dir, &entry).expect("lookup");
            match attr.kind {
                Kind::Dir => stack.push(attr.ino),
                Kind::Symlink => {
                    let target = world.fs.readlink(attr.ino).expect("readlink");
                    assert_eq!(attr.size, target.len() as u64, "{entry}");
                }
                Kind::File => {
                    files += 1;
                    let bytes = world.read_all(attr.ino);
                    assert_eq!(attr.size, bytes.len() as u64, "{entry}");
                    assert!(!bytes.is_empty(), "{entry} is empty");
                }
            }
        }
    }
    assert!(files > 100, "{files} files");
}

/// `ls -l events/` of a huge session must not render a million events: each
/// event's size is kept from the scan, so listing with attributes
/// (`readdirplus`) and `stat` fetch nothing, and a read returns that many bytes.
#[test]
fn listing_and_stating_events_fetch_nothing_from_the_store() {
    let world = World::new(1, usize::MAX, config());
    let events = world
        .fs
        .lookup(world.session(&name(0)), "events")
        .expect("events");
    let fetched = || world.calls.fetch.load(Ordering::Relaxed);
    let before = fetched();
    let mut sizes = Vec::new();
    let mut offset = 0;
    loop {
        let entries = world.fs.readdir(events.ino, offset, 64).expect("readdir");
        let Some(last) = entries.last() else { break };
        offset = last.next;
        for entry in entries {
            let ino = entry.ino;
            let plus = world.fs.entry_plus(entry);
            assert!(plus.cacheable, "{}", plus.entry.name);
            let attr = world.fs.getattr(ino).expect("getattr");
            assert_eq!(attr.size, plus.attr.size, "{}", plus.entry.name);
            sizes.push((plus.entry.name, ino, attr.size));
        }
    }
    assert_eq!(sizes.len(), world.events.len());
    assert_eq!(fetched(), before, "listing or stating events fetched them");
    for (name, ino, size) in sizes {
        assert_eq!(world.read_all(ino).len() as u64, size, "{name}");
    }
    assert!(fetched() > before, "reads fetch the events");
}

#[test]
fn forks_are_validated_and_children_appear_at_once() {
    let world = World::new(1, usize::MAX, config());
    let fork = world.file(&name(0), "fork");
    for bad in [&b"999999\n"[..], b"x\n", b"-1\n", b""] {
        assert!(
            matches!(world.fs.write(fork, bad), Err(Error::Invalid(_))),
            "{bad:?}"
        );
    }
    let boundary = first_of(&world.events, "turn/end");
    let command = format!("{boundary} kid\n");
    assert!(
        matches!(world.fs.write(fork, b"3 kid\n"), Err(Error::Invalid(_))),
        "inside an open turn"
    );
    world.fs.write(fork, command.as_bytes()).expect("fork");
    assert!(matches!(
        world.fs.write(fork, command.as_bytes()),
        Err(Error::Exists(_))
    ));
    let status = String::from_utf8(world.read_all(fork)).expect("text");
    assert!(status.contains("-> kid"), "{status}");
    assert!(status.contains("already exists"), "{status}");
    let kid = world.session("kid");
    let children = world
        .fs
        .lookup(world.session(&name(0)), "children")
        .expect("children");
    assert_eq!(list(&world.fs, children.ino, 10), vec!["kid".to_string()]);
    let parent = world.fs.lookup(kid, "parent").expect("parent link");
    assert_eq!(
        world.fs.readlink(parent.ino).expect("target"),
        format!("../{}", name(0))
    );
    let events = world.fs.lookup(kid, "events").expect("events");
    // The seed, then the `session/end-seed` marker.
    assert_eq!(list(&world.fs, events.ino, 100).len(), boundary + 2);
    world
        .fs
        .write(world.file("kid", "flush"), b"\n")
        .expect("flush");
    assert!(world.store.contains("kid"), "durable in the store");
    // The seed, then the `session/end-seed` marker.
    assert_eq!(list(&world.fs, events.ino, 100).len(), boundary + 2);
}

#[test]
fn no_operation_walks_the_store() {
    let world = World::new(5000, 42, config());
    let names = list(&world.fs, ROOT, 500);
    assert_eq!(names.len(), 5001);
    assert_eq!(world.calls.list.load(Ordering::Relaxed), 1, "one listing");
    // Using sessions asks the store about those sessions only.
    for n in 0..40 {
        world.read_all(world.file(&name(n), "index.jsonl"));
    }
    // A memory store has no directory to watch, so it is followed by polling:
    // one round checks the loaded sessions, not the store.
    let before = world.calls.revision.load(Ordering::Relaxed);
    world.fs.follow_changes();
    let polled = world.calls.revision.load(Ordering::Relaxed) - before;
    assert_eq!(polled, 40, "a poll checks the loaded sessions only");
    // A batch of a listing costs its entries.
    let batch = world.fs.readdir(ROOT, 4000, 10).expect("batch");
    assert_eq!(
        batch.iter().map(|e| e.name.clone()).collect::<Vec<_>>(),
        (3999..4009).map(name).collect::<Vec<_>>()
    );
    assert_eq!(world.calls.list.load(Ordering::Relaxed), 1);
    let unique: BTreeSet<_> = names.iter().collect();
    assert_eq!(unique.len(), names.len());
}

#[test]
fn a_store_that_cannot_be_read_now_is_no_damage_and_is_read_again() {
    let world = World::new(2, usize::MAX, config());
    list(&world.fs, ROOT, 100);
    let shown = world.read_all(world.file(&name(0), "transcript.md"));
    world.calls.busy.store(true, Ordering::Relaxed);
    // A view already shown stays as it is.
    assert_eq!(world.read_all(world.file(&name(0), "transcript.md")), shown);
    // One never read says why, with the store's errno and no advice to restore.
    let session = world.session(&name(1));
    assert!(world.fs.lookup(session, "transcript.md").is_err());
    let error = String::from_utf8(world.read_all(world.file(&name(1), "error"))).expect("utf8");
    assert!(error.contains("the store is busy"), "{error}");
    assert!(
        !error.contains("restore") && !error.contains("damaged"),
        "{error}"
    );
    // The store could not be listed: nothing is taken for removed.
    assert_eq!(list(&world.fs, ROOT, 100).len(), 3);
    world.calls.busy.store(false, Ordering::Relaxed);
    // The next access reads it.
    assert!(world.fs.lookup(session, "error").is_err());
    let read = world.read_all(world.file(&name(1), "transcript.md"));
    assert_eq!(
        read.len(),
        shown.len(),
        "the same events as the other session"
    );
}
