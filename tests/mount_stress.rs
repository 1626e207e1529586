//! Issue #8, load: sixteen readers `stat`, `read` and `readdir` a mounted
//! zstd store for a bounded time while a writer appends turns to several
//! sessions (one zstd frame per batch, as the Harness writes) and a forker makes
//! children through `fork` files. Every read is checked against what the same
//! open file descriptor reported, every event file against its name, and the
//! sessionfs process's memory is watched.
//!
//! What "consistent" means here follows `SessionFs::read` (src/fs/mod.rs): an
//! open file serves the snapshot taken at `open`, and a file that only grew may
//! be read further through the same handle (a prefix extension, for `tail -f`).
//! So for one file descriptor:
//! * event files and `header.json` never change under a handle: a whole read
//!   has exactly the size `fstat` gave right after `open`, and parses;
//! * `transcript.md`, `surface.jsonl` and `index.jsonl` only grow in this test
//!   (no compaction, no crash closers: the grace period outlasts the run), so a
//!   whole read is at least as long as `fstat` at open, a second read through
//!   the same descriptor is the same bytes or a longer prefix extension, and
//!   every read is a prefix of the file's final content once the writer stopped;
//! * JSONL files hold whole JSON lines only.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use common::{Mount, read_json, session_dir, store_copy};
use serde_json::{Value, json};

const READERS: usize = 16;
const RUN: Duration = Duration::from_secs(10);
const RSS_LIMIT_KIB: u64 = 300 << 10;

/// Sessions the writer appends to (all end with a closed turn in the fixture).
const WRITTEN: [&str; 5] = [
    "ledger-chat",
    "release-notes",
    "gateway-resume",
    "turn-outcomes",
    "orbit-debug-tools",
];
/// Sessions the forker forks from, at their last fixture turn end.
const FORKED: [&str; 3] = ["release-notes", "ledger-chat", "schema-truncation"];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn digest(bytes: &[u8]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
enum Op {
    Stat,
    Read,
    Readdir,
}

/// What the readers share.
struct Shared {
    mount: PathBuf,
    stop: AtomicBool,
    /// Session directory names in the mount root, refreshed by root listings.
    names: RwLock<Arc<Vec<String>>>,
    /// Event file names per session, refreshed by `events/` listings.
    events: Mutex<HashMap<String, Arc<Vec<String>>>>,
    /// Every failure by category: a count and the first few examples.
    failures: Mutex<BTreeMap<&'static str, (u64, Vec<String>)>>,
    errnos: Mutex<BTreeMap<i32, u64>>,
    /// Reads of growing files: (path, length, digest), checked against the final content.
    grown: Mutex<Vec<(PathBuf, usize, u64)>>,
    /// `header.json` reads whose length differs from `fstat` on the same descriptor.
    header_size_mismatch: AtomicU64,
    reads_beyond_open_size: AtomicU64,
}

impl Shared {
    fn fail(&self, category: &'static str, what: String) {
        let mut failures = self.failures.lock().unwrap();
        let entry = failures.entry(category).or_default();
        entry.0 += 1;
        if entry.1.len() < 3 {
            entry.1.push(what);
        }
    }

    fn errno(&self, path: &Path, op: &str, e: &std::io::Error) {
        *self
            .errnos
            .lock()
            .unwrap()
            .entry(e.raw_os_error().unwrap_or(-1))
            .or_default() += 1;
        self.fail("errno", format!("{op} {}: {e}", path.display()));
    }
}

fn is_growing(name: &str) -> bool {
    matches!(name, "transcript.md" | "surface.jsonl" | "index.jsonl")
}

/// One whole read through one descriptor, checked as the module doc says.
fn checked_read(shared: &Shared, session: &str, path: &Path) {
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => return shared.errno(path, "open", &e),
    };
    let at_open = match file.metadata() {
        Ok(m) => m.len(),
        Err(e) => return shared.errno(path, "fstat", &e),
    };
    let mut bytes = Vec::new();
    if let Err(e) = file.read_to_end(&mut bytes) {
        return shared.errno(path, "read", &e);
    }
    let mut again = Vec::new();
    if let Err(e) = file
        .seek(SeekFrom::Start(0))
        .and_then(|_| file.read_to_end(&mut again))
    {
        return shared.errno(path, "re-read", &e);
    }
    let len = bytes.len() as u64;
    let is_event = path
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|p| p == "events");
    if is_event {
        if len != at_open {
            shared.fail(
                "event: size differs from fstat",
                format!(
                    "{}: read {len} bytes, fstat on the same descriptor said {at_open}",
                    path.display()
                ),
            );
        }
        if again != bytes {
            shared.fail(
                "event: changed under one descriptor",
                format!(
                    "{}: an event file changed under one descriptor",
                    path.display()
                ),
            );
        }
        let seq = file_name
            .split('-')
            .next()
            .and_then(|d| d.parse::<u64>().ok());
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(event) if event["seq"].as_u64() == seq && seq.is_some() => {}
            Ok(event) => shared.fail(
                "event: seq differs from name",
                format!(
                    "{}: seq {} does not match the name",
                    path.display(),
                    event["seq"]
                ),
            ),
            Err(e) => shared.fail(
                "event: not JSON",
                format!(
                    "{}: not JSON ({e}); {len} bytes, fstat said {at_open}",
                    path.display()
                ),
            ),
        }
    } else if file_name == "header.json" {
        // Linux sends no file handle with fstat's GETATTR, so when the header is
        // rewritten between open and fstat, fstat shows the new size while the
        // descriptor keeps reading the whole snapshot it opened (checked below).
        if len != at_open {
            shared.header_size_mismatch.fetch_add(1, Ordering::Relaxed);
        }
        if again != bytes {
            shared.fail(
                "header.json: changed under one descriptor",
                format!(
                    "{}: header.json changed under one descriptor",
                    path.display()
                ),
            );
        }
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(header) => {
                let expected = sessionfs::model::ids::decode_segment(session);
                if header["id"].as_str() != expected.as_deref() {
                    shared.fail(
                        "header.json: wrong id",
                        format!(
                            "{}: id {} is not {expected:?}",
                            path.display(),
                            header["id"]
                        ),
                    );
                }
            }
            Err(e) => shared.fail(
                "header.json: not JSON",
                format!(
                    "{}: not JSON ({e}); {len} bytes, fstat said {at_open}",
                    path.display()
                ),
            ),
        }
    } else if is_growing(&file_name) {
        if len < at_open {
            shared.fail("growing: shorter than fstat at open", format!("{}: read {len} bytes, fewer than fstat said at open ({at_open}); fstat after the read: {}", path.display(), file.metadata().map(|m| m.len()).unwrap_or(0)));
        }
        if len > at_open {
            shared
                .reads_beyond_open_size
                .fetch_add(1, Ordering::Relaxed);
        }
        if !again.starts_with(&bytes) {
            shared.fail("growing: re-read is not an extension", format!("{}: a second read through the same descriptor is not an extension of the first", path.display()));
        }
        if file_name.ends_with(".jsonl") {
            if !bytes.is_empty() && !bytes.ends_with(b"\n") {
                shared.fail(
                    "growing: JSONL ends inside a line",
                    format!(
                        "{}: ends inside a line ({len} bytes, fstat said {at_open})",
                        path.display()
                    ),
                );
            }
            for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                if serde_json::from_slice::<Value>(line).is_err() {
                    shared.fail(
                        "growing: JSONL line is not JSON",
                        format!(
                            "{}: a line is not JSON ({len} bytes, fstat said {at_open})",
                            path.display()
                        ),
                    );
                    break;
                }
            }
        } else if std::str::from_utf8(&bytes).is_err() {
            shared.fail(
                "growing: not UTF-8",
                format!("{}: not UTF-8", path.display()),
            );
        }
        shared
            .grown
            .lock()
            .unwrap()
            .push((path.to_path_buf(), bytes.len(), digest(&bytes)));
    }
}

fn list(shared: &Shared, path: &Path) -> Option<Vec<String>> {
    match std::fs::read_dir(path) {
        Ok(entries) => {
            let mut names = Vec::new();
            for entry in entries {
                match entry {
                    Ok(e) => names.push(e.file_name().into_string().expect("UTF-8 names")),
                    Err(e) => {
                        shared.errno(path, "readdir", &e);
                        return None;
                    }
                }
            }
            Some(names)
        }
        Err(e) => {
            shared.errno(path, "opendir", &e);
            None
        }
    }
}

fn readdir(shared: &Shared, rng: &mut Rng, session: &str) {
    let dir = shared.mount.join(session);
    match rng.below(4) {
        0 => {
            let Some(names) = list(shared, &shared.mount) else {
                return;
            };
            let mut sessions: Vec<String> =
                names.iter().filter(|n| *n != "flush").cloned().collect();
            let mut seen = BTreeSet::new();
            let twice: Vec<&String> = sessions.iter().filter(|n| !seen.insert(*n)).collect();
            if !twice.is_empty() {
                shared.fail(
                    "readdir: root lists a name twice",
                    format!(
                        "one listing of the root ({} names) has {twice:?} twice",
                        sessions.len()
                    ),
                );
            }
            sessions.sort();
            *shared.names.write().unwrap() = Arc::new(sessions);
        }
        1 => {
            let Some(names) = list(shared, &dir.join("events")) else {
                return;
            };
            let mut seqs: Vec<u64> = names
                .iter()
                .filter_map(|n| n.split('-').next()?.parse().ok())
                .collect();
            seqs.sort();
            if seqs.len() != names.len() || seqs.iter().enumerate().any(|(i, s)| *s != i as u64) {
                shared.fail(
                    "readdir: events/ not seqs 0..n",
                    format!(
                        "{session}/events lists {} names that are not seqs 0..{}",
                        names.len(),
                        names.len()
                    ),
                );
            }
            shared
                .events
                .lock()
                .unwrap()
                .insert(session.to_string(), Arc::new(names));
        }
        2 => {
            if let Some(names) = list(shared, &dir) {
                for required in ["header.json", "fork", "flush", "children"] {
                    if !names.iter().any(|n| n == required) {
                        shared.fail(
                            "readdir: session dir misses a file",
                            format!("{session} lists no {required}"),
                        );
                    }
                }
            }
        }
        _ => {
            if let Some(children) = list(shared, &dir.join("children")) {
                for child in children {
                    if let Err(e) = std::fs::read_link(dir.join("children").join(&child)) {
                        shared.errno(&dir.join("children").join(&child), "readlink", &e);
                    }
                }
            }
        }
    }
}

/// A file of a session to stat or read.
fn pick_file(shared: &Shared, rng: &mut Rng, session: &str) -> PathBuf {
    let dir = shared.mount.join(session);
    match rng.below(6) {
        0 => dir.join("header.json"),
        1 => dir.join("transcript.md"),
        2 => dir.join("surface.jsonl"),
        3 => dir.join("index.jsonl"),
        _ => {
            let names = shared.events.lock().unwrap().get(session).cloned();
            match names {
                Some(names) if !names.is_empty() => {
                    dir.join("events").join(&names[rng.below(names.len())])
                }
                _ => dir.join("header.json"),
            }
        }
    }
}

fn reader(shared: Arc<Shared>, seed: u64) -> Vec<(Op, u32)> {
    let mut rng = Rng(seed | 1);
    let mut latencies = Vec::with_capacity(1 << 16);
    while !shared.stop.load(Ordering::Relaxed) {
        let names = shared.names.read().unwrap().clone();
        let session = names[rng.below(names.len())].clone();
        let roll = rng.below(100);
        let start = Instant::now();
        let op = if roll < 20 {
            readdir(&shared, &mut rng, &session);
            Op::Readdir
        } else if roll < 55 {
            let path = pick_file(&shared, &mut rng, &session);
            if let Err(e) = std::fs::metadata(&path) {
                shared.errno(&path, "stat", &e);
            }
            Op::Stat
        } else {
            let path = pick_file(&shared, &mut rng, &session);
            checked_read(&shared, &session, &path);
            Op::Read
        };
        latencies.push((
            op,
            start.elapsed().as_micros().min(u128::from(u32::MAX)) as u32,
        ));
    }
    latencies
}

/// Appends one durable batch to a zstd session log, as the Harness does.
fn append_frame(store: &Path, id: &str, events: &[Value]) {
    let path = artifact(store, id);
    let mut plaintext = Vec::new();
    for event in events {
        plaintext.extend(serde_json::to_vec(event).expect("json"));
        plaintext.push(b'\n');
    }
    let frame = sessionfs::store::zstd_frames::encode_frame(&plaintext).expect("frame");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("open log");
    file.write_all(&frame).expect("append");
    file.sync_all().expect("fsync");
}

fn artifact(store: &Path, id: &str) -> PathBuf {
    let segment = sessionfs::model::ids::encode_segment(id).expect("id");
    for project in std::fs::read_dir(store).expect("root") {
        let candidate = project
            .expect("entry")
            .path()
            .join(&segment)
            .join("session.jsonl.zstd");
        if candidate.exists() {
            return candidate;
        }
    }
    panic!("no artifact for {id}");
}

/// Where a written session stands: the next seq and turn, and what was appended.
struct Tail {
    id: &'static str,
    next_seq: u64,
    next_turn: u64,
    needles: Vec<String>,
}

fn tail_of(mount: &Path, id: &'static str) -> Tail {
    let dir = session_dir(mount, id);
    let mut names: Vec<String> = std::fs::read_dir(dir.join("events"))
        .expect("events")
        .map(|e| e.expect("e").file_name().into_string().expect("u"))
        .collect();
    names.sort();
    let last_start = names
        .iter()
        .rev()
        .find(|n| n.ends_with("-turn.start.json"))
        .expect("a turn");
    let turn = read_json(&dir.join("events").join(last_start))["data"]["turn"]
        .as_u64()
        .expect("turn");
    assert!(
        names.last().expect("events").ends_with("-turn.end.json"),
        "{id} ends with a closed turn"
    );
    Tail {
        id,
        next_seq: names.len() as u64,
        next_turn: turn + 1,
        needles: Vec::new(),
    }
}

/// One turn as the Harness logs it, in one batch or two (the turn is open between them).
fn write_turn(store: &Path, tail: &mut Tail, n: u64, split: bool) {
    let s = tail.next_seq;
    let turn = tail.next_turn;
    let time = 1_790_000_000_000i64 + (n as i64) * 1000;
    let needle = format!("stress needle {} {n}", tail.id);
    let title = if n.is_multiple_of(2) {
        format!("t{n}")
    } else {
        format!("a considerably longer session title that shrinks again later, number {n}")
    };
    let first = vec![
        json!({"type": "turn/start", "seq": s, "time": time, "data": {"turn": turn}}),
        json!({"type": "step/start", "seq": s + 1, "time": time + 1, "data": {"turn": turn, "step": 1}}),
        json!({"type": "user/message", "seq": s + 2, "time": time + 2, "data": {"content": [{"type": "text", "text": needle}], "source": {"kind": "user"}, "role": "user", "id": format!("u-{}-{n}", tail.id)}, "surfaceOp": "append"}),
    ];
    let second = vec![
        json!({"type": "step/end", "seq": s + 3, "time": time + 3, "data": {"turn": turn, "step": 1}}),
        json!({"type": "turn/end", "seq": s + 4, "time": time + 4, "data": {"turn": turn, "reason": {"kind": "completed"}}}),
        json!({"type": "session/title", "seq": s + 5, "time": time + 5, "data": {"title": title, "messageSeqs": [s + 2], "source": {"kind": "user"}}}),
    ];
    if split {
        append_frame(store, tail.id, &first);
        std::thread::sleep(Duration::from_millis(30));
        append_frame(store, tail.id, &second);
    } else {
        let all: Vec<Value> = first.into_iter().chain(second).collect();
        append_frame(store, tail.id, &all);
    }
    tail.next_seq += 6;
    tail.next_turn += 1;
    tail.needles.push(needle);
}

fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[test]
fn sixteen_readers_a_writer_and_forks_stay_consistent() {
    let copy = store_copy("jsonl-zstd");
    let store = copy.path.clone();
    // A grace period longer than the run: no crash closers, so views only grow.
    let mount = Mount::new(&store, &["-o", "grace=600,window=100"]);
    let pid = mount.pid();
    let root = mount.path().to_path_buf();
    let mut names: Vec<String> = std::fs::read_dir(&root)
        .expect("root")
        .map(|e| e.expect("e").file_name().into_string().expect("u"))
        .filter(|n| n != "flush")
        .collect();
    names.sort();
    let mut tails: Vec<Tail> = WRITTEN.iter().map(|id| tail_of(&root, id)).collect();
    let boundaries: Vec<(&str, u64)> = FORKED
        .iter()
        .map(|id| (*id, tail_of(&root, id).next_seq - 1))
        .collect();
    let rss_start = vm_rss_kib(pid).unwrap_or(0);

    let shared = Arc::new(Shared {
        mount: root.clone(),
        stop: AtomicBool::new(false),
        names: RwLock::new(Arc::new(names)),
        events: Mutex::default(),
        failures: Mutex::default(),
        errnos: Mutex::default(),
        grown: Mutex::default(),
        header_size_mismatch: AtomicU64::new(0),
        reads_beyond_open_size: AtomicU64::new(0),
    });
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("stress: seed {seed}, {READERS} readers for {RUN:?}");

    let readers: Vec<_> = (0..READERS)
        .map(|i| {
            let shared = shared.clone();
            let seed = seed
                .wrapping_mul(i as u64 + 1)
                .wrapping_add(0x9e37_79b9_7f4a_7c15);
            std::thread::spawn(move || reader(shared, seed))
        })
        .collect();

    // The memory watcher.
    let rss_max = Arc::new(AtomicU64::new(rss_start));
    let watcher = {
        let shared = shared.clone();
        let rss_max = rss_max.clone();
        std::thread::spawn(move || {
            while !shared.stop.load(Ordering::Relaxed) {
                if let Some(rss) = vm_rss_kib(pid) {
                    rss_max.fetch_max(rss, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    // The forker: unnamed forks at stable boundaries, forks of children, flushes.
    let forker = {
        let shared = shared.clone();
        let root = root.clone();
        std::thread::spawn(move || {
            let mut rng = Rng(seed ^ 0xdead_beef);
            let mut made: Vec<(String, u64)> = Vec::new();
            let mut errors = Vec::new();
            let mut flushes = 0u32;
            let mut n = 0u64;
            while !shared.stop.load(Ordering::Relaxed) {
                n += 1;
                let (parent, boundary) = if made.is_empty() || rng.below(3) != 0 {
                    let (id, b) = boundaries[rng.below(boundaries.len())];
                    (id.to_string(), b)
                } else {
                    made[rng.below(made.len())].clone()
                };
                let fork = session_dir(&root, &parent).join("fork");
                match std::fs::write(&fork, format!("{boundary}\n")) {
                    Ok(()) => {
                        let status = std::fs::read_to_string(&fork).unwrap_or_default();
                        let prefix = format!("fork: through seq {boundary} -> ");
                        let known: BTreeSet<&str> = made.iter().map(|(c, _)| c.as_str()).collect();
                        let child = status
                            .lines()
                            .filter_map(|l| l.strip_prefix(prefix.as_str()))
                            .find(|c| !known.contains(c))
                            .map(str::to_string);
                        match child {
                            Some(child) => made.push((child, boundary)),
                            None => errors.push(format!(
                                "fork of {parent} at {boundary}: no new child in {status:?}"
                            )),
                        }
                    }
                    Err(e) => errors.push(format!("fork of {parent} at {boundary}: {e}")),
                }
                if n.is_multiple_of(4) {
                    match std::fs::write(root.join("flush"), b"\n") {
                        Ok(()) => flushes += 1,
                        Err(e) => errors.push(format!("flush: {e}")),
                    }
                }
                std::thread::sleep(Duration::from_millis(150 + rng.below(150) as u64));
            }
            (made, errors, flushes)
        })
    };

    // The writer, on this thread.
    let start = Instant::now();
    let mut rng = Rng(seed ^ 0x5eed);
    let mut batches = 0u64;
    let mut n = 0u64;
    while start.elapsed() < RUN {
        let i = rng.below(tails.len());
        let split = rng.below(3) == 0;
        write_turn(&store, &mut tails[i], n, split);
        batches += 1 + u64::from(split);
        n += 1;
        std::thread::sleep(Duration::from_millis(20 + rng.below(30) as u64));
    }
    shared.stop.store(true, Ordering::Relaxed);
    let elapsed = start.elapsed();
    let mut latencies: BTreeMap<Op, Vec<u32>> = BTreeMap::new();
    for reader in readers {
        for (op, micros) in reader.join().expect("reader") {
            latencies.entry(op).or_default().push(micros);
        }
    }
    let (made, fork_errors, flushes) = forker.join().expect("forker");
    watcher.join().expect("watcher");

    let total: usize = latencies.values().map(Vec::len).sum();
    eprintln!(
        "stress: {total} operations in {elapsed:.1?}: {:.0} ops/s",
        total as f64 / elapsed.as_secs_f64()
    );
    for (op, list) in &mut latencies {
        list.sort_unstable();
        eprintln!(
            "stress: {op:?}: {} ops ({:.0}/s), p50 {} us, p99 {} us, max {} us",
            list.len(),
            list.len() as f64 / elapsed.as_secs_f64(),
            percentile(list, 0.5),
            percentile(list, 0.99),
            list.last().copied().unwrap_or(0)
        );
    }
    eprintln!(
        "stress: writer appended {n} turns in {batches} zstd frames; forker made {} children ({} errors), {flushes} flushes",
        made.len(),
        fork_errors.len()
    );
    eprintln!(
        "stress: reads that followed a file past its size at open: {}; header.json rewritten between open and fstat: {}",
        shared.reads_beyond_open_size.load(Ordering::Relaxed),
        shared.header_size_mismatch.load(Ordering::Relaxed)
    );

    // Quiet: everything written is visible, and every view's final content is
    // an extension of everything any reader read.
    std::fs::write(root.join("flush"), b"\n").expect("final flush");
    for tail in &tails {
        let dir = session_dir(&root, tail.id);
        // Attributes are cached for a second (attr_timeout), so a view may lag that long.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let count = std::fs::read_dir(dir.join("events"))
                .map(|d| d.count() as u64)
                .unwrap_or(0);
            let transcript =
                std::fs::read_to_string(dir.join("transcript.md")).expect("transcript");
            let missing = tail
                .needles
                .iter()
                .filter(|n| !transcript.contains(n.as_str()))
                .count();
            if count == tail.next_seq && missing == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: after 5 s, {count} of {} events listed and {missing} of {} messages missing from transcript.md",
                tail.id,
                tail.next_seq,
                tail.needles.len()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    std::thread::sleep(Duration::from_millis(600));
    let mut finals: HashMap<PathBuf, Vec<u8>> = HashMap::new();
    let mut not_prefix = 0usize;
    let grown = std::mem::take(&mut *shared.grown.lock().unwrap());
    for (path, len, hash) in &grown {
        let content = finals.entry(path.clone()).or_insert_with(|| {
            std::fs::read(path).unwrap_or_else(|e| panic!("final read of {}: {e}", path.display()))
        });
        if content.len() < *len || digest(&content[..*len]) != *hash {
            not_prefix += 1;
            shared.fail(
                "growing: not a prefix of the final content",
                format!(
                    "{}: a {len}-byte read is not a prefix of the final content ({} bytes)",
                    path.display(),
                    content.len()
                ),
            );
        }
    }
    eprintln!(
        "stress: {} reads of growing files checked against the final content; {not_prefix} were not a prefix",
        grown.len()
    );

    // Every event file of every session parses and carries the seq of its name.
    let mut sessions = 0;
    let mut event_files = 0;
    for entry in std::fs::read_dir(&root).expect("root") {
        let entry = entry.expect("entry");
        if entry.file_name() == "flush" {
            continue;
        }
        sessions += 1;
        let Ok(events) = std::fs::read_dir(entry.path().join("events")) else {
            continue;
        };
        for event in events {
            let event = event.expect("event");
            let name = event.file_name().into_string().expect("u");
            let value = read_json(&event.path());
            event_files += 1;
            assert_eq!(
                value["seq"].as_u64(),
                name.split('-').next().and_then(|d| d.parse().ok()),
                "{}",
                event.path().display()
            );
        }
    }
    for (child, boundary) in &made {
        let header = read_json(&session_dir(&root, child).join("header.json"));
        assert_eq!(header["seedLength"], boundary + 1, "{child}");
    }
    eprintln!(
        "stress: final sweep: {sessions} sessions, {event_files} event files, all parse with the seq of their name"
    );

    let rss_end = vm_rss_kib(pid).unwrap_or(0);
    let rss_peak = rss_max.load(Ordering::Relaxed).max(rss_end);
    eprintln!(
        "stress: sessionfs VmRSS: {} KiB at start, {} KiB peak, {} KiB at end",
        rss_start, rss_peak, rss_end
    );
    let status = mount.unmount();
    assert!(status.success(), "sessionfs exited with {status}");

    let errnos = shared.errnos.lock().unwrap().clone();
    let failures = shared.failures.lock().unwrap().clone();
    eprintln!("stress: errnos seen: {errnos:?}");
    for (category, (count, examples)) in &failures {
        eprintln!("stress: {count} x {category}");
        for example in examples {
            eprintln!("stress:     e.g. {example}");
        }
    }
    assert!(fork_errors.is_empty(), "fork/flush errors: {fork_errors:?}");
    assert!(
        made.len() >= 10,
        "the forker made only {} children",
        made.len()
    );
    assert!(
        errnos.is_empty(),
        "errnos during the run (none is legitimate: no name vanishes): {errnos:?}"
    );
    assert!(failures.is_empty(), "inconsistencies: {failures:?}");
    assert!(rss_peak < RSS_LIMIT_KIB, "sessionfs grew to {rss_peak} KiB");
}

/// The names of a directory read with `getdents64` and a small buffer, calling
/// `between` after the first batch (so the listing spans several requests).
fn getdents_names(dir: &Path, between: impl FnOnce()) -> Vec<String> {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    assert!(
        fd >= 0,
        "open {}: {}",
        dir.display(),
        std::io::Error::last_os_error()
    );
    let mut names = Vec::new();
    let mut between = Some(between);
    let mut buffer = vec![0u8; 256];
    loop {
        // SAFETY: the buffer is valid for its length; fd is an open directory.
        let n =
            unsafe { libc::syscall(libc::SYS_getdents64, fd, buffer.as_mut_ptr(), buffer.len()) };
        assert!(n >= 0, "getdents64: {}", std::io::Error::last_os_error());
        if n == 0 {
            break;
        }
        let mut at = 0usize;
        while at < n as usize {
            let reclen = u16::from_ne_bytes([buffer[at + 16], buffer[at + 17]]) as usize;
            let name = &buffer[at + 19..at + reclen];
            let end = name.iter().position(|b| *b == 0).unwrap_or(name.len());
            names.push(String::from_utf8_lossy(&name[..end]).into_owned());
            at += reclen;
        }
        if let Some(f) = between.take() {
            f();
        }
    }
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
    names
}

#[test]
fn a_root_listing_returns_each_name_once_while_a_session_appears() {
    let copy = store_copy("jsonl-zstd");
    let mount = Mount::new(&copy.path, &["-o", "grace=600"]);
    let root = mount.path().to_path_buf();
    let before = getdents_names(&root, || {});
    let boundary = tail_of(&root, "release-notes").next_seq - 1;
    // "0early" sorts before every fixture session, so it shifts every position.
    let listed = getdents_names(&root, || {
        std::fs::write(
            session_dir(&root, "release-notes").join("fork"),
            format!("{boundary} 0early\n"),
        )
        .expect("fork");
    });
    let mut seen = BTreeSet::new();
    let twice: Vec<&String> = listed.iter().filter(|n| !seen.insert(*n)).collect();
    let missing: Vec<&String> = before.iter().filter(|n| !listed.contains(n)).collect();
    eprintln!(
        "root listing: {} names before, {} while a session appeared; twice: {twice:?}; missing: {missing:?}",
        before.len(),
        listed.len()
    );
    assert!(
        twice.is_empty(),
        "a name listed twice in one pass: {twice:?}"
    );
    assert!(
        missing.is_empty(),
        "names that existed throughout but were not listed: {missing:?}"
    );
}

/// Appends a `session/title` event to a quiet session.
fn retitle(store: &Path, tail: &mut Tail, title: &str) {
    let event = json!({"type": "session/title", "seq": tail.next_seq, "time": 1_790_000_000_000i64 + tail.next_seq as i64, "data": {"title": title, "messageSeqs": [], "source": {"kind": "user"}}});
    append_frame(store, tail.id, &[event]);
    tail.next_seq += 1;
}

fn wait_for_title(path: &Path, title: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .is_none_or(|h| h["title"]["title"] != title)
    {
        assert!(
            Instant::now() < deadline,
            "the title {title:?} never showed in {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Reads a whole file through a descriptor opened earlier; returns (fstat at
/// open, bytes, fstat after the read).
fn read_held(file: &mut std::fs::File, at_open: u64) -> (u64, Vec<u8>, u64) {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).expect("read");
    (at_open, bytes, file.metadata().expect("fstat").len())
}

#[test]
fn header_json_through_a_held_descriptor_is_whole_json_of_its_size() {
    let copy = store_copy("jsonl-zstd");
    let mount = Mount::new(&copy.path, &["-o", "grace=600"]);
    let root = mount.path().to_path_buf();
    let mut tail = tail_of(&root, "release-notes");
    let header = session_dir(&root, "release-notes").join("header.json");
    let long = "a long title that will shortly be replaced by a much shorter one ".repeat(3);
    let mut problems = Vec::new();
    for (from, to) in [(long.as_str(), "short"), ("short", long.as_str())] {
        retitle(&copy.path, &mut tail, from);
        wait_for_title(&header, from);
        let mut held = std::fs::File::open(&header).expect("open");
        let at_open = held.metadata().expect("fstat").len();
        retitle(&copy.path, &mut tail, to);
        // Wait with stat only, so no read fills the page cache with the new bytes:
        // the held descriptor's read then goes to sessionfs with its own handle.
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::metadata(&header).expect("stat").len() == at_open {
            assert!(Instant::now() < deadline, "header.json never changed size");
            std::thread::sleep(Duration::from_millis(50));
        }
        let (at_open, bytes, after) = read_held(&mut held, at_open);
        let parsed = serde_json::from_slice::<Value>(&bytes);
        let title = parsed.as_ref().ok().map(|h| h["title"]["title"].clone());
        eprintln!(
            "header.json held across {:?} -> {:?}: fstat at open {at_open}, read {} bytes, fstat after {after}, parses: {}, title: {title:?}",
            &from[..5.min(from.len())],
            &to[..5.min(to.len())],
            bytes.len(),
            parsed.is_ok()
        );
        if parsed.is_err() {
            problems.push(format!(
                "title {:?} -> {:?}: the read is not JSON ({} bytes; fstat said {at_open})",
                &from[..5],
                &to[..5],
                bytes.len()
            ));
        }
        if bytes.len() as u64 != at_open {
            problems.push(format!(
                "title {:?} -> {:?}: read {} bytes, fstat at open said {at_open}",
                &from[..5],
                &to[..5],
                bytes.len()
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn index_jsonl_through_a_held_descriptor_is_whole_lines_of_its_size() {
    let copy = store_copy("jsonl-zstd");
    let mount = Mount::new(&copy.path, &["-o", "grace=1"]);
    let root = mount.path().to_path_buf();
    let mut tail = tail_of(&root, "release-notes");
    let dir = session_dir(&root, "release-notes");
    let (s, turn) = (tail.next_seq, tail.next_turn);
    append_frame(
        &copy.path,
        tail.id,
        &[
            json!({"type": "turn/start", "seq": s, "time": 1_790_000_000_000i64, "data": {"turn": turn}}),
            json!({"type": "step/start", "seq": s + 1, "time": 1_790_000_000_001i64, "data": {"turn": turn, "step": 1}}),
            json!({"type": "user/message", "seq": s + 2, "time": 1_790_000_000_002i64, "data": {"content": [{"type": "text", "text": "held"}], "source": {"kind": "user"}, "role": "user", "id": "u-held"}, "surfaceOp": "append"}),
        ],
    );
    tail.next_seq += 3;
    // Quiet for the grace period: the open turn is shown closed by synthetic events.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !std::fs::read_dir(dir.join("events"))
        .expect("events")
        .any(|e| {
            e.expect("e")
                .file_name()
                .to_string_lossy()
                .contains("synthetic")
        })
    {
        assert!(
            Instant::now() < deadline,
            "no synthetic closers after the grace period"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1100));
    let mut held = std::fs::File::open(dir.join("index.jsonl")).expect("open");
    let at_open = held.metadata().expect("fstat").len();
    append_frame(
        &copy.path,
        tail.id,
        &[
            json!({"type": "step/end", "seq": s + 3, "time": 1_790_000_000_003i64, "data": {"turn": turn, "step": 1}}),
            json!({"type": "turn/end", "seq": s + 4, "time": 1_790_000_000_004i64, "data": {"turn": turn, "reason": {"kind": "completed"}}}),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::metadata(dir.join("index.jsonl"))
        .expect("stat")
        .len()
        == at_open
    {
        assert!(Instant::now() < deadline, "index.jsonl never changed size");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (at_open, bytes, after) = read_held(&mut held, at_open);
    let whole_lines = bytes.ends_with(b"\n")
        && bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .all(|l| serde_json::from_slice::<Value>(l).is_ok());
    let tail_text = String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(80)..]).into_owned();
    eprintln!(
        "index.jsonl held across the closers' removal: fstat at open {at_open}, read {} bytes, fstat after {after}, whole JSON lines: {whole_lines}; ends with {tail_text:?}",
        bytes.len()
    );
    assert!(whole_lines, "the held descriptor read a cut line");
    assert_eq!(
        bytes.len() as u64,
        at_open,
        "the held descriptor read a size other than its fstat at open"
    );
}
