//! Issue 29: one rule for every generated file of a live session, in every
//! store kind. When new content starts with the old, an open descriptor reads
//! on into the new bytes; otherwise the path moves to a new inode and the old
//! descriptor keeps its snapshot. Never a mix of two snapshots, never a size
//! other than the true one, and never a SIGBUS for a process that maps a file
//! while another lists its directory.

mod common;

use std::io::Read;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::harness::{append_durably, commit_batch, log_batch};
use common::{Mount, session_dir, store_copy, with_mapping, within};
use serde_json::{Value, json};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Jsonl,
    Zstd,
    Sqlite,
}

impl Kind {
    fn fixture(self) -> &'static str {
        match self {
            Kind::Jsonl => "jsonl",
            Kind::Zstd => "jsonl-zstd",
            Kind::Sqlite => "sqlite17",
        }
    }
}

const SESSION: &str = "ledger-chat";
/// The fixture session's last seq and its surface nodes (fixtures/expected).
const LAST_SEQ: u64 = 321;
const SURFACE_NODES: [u64; 9] = [2, 3, 113, 119, 243, 248, 289, 295, 319];

/// The generated files of a session directory a follower may hold open.
const GENERATED: [&str; 7] = [
    "transcript.md",
    "surface.jsonl",
    "index.jsonl",
    "header.json",
    "status",
    "fork",
    "flush",
];

fn log_path(store: &Path, kind: Kind) -> PathBuf {
    let name = match kind {
        Kind::Jsonl => "session.jsonl",
        Kind::Zstd => "session.jsonl.zstd",
        Kind::Sqlite => unreachable!("a SQLite store has no log file"),
    };
    for project in std::fs::read_dir(store).expect("root") {
        let candidate = project.expect("entry").path().join(SESSION).join(name);
        if candidate.exists() {
            return candidate;
        }
    }
    panic!("no log for {SESSION}");
}

/// Appends one durable batch as the Harness does: lines, one zstd frame, or
/// one SQLite transaction.
fn append(kind: Kind, store: &Path, events: &[Value]) {
    match kind {
        Kind::Jsonl | Kind::Zstd => append_durably(
            &log_path(store, kind),
            &log_batch(events, kind == Kind::Zstd),
        ),
        Kind::Sqlite => commit_batch(
            &mut rusqlite::Connection::open(store).expect("db"),
            SESSION,
            events,
        ),
    }
}

const T0: i64 = 1_790_000_000_000;

fn open_turn() -> Vec<Value> {
    let s = LAST_SEQ;
    vec![
        json!({"type": "turn/start", "seq": s + 1, "time": T0, "data": {"turn": 5}}),
        json!({"type": "step/start", "seq": s + 2, "time": T0 + 1, "data": {"turn": 5, "step": 1}}),
        json!({"type": "user/message", "seq": s + 3, "time": T0 + 2, "data": {"content": [{"type": "text", "text": "follow rule needle"}], "source": {"kind": "user"}, "role": "user", "id": "u-follow"}, "surfaceOp": "append"}),
    ]
}

fn rest_of_turn() -> Vec<Value> {
    let s = LAST_SEQ;
    vec![
        json!({"type": "assistant/message", "seq": s + 4, "time": T0 + 10, "data": {"turn": 5, "step": 1, "message": {"role": "assistant", "content": [{"type": "text", "text": "resumed after the grace"}], "source": {"kind": "model", "provider": "deepseek", "model": "m"}, "id": "a-follow"}, "usage": {"inputTokens": 1, "outputTokens": 1}}, "surfaceOp": "append"}),
        json!({"type": "step/end", "seq": s + 5, "time": T0 + 11, "data": {"turn": 5, "step": 1}}),
        json!({"type": "turn/end", "seq": s + 6, "time": T0 + 12, "data": {"turn": 5, "reason": {"kind": "completed"}}}),
    ]
}

/// A summarising compaction of every surface node the fixture had.
fn compaction() -> Vec<Value> {
    let s = LAST_SEQ + 6;
    let id = "c0ffee00-0000-4000-8000-000000000029";
    let summary = json!([{"type": "text", "text": "Turns 1-4: rates round half-up."}]);
    let mut sources = vec![s + 1, s + 2];
    sources.extend(SURFACE_NODES);
    let (first, last) = (SURFACE_NODES[0], SURFACE_NODES[SURFACE_NODES.len() - 1]);
    vec![
        json!({"type": "compaction/start", "seq": s + 1, "time": T0 + 20, "data": {"compactionId": id, "turn": null}}),
        json!({"type": "compaction/summary", "seq": s + 2, "time": T0 + 21, "data": {"compactionId": id, "summary": summary, "shadowedRange": {"start": first, "end": last}, "shadowedSeqs": SURFACE_NODES, "shadowedTokenCount": 900, "provider": "deepseek", "model": "m"}}),
        json!({"type": "user/message", "seq": s + 3, "time": T0 + 22, "data": {"content": [{"type": "text", "text": "Context checkpoint.\n\n<compacted-summary>"}, summary[0], {"type": "text", "text": "</compacted-summary>"}], "source": {"kind": "plugin", "plugin": "compact", "compactionId": id}, "role": "user", "id": "u-compact"}, "sourceEventSeqs": sources, "surfaceOp": {"op": "replace", "start": first, "end": last}}),
        json!({"type": "compaction/end", "seq": s + 4, "time": T0 + 23, "data": {"compactionId": id, "turn": null}}),
    ]
}

const NEW_TITLE: &str = "Follow rule: a new title";

fn title_change() -> Vec<Value> {
    vec![
        json!({"type": "session/title", "seq": LAST_SEQ + 11, "time": T0 + 30, "data": {"title": NEW_TITLE, "messageSeqs": [3], "source": {"kind": "user"}}}),
    ]
}

fn torn_record() -> Vec<Value> {
    vec![json!({"type": "turn/start", "seq": LAST_SEQ + 12, "time": T0 + 40, "data": {"turn": 6}})]
}

/// Whether an event file with this seq is shown, and none synthetic when `closed`.
fn shows_seq(dir: &Path, seq: u64) -> bool {
    common::event_names(dir)
        .iter()
        .any(|n| n.starts_with(&format!("{seq:08}-")))
}

fn has_closers(dir: &Path) -> bool {
    common::event_names(dir)
        .iter()
        .any(|n| n.contains("synthetic"))
}

/// A descriptor a follower holds: the inode it was opened on and the bytes it
/// read at the last check.
struct Held {
    name: &'static str,
    file: std::fs::File,
    ino: u64,
    seen: Vec<u8>,
}

fn read_whole(file: &std::fs::File) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read_at(&mut buf, out.len() as u64).expect("pread");
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// What a fresh open of `path` reads, with its inode, taken twice so that a
/// view changing in between is retried rather than blamed on a descriptor.
fn fresh(path: &Path) -> (u64, Vec<u8>) {
    let mut last = (0, 0, 0);
    for _ in 0..100 {
        let mut file = std::fs::File::open(path).expect("open fresh");
        let ino = file.metadata().expect("fstat").ino();
        let mut first = Vec::new();
        file.read_to_end(&mut first).expect("read fresh");
        let again = std::fs::read(path).expect("read again");
        let len = file.metadata().expect("fstat").len();
        if first == again
            && len == first.len() as u64
            && std::fs::metadata(path).expect("stat").ino() == ino
        {
            return (ino, first);
        }
        last = (first.len(), again.len(), len);
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "{}: two opens and fstat never agreed within 5 s (last: read {}, read {}, fstat {})",
        path.display(),
        last.0,
        last.1,
        last.2
    );
}

/// What the held descriptor reads and its `fstat` size, with a fresh open of
/// its path taken after them. A control file shows its status as of each
/// read, and that moves on its own (a fork's write-behind lands): a
/// disagreement is retried, and only one that lasts is returned.
fn settled(path: &Path, held: &Held) -> (Vec<u8>, u64, u64, Vec<u8>) {
    let mut attempt = 0;
    loop {
        let read = read_whole(&held.file);
        let size = held.file.metadata().expect("fstat held").len();
        let (ino, now) = fresh(path);
        let agrees = size == read.len() as u64 && (ino != held.ino || read == now);
        attempt += 1;
        if agrees || attempt == 100 {
            return (read, size, ino, now);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Opens every generated file the directory shows.
fn open_all(dir: &Path) -> Vec<Held> {
    GENERATED
        .iter()
        .filter(|name| dir.join(name).exists())
        .map(|&name| {
            let file = std::fs::File::open(dir.join(name)).expect("open");
            let ino = file.metadata().expect("fstat").ino();
            let seen = read_whole(&file);
            Held {
                name,
                file,
                ino,
                seen,
            }
        })
        .collect()
}

/// Holds every descriptor to the rule after `step`; descriptors opened anew on
/// moved paths join the held set.
fn check_rule(dir: &Path, step: &str, held: &mut Vec<Held>) {
    let mut reopened = Vec::new();
    for h in held.iter_mut() {
        let path = dir.join(h.name);
        let (read, size, ino, now) = settled(&path, h);
        assert_eq!(
            size,
            read.len() as u64,
            "{step}: {} fstat on an old descriptor is the size it reads",
            h.name
        );
        if ino == h.ino {
            assert!(
                read == now,
                "{step}: {} on inode {ino}: the old descriptor reads {} bytes, a fresh open {} \
                 (the path kept its inode, so they must agree)",
                h.name,
                read.len(),
                now.len()
            );
        } else {
            assert!(
                read.starts_with(&h.seen),
                "{step}: {} moved to a new inode; the old descriptor changed what it had read",
                h.name
            );
            let again = std::fs::File::open(&path).expect("reopen");
            assert_eq!(again.metadata().expect("fstat").ino(), ino);
            assert!(
                read_whole(&again) == now,
                "{step}: {} reopened reads the fresh file",
                h.name
            );
            reopened.push(Held {
                name: h.name,
                file: again,
                ino,
                seen: now.clone(),
            });
        }
        h.seen = read;
    }
    held.extend(reopened);
}

/// Drives the sequence; after each step `check` sees the session directory.
fn drive(kind: Kind, store: &Path, dir: &Path, mut check: impl FnMut(&str)) {
    check("start");
    append(kind, store, &open_turn());
    within(Duration::from_secs(6), "closers after the grace", || {
        has_closers(dir)
    });
    check("an open turn quiet past the grace");
    append(kind, store, &rest_of_turn());
    within(Duration::from_secs(3), "the resumed turn", || {
        shows_seq(dir, LAST_SEQ + 6) && !has_closers(dir)
    });
    check("the turn resumed");
    // A fork written into the session's lineage: the child is shown at once,
    // and the parent's fork log and children/ gain it.
    std::fs::write(dir.join("fork"), format!("{}\n", LAST_SEQ + 6)).expect("fork");
    check("a fork of the session");
    append(kind, store, &compaction());
    within(Duration::from_secs(3), "the compaction", || {
        shows_seq(dir, LAST_SEQ + 10)
            && std::fs::read_to_string(dir.join("surface.jsonl"))
                .is_ok_and(|s| s.contains("Turns 1-4: rates round half-up."))
    });
    check("a compaction");
    append(kind, store, &title_change());
    within(Duration::from_secs(3), "the new title", || {
        std::fs::read_to_string(dir.join("header.json")).is_ok_and(|h| h.contains(NEW_TITLE))
    });
    check("a title change");
    if kind == Kind::Sqlite {
        // A transaction cannot be torn: the record lands whole.
        append(kind, store, &torn_record());
    } else {
        let log = log_path(store, kind);
        let length = std::fs::metadata(&log).expect("log").len();
        let record = log_batch(&torn_record(), kind == Kind::Zstd);
        append_durably(&log, &record[..record.len() / 2]);
        std::thread::sleep(Duration::from_millis(1500));
        check("a torn tail");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&log)
            .expect("log")
            .set_len(length)
            .expect("cut the torn tail");
        std::thread::sleep(Duration::from_millis(1000));
        check("a torn tail cut");
        append_durably(&log, &record[..record.len() / 2]);
        std::thread::sleep(Duration::from_millis(500));
        append_durably(&log, &record[record.len() / 2..]);
    }
    within(Duration::from_secs(3), "the completed record", || {
        shows_seq(dir, LAST_SEQ + 12)
    });
    check("a torn tail completed");
}

fn descriptors_follow_the_rule(kind: Kind) {
    let copy = store_copy(kind.fixture());
    let mount = Mount::new(&copy.path, &["-o", "grace=1"]);
    let dir = session_dir(mount.path(), SESSION);
    let mut held = open_all(&dir);
    drive(kind, &copy.path, &dir, |step| {
        check_rule(&dir, step, &mut held);
        // A descriptor opened at every step is held from then on.
        held.extend(open_all(&dir));
    });
    drop(held);
    drop(mount);
}

#[test]
fn jsonl_descriptors_read_on_or_see_a_new_inode() {
    descriptors_follow_the_rule(Kind::Jsonl);
}

#[test]
fn zstd_descriptors_read_on_or_see_a_new_inode() {
    descriptors_follow_the_rule(Kind::Zstd);
}

#[test]
fn sqlite_descriptors_read_on_or_see_a_new_inode() {
    descriptors_follow_the_rule(Kind::Sqlite);
}

/// The first case: surface.jsonl only grows when a turn quiet past the
/// grace goes on, while index.jsonl is rewritten (its closers give way); the
/// surface descriptor opened before reads on to what a fresh open reads.
#[test]
fn a_surface_descriptor_reads_on_when_the_index_is_rewritten() {
    let kind = Kind::Jsonl;
    let copy = store_copy(kind.fixture());
    let mount = Mount::new(&copy.path, &["-o", "grace=1"]);
    let dir = session_dir(mount.path(), SESSION);
    let surface = std::fs::File::open(dir.join("surface.jsonl")).expect("open surface");
    let before = read_whole(&surface);
    append(kind, &copy.path, &open_turn());
    within(Duration::from_secs(6), "closers after the grace", || {
        has_closers(&dir)
    });
    let (_, quiet) = fresh(&dir.join("surface.jsonl"));
    assert_eq!(
        read_whole(&surface),
        quiet,
        "the descriptor reads the closers too"
    );
    append(kind, &copy.path, &rest_of_turn());
    within(Duration::from_secs(3), "the resumed turn", || {
        shows_seq(&dir, LAST_SEQ + 6) && !has_closers(&dir)
    });
    let (_, now) = fresh(&dir.join("surface.jsonl"));
    assert!(now.starts_with(&before) && now.len() > before.len());
    let read = read_whole(&surface);
    assert_eq!(
        surface.metadata().expect("fstat").len(),
        read.len() as u64,
        "fstat and read agree"
    );
    assert!(
        read == now,
        "the old descriptor reads on into the resumed turn"
    );
    drop(surface);
    drop(mount);
}

/// The text `tail -F` printed after its last reopen: everything after its last
/// own message ("... has been replaced; following new file", "file truncated").
fn after_last_reopen(output: &str) -> &str {
    let mut from = 0;
    let mut at = 0;
    for line in output.split_inclusive('\n') {
        at += line.len();
        if line.starts_with("tail: ") {
            from = at;
        }
    }
    &output[from..]
}

#[test]
fn tail_capital_f_ends_with_the_final_index_and_surface() {
    let kind = Kind::Jsonl;
    let copy = store_copy(kind.fixture());
    let mount = Mount::new(&copy.path, &["-o", "grace=1"]);
    let dir = session_dir(mount.path(), SESSION);
    let output = common::TempDir::new("tail-F");
    let mut tails = Vec::new();
    for name in ["index.jsonl", "surface.jsonl"] {
        let captured = output.path().join(format!("{name}.out"));
        let file = std::fs::File::create(&captured).expect("capture");
        // stdout and stderr on one file description, so its messages sit
        // between the bytes they explain.
        let tail = Command::new("tail")
            .args(["-F", "-s", "0.2", "-c", "+1"])
            .arg(dir.join(name))
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("dup"))
            .stderr(file)
            .spawn()
            .expect("tail");
        tails.push((name, captured, tail));
    }
    std::thread::sleep(Duration::from_millis(800));
    drive(kind, &copy.path, &dir, |_| {
        std::thread::sleep(Duration::from_millis(800))
    });
    let mut failures = Vec::new();
    for (name, captured, mut tail) in tails {
        let last = std::fs::read_to_string(dir.join(name)).expect("final file");
        let caught_up =
            || std::fs::read_to_string(&captured).is_ok_and(|o| after_last_reopen(&o) == last);
        let deadline = std::time::Instant::now() + Duration::from_secs(4);
        while !caught_up() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = tail.kill();
        let _ = tail.wait();
        let printed = std::fs::read_to_string(&captured).expect("output");
        if after_last_reopen(&printed) != last {
            let messages: Vec<&str> = printed
                .lines()
                .filter(|l| l.starts_with("tail: "))
                .collect();
            failures.push(format!(
                "{name}: after its last reopen tail -F printed {} bytes, the final file has {} \
                 (tail said: {messages:?})",
                after_last_reopen(&printed).len(),
                last.len()
            ));
        }
    }
    drop(mount);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Set in the mapper child: the files it maps, one per line.
const MAPPER_FILES: &str = "SESSIONFS_FOLLOW_MAPPER_FILES";
const MAPS_PER_FILE: usize = 200;

/// The mapper child's work: map each file whole and compare it with `read()`,
/// 200 times each. A SIGBUS kills only this process, which the parent sees.
fn map_repeatedly(files: &str) {
    for path in files.lines().map(Path::new) {
        for round in 0..MAPS_PER_FILE {
            let read = std::fs::read(path).expect("read");
            let mapped = with_mapping(path, <[u8]>::to_vec);
            assert!(
                mapped == read,
                "{} round {round}: the mapping ({} bytes) differs from read() ({} bytes)",
                path.display(),
                mapped.len(),
                read.len()
            );
        }
    }
}

/// The generated files of a session directory, events included.
fn mappable(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = [
        "header.json",
        "surface.jsonl",
        "transcript.md",
        "index.jsonl",
        "error",
        "status",
    ]
    .iter()
    .map(|name| dir.join(name))
    .filter(|path| path.exists())
    .collect();
    let events = common::event_names(dir);
    // The first and last events stand for the rest: the event files share one code path.
    for name in events.iter().take(2).chain(events.iter().rev().take(2)) {
        files.push(dir.join("events").join(name));
    }
    files
}

#[test]
fn mappings_survive_ls_l_beside_them() {
    if let Ok(files) = std::env::var(MAPPER_FILES) {
        map_repeatedly(&files);
        return;
    }
    let mut failures = Vec::new();
    for store in ["jsonl", "jsonl-zstd", "sqlite14", "sqlite17"] {
        let copy = store_copy(store);
        let mount = Mount::new(&copy.path, &["-o", "grace=60"]);
        let dir = session_dir(mount.path(), SESSION);
        let files = mappable(&dir);
        let listing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let lister = {
            let listing = listing.clone();
            let (dir, events) = (dir.clone(), dir.join("events"));
            std::thread::spawn(move || {
                let mut lists = 0u32;
                while listing.load(std::sync::atomic::Ordering::Relaxed) {
                    for target in [&dir, &events] {
                        let status = Command::new("ls")
                            .arg("-l")
                            .arg(target)
                            .stdout(Stdio::null())
                            .status()
                            .expect("ls -l");
                        assert!(status.success(), "ls -l {}", target.display());
                    }
                    lists += 1;
                }
                lists
            })
        };
        let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
        let child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "mappings_survive_ls_l_beside_them",
                "--include-ignored",
                "--nocapture",
            ])
            .env(MAPPER_FILES, names.join("\n"))
            .stdin(Stdio::null())
            .output()
            .expect("mapper child");
        listing.store(false, std::sync::atomic::Ordering::Relaxed);
        let lists = lister.join().expect("lister");
        assert!(lists > 0, "{store}: ls -l ran beside the mapper");
        if !child.status.success() {
            use std::os::unix::process::ExitStatusExt;
            let stderr = String::from_utf8_lossy(&child.stderr);
            let stdout = String::from_utf8_lossy(&child.stdout);
            let why = match child.status.signal() {
                Some(libc::SIGBUS) => "killed by SIGBUS".to_string(),
                Some(signal) => format!("killed by signal {signal}"),
                None => format!("failed: {}{}", stdout.trim(), stderr.trim()),
            };
            failures.push(format!(
                "{store}: the mapper was {why} ({lists} ls -l runs)"
            ));
        }
        drop(mount);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
