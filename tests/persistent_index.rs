//! The persistent index held to a full read, byte for byte: every file of
//! every fixture session (every store kind, legacy and crash cases) read
//! through a filesystem that continues saved scans must be what one that
//! reads every log whole shows, however the logs or the index were changed
//! in between. Without a mount: the filesystem model over the real stores.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{TempDir, copy_tree, fixtures};
use sessionfs::digest::Fnv;
use sessionfs::fs::inode::ROOT;
use sessionfs::fs::{FsConfig, Kind, SessionFs};
use sessionfs::json::JsonMap;
use sessionfs::model::Refusal;
use sessionfs::model::Scanned;
use sessionfs::model::header::SessionHeader;
use sessionfs::persist::PersistentIndex;
use sessionfs::store::{
    self, Backend, Catalog, EventLoc, EventSink, KnownHeaders, Listing, Revision, ScanEnd,
    ScanPoint, SessionKey, Source, Watched, Writer,
};
use sessionfs::view::SavedScans;

/// A store that counts the events its scans deliver: a remount that
/// continues a saved scan of an unchanged log is delivered none.
struct Counting {
    inner: Box<dyn Backend>,
    delivered: Arc<AtomicU64>,
}

impl Catalog for Counting {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn list(&self) -> Vec<Listing> {
        self.inner.list()
    }
    fn try_list(&self) -> Result<Vec<Listing>, Refusal> {
        self.inner.try_list()
    }
    fn find(&self, id: &str) -> Vec<Listing> {
        self.inner.find(id)
    }
    fn contains(&self, id: &str) -> bool {
        self.inner.contains(id)
    }
    fn remember_headers(&self, known: Arc<dyn KnownHeaders>) {
        self.inner.remember_headers(known)
    }
}

impl Source for Counting {
    fn header(&self, key: &SessionKey) -> Result<SessionHeader, Refusal> {
        self.inner.header(key)
    }
    fn revision(&self, key: &SessionKey) -> Result<Revision, Refusal> {
        self.inner.revision(key)
    }
    fn modified(&self, key: &SessionKey) -> Option<std::time::SystemTime> {
        self.inner.modified(key)
    }
    fn scan(
        &self,
        key: &SessionKey,
        from: &ScanPoint,
        sink: &mut EventSink,
    ) -> Result<(ScanPoint, ScanEnd), Refusal> {
        let delivered = self.delivered.clone();
        self.inner.scan(key, from, &mut |loc, scanned: Scanned| {
            delivered.fetch_add(1, Ordering::Relaxed);
            sink(loc, scanned)
        })
    }
    fn fetch(&self, key: &SessionKey, loc: EventLoc) -> Result<JsonMap, Refusal> {
        self.inner.fetch(key, loc)
    }
    fn prefix_digest(&self, key: &SessionKey, point: &ScanPoint) -> Option<u64> {
        self.inner.prefix_digest(key, point)
    }
}

impl Writer for Counting {
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

impl Watched for Counting {}

/// One filesystem over `store`: what it showed, and how many events its
/// scans were delivered.
struct Shown {
    files: BTreeMap<String, Vec<u8>>,
    delivered: u64,
}

/// Reads every file of `store` through a fresh filesystem, with `index` or
/// reading every log whole, then ends it as an unmount does: the scans it
/// saved are written before this returns.
fn show(store: &Path, index: Option<&Arc<PersistentIndex>>) -> Shown {
    let delivered = Arc::new(AtomicU64::new(0));
    let backend = Counting {
        inner: store::open(store).expect("store"),
        delivered: delivered.clone(),
    };
    if let Some(index) = index {
        backend.remember_headers(index.clone());
    }
    let config = FsConfig {
        // Open turns are shown closed at once, in both, so crash repair is compared too.
        grace: Duration::ZERO,
        relist: Duration::ZERO,
        recheck: Duration::ZERO,
        saved_scans: index.map(|i| i.clone() as Arc<dyn SavedScans>),
        ..FsConfig::default()
    };
    let fs = SessionFs::new(Box::new(backend), config);
    let mut files = BTreeMap::new();
    walk(&fs, ROOT, "", &mut files);
    // As the mount ends: what grew since it was saved is saved too.
    fs.save_scans();
    if let Some(index) = index {
        index.save_headers();
        index.wait_idle();
    }
    Shown {
        files,
        delivered: delivered.load(Ordering::Relaxed),
    }
}

fn walk(fs: &SessionFs, dir: u64, path: &str, out: &mut BTreeMap<String, Vec<u8>>) {
    let mut offset = 0;
    loop {
        let entries = fs.readdir(dir, offset, 64).expect("readdir");
        let Some(last) = entries.last() else {
            return;
        };
        offset = last.next;
        for entry in entries {
            let name = format!("{path}/{}", entry.name);
            match entry.kind {
                Kind::Dir => walk(fs, entry.ino, &name, out),
                Kind::Symlink => {
                    // `latest` goes by the times logs were written, not by their bytes.
                    if !name.ends_with("/latest") {
                        let target = fs.readlink(entry.ino).expect("readlink");
                        out.insert(name, target.into_bytes());
                    }
                }
                // `status` tells the time; control files say what was written to them.
                Kind::File if entry.name == "status" || is_control(&entry.name) => {}
                Kind::File => {
                    let size = fs.getattr(entry.ino).expect("getattr").size;
                    let bytes = read_all(fs, entry.ino);
                    assert_eq!(size, bytes.len() as u64, "stat size of {name}");
                    out.insert(name, bytes);
                }
            }
        }
    }
}

fn is_control(name: &str) -> bool {
    name == "fork" || name == "flush"
}

fn read_all(fs: &SessionFs, ino: u64) -> Vec<u8> {
    let (fh, _) = fs.open(ino, false).expect("open");
    let mut out = Vec::new();
    loop {
        let chunk = fs.read(fh, out.len() as u64, 1 << 16).expect("read");
        if chunk.as_slice().is_empty() {
            break;
        }
        out.extend_from_slice(chunk.as_slice());
    }
    fs.release(fh);
    out
}

/// A fixture store copied, with an index directory of its own.
struct Case {
    _dir: TempDir,
    store: PathBuf,
    index_base: PathBuf,
}

impl Case {
    fn new(fixture: &str) -> Case {
        let dir = TempDir::new("index-case");
        let from = fixtures().join(fixture);
        let root = dir.path().join("store");
        copy_tree(&from, &root);
        let db = root.join("sessions.db");
        let store = if db.exists() { db } else { root };
        let store = store.canonicalize().expect("canonical store");
        let index_base = dir.path().join("index");
        Case {
            _dir: dir,
            store,
            index_base,
        }
    }

    fn index(&self) -> Arc<PersistentIndex> {
        Arc::new(PersistentIndex::open(&self.index_base, &self.store, 1 << 30).expect("index"))
    }

    /// The logs of a JSONL store, in a stable order.
    fn logs(&self) -> Vec<PathBuf> {
        let mut logs = Vec::new();
        let mut stack = vec![self.store.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("readdir").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.to_string_lossy().contains("session.jsonl") {
                    logs.push(path);
                }
            }
        }
        logs.sort();
        logs
    }

    /// Asserts that a filesystem with the index shows what one without it
    /// does, and returns what the indexed one was delivered.
    fn agree(&self, index: &Arc<PersistentIndex>, what: &str) -> u64 {
        let whole = show(&self.store, None);
        let indexed = show(&self.store, Some(index));
        assert!(!whole.files.is_empty(), "{what}: nothing shown");
        assert_same(&whole.files, &indexed.files, what);
        indexed.delivered
    }
}

fn assert_same(whole: &BTreeMap<String, Vec<u8>>, indexed: &BTreeMap<String, Vec<u8>>, what: &str) {
    let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(whole), names(indexed), "{what}: the files differ");
    for (name, bytes) in whole {
        assert!(
            indexed[name] == *bytes,
            "{what}: {name} differs with the index ({} bytes, {} without)",
            indexed[name].len(),
            bytes.len()
        );
    }
}

const STORES: [&str; 10] = [
    "stores/jsonl",
    "stores/jsonl-zstd",
    "stores/sqlite14",
    "stores/sqlite17",
    "stores/crash/jsonl",
    "stores/crash/jsonl-zstd",
    "stores/crash/sqlite14",
    "stores/crash/sqlite17",
    "legacy/stores/jsonl",
    "legacy/stores/jsonl-zstd",
];

#[test]
fn a_remount_with_the_index_shows_every_fixture_file_as_a_full_read_and_reads_no_event_again() {
    for fixture in STORES {
        let case = Case::new(fixture);
        let index = case.index();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(index.dir()).unwrap().permissions().mode();
        assert_eq!(
            mode & 0o777,
            0o700,
            "{fixture}: the index directory is the user's alone"
        );
        assert!(
            !index.dir().starts_with(&case.store),
            "{fixture}: the index is in the store"
        );
        let first = case.agree(&index, &format!("{fixture}, first mount"));
        assert!(first > 0, "{fixture}: the first mount read no event");
        let known = index.headers_known();
        let again = case.agree(&index, &format!("{fixture}, remount"));
        if !fixture.contains("sqlite") {
            let listed = show(&case.store, None)
                .files
                .keys()
                .filter(|n| n.ends_with("/header.json"))
                .count() as u64;
            assert!(
                index.headers_known() - known >= listed,
                "{fixture}: a remount read headers again ({} known for {listed} sessions)",
                index.headers_known() - known
            );
        }
        // A log refused (an `error` file) is not read again either.
        assert_eq!(again, 0, "{fixture}: a remount read events again");
    }
}

/// Events that continue a log whose last seq is `last`: one whole turn.
fn turn_lines(last: u64, turn: u64) -> String {
    let seq = last + 1;
    [
        serde_json::json!({"type": "turn/start", "seq": seq, "time": 1_800_000_000_000u64, "data": {"turn": turn}}),
        serde_json::json!({"type": "user/message", "seq": seq + 1, "time": 1_800_000_000_001u64, "data": {"content": [{"type": "text", "text": "appended after indexing"}], "source": {"kind": "user"}, "role": "user", "id": format!("appended-{seq}")}, "surfaceOp": "append"}),
        serde_json::json!({"type": "turn/end", "seq": seq + 2, "time": 1_800_000_000_002u64, "data": {"turn": turn, "reason": {"kind": "completed"}}}),
    ]
    .iter()
    .map(|v| format!("{v}\n"))
    .collect()
}

/// The plaintext of a log (zstd logs decoded).
fn plaintext(log: &Path) -> Vec<u8> {
    let bytes = std::fs::read(log).expect("log");
    if log.extension().is_some_and(|e| e == "zstd") {
        zstd::stream::decode_all(&bytes[..]).expect("zstd log")
    } else {
        bytes
    }
}

/// Appends `lines` to a log, as its writer would: a line, or a zstd frame.
fn append(log: &Path, lines: &str) {
    let bytes = if log.extension().is_some_and(|e| e == "zstd") {
        zstd::stream::encode_all(lines.as_bytes(), 3).expect("frame")
    } else {
        lines.as_bytes().to_vec()
    };
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(log)
        .expect("open log");
    file.write_all(&bytes).expect("append");
}

/// The last seq a log holds and its last turn number, read from its plaintext.
fn last_seq_and_turn(log: &Path) -> (u64, u64) {
    let text = plaintext(log);
    let (mut seq, mut turn) = (0, 0);
    for line in text.split(|b| *b == b'\n').skip(1) {
        let Ok(event) = serde_json::from_slice::<serde_json::Value>(line) else {
            continue;
        };
        seq = seq.max(event["seq"].as_u64().unwrap_or(0));
        turn = turn.max(event["data"]["turn"].as_u64().unwrap_or(0));
    }
    (seq, turn)
}

#[test]
fn logs_changed_after_indexing_are_continued_or_read_again_as_a_full_read_shows_them() {
    for fixture in [
        "stores/jsonl",
        "stores/jsonl-zstd",
        "stores/crash/jsonl",
        "stores/crash/jsonl-zstd",
        "legacy/stores/jsonl",
    ] {
        let case = Case::new(fixture);
        let index = case.index();
        case.agree(&index, &format!("{fixture}: indexed"));
        let unchanged = case.agree(&index, &format!("{fixture}: unchanged"));
        assert_eq!(unchanged, 0, "{fixture}: an unchanged store was read again");
        let logs = case.logs();
        assert!(logs.len() >= 4, "{fixture}: too few logs");

        // Extended: continued from where the index ends.
        let (last, turn) = last_seq_and_turn(&logs[0]);
        append(&logs[0], &turn_lines(last, turn + 1));
        let delivered = case.agree(&index, &format!("{fixture}: extended"));
        assert!(delivered >= 3, "{fixture}: the appended turn was not read");
        // The scan read on is saved as the filesystem ends: nothing is read again.
        let again = case.agree(&index, &format!("{fixture}: extended, remounted"));
        assert_eq!(again, 0, "{fixture}: the extended scan was not saved");

        // Truncated mid-line: read again from the start.
        let len = std::fs::metadata(&logs[1]).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&logs[1])
            .unwrap()
            .set_len(len * 2 / 3)
            .unwrap();
        case.agree(&index, &format!("{fixture}: truncated"));

        // Rewritten to the same size and modification time.
        let meta = std::fs::metadata(&logs[2]).unwrap();
        let mut bytes = std::fs::read(&logs[2]).unwrap();
        let at = bytes.len() / 2;
        bytes[at] = if bytes[at] == b'a' { b'b' } else { b'a' };
        std::fs::write(&logs[2], &bytes).unwrap();
        let file = std::fs::File::options().write(true).open(&logs[2]).unwrap();
        file.set_modified(meta.modified().unwrap()).unwrap();
        drop(file);
        case.agree(&index, &format!("{fixture}: rewritten in place"));

        // Replaced by a new file (a new inode) holding one more turn.
        let replacement = logs[3].with_extension("new");
        std::fs::copy(&logs[3], &replacement).unwrap();
        let (last, turn) = last_seq_and_turn(&replacement);
        append(&replacement, &turn_lines(last, turn + 1));
        std::fs::rename(&replacement, &logs[3]).unwrap();
        case.agree(&index, &format!("{fixture}: replaced"));

        // Its header rewritten (another creation time): listed with the new one.
        // A log that decodes whole (a torn zstd frame does not).
        let (log, text) = logs
            .iter()
            .skip(4)
            .find_map(|log| {
                let bytes = std::fs::read(log).ok()?;
                let plain = match log.extension().is_some_and(|e| e == "zstd") {
                    true => zstd::stream::decode_all(&bytes[..]).ok()?,
                    false => bytes,
                };
                Some((log, String::from_utf8(plain).ok()?))
            })
            .expect("a log that decodes");
        let (header, rest) = text.split_once('\n').unwrap();
        let mut header: serde_json::Value = serde_json::from_str(header).unwrap();
        let created = header["createdAt"].as_i64().unwrap();
        header["createdAt"] = (created + 86_400_000).into();
        let rewritten = format!("{header}\n{rest}");
        let bytes = match log.extension().is_some_and(|e| e == "zstd") {
            true => zstd::stream::encode_all(rewritten.as_bytes(), 3).unwrap(),
            false => rewritten.into_bytes(),
        };
        std::fs::write(log, bytes).unwrap();
        case.agree(&index, &format!("{fixture}: header rewritten"));
    }
}

#[test]
fn a_torn_tail_indexed_then_completed_reads_as_a_full_read() {
    for fixture in ["stores/jsonl", "stores/jsonl-zstd"] {
        let case = Case::new(fixture);
        let index = case.index();
        let log = case.logs().remove(0);
        let (last, turn) = last_seq_and_turn(&log);
        let lines = turn_lines(last, turn + 1);
        let (torn, rest) = lines.split_at(lines.len() - 20);
        if log.extension().is_some_and(|e| e == "zstd") {
            // A frame cut short, then the whole frame written in its place.
            let frame = zstd::stream::encode_all(lines.as_bytes(), 3).unwrap();
            let len = std::fs::metadata(&log).unwrap().len();
            let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
            file.write_all(&frame[..frame.len() / 2]).unwrap();
            drop(file);
            case.agree(&index, &format!("{fixture}: torn"));
            let file = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
            file.set_len(len).unwrap();
            drop(file);
            append(&log, &lines);
        } else {
            append(&log, torn);
            case.agree(&index, &format!("{fixture}: torn"));
            append(&log, rest);
        }
        let delivered = case.agree(&index, &format!("{fixture}: completed"));
        assert!(delivered > 0, "{fixture}: the completed tail was not read");
    }
}

/// The index files of one store's index directory.
fn index_files(index: &PersistentIndex) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(index.dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "idx"))
        .collect();
    files.sort();
    files
}

#[test]
fn damaged_old_or_foreign_index_files_are_misses_and_are_replaced() {
    type Damage = fn(&Path, &[u8]) -> Vec<u8>;
    let damages: [(&str, Damage); 4] = [
        ("truncated", |_, b| b[..b.len() / 2].to_vec()),
        ("flipped bytes", |_, b| {
            let mut b = b.to_vec();
            for at in [b.len() / 3, b.len() / 2, b.len() - 2] {
                b[at] ^= 0x5a;
            }
            b
        }),
        ("an older format version", |_, b| {
            let mut b = b.to_vec();
            b[7] = 0;
            b
        }),
        ("empty", |_, _| Vec::new()),
    ];
    for fixture in ["stores/jsonl-zstd", "stores/sqlite17"] {
        for (what, damage) in damages {
            let case = Case::new(fixture);
            let index = case.index();
            case.agree(&index, &format!("{fixture}: indexed"));
            let files = index_files(&index);
            assert!(!files.is_empty(), "{fixture}: nothing was saved");
            for file in &files {
                let bytes = std::fs::read(file).unwrap();
                std::fs::write(file, damage(file, &bytes)).unwrap();
            }
            let delivered = case.agree(&index, &format!("{fixture}: index {what}"));
            assert!(delivered > 0, "{fixture}: an index {what} was used");
            // Replaced by sound ones: the next remount reads nothing again.
            let again = case.agree(&index, &format!("{fixture}: after index {what}"));
            assert_eq!(again, 0, "{fixture}: index {what} was not replaced");
        }
    }
}

#[test]
fn an_index_of_another_store_is_not_used() {
    let (one, other) = (Case::new("stores/jsonl"), Case::new("stores/jsonl"));
    let index = one.index();
    one.agree(&index, "one store");
    // The other store's index directory holds the first store's files,
    // each under the name the other store's same session would have.
    let foreign = PersistentIndex::open(&other.index_base, &other.store, 1 << 30).unwrap();
    for log in one.logs() {
        let name = |store: &Path, log: &Path| {
            let key = SessionKey::File(store.join(log.strip_prefix(&one.store).unwrap()));
            format!("{:016x}.idx", Fnv::of(key.describe().as_bytes()))
        };
        let from = index.dir().join(name(&one.store, &log));
        std::fs::copy(&from, foreign.dir().join(name(&other.store, &log))).unwrap();
    }
    let foreign = Arc::new(foreign);
    let delivered = other.agree(&foreign, "another store's index");
    assert!(delivered > 0, "another store's index was used");
}

#[test]
fn two_filesystems_share_one_index_directory() {
    let case = Case::new("stores/jsonl-zstd");
    let (a, b) = (case.index(), case.index());
    let (store, a2, b2) = (case.store.clone(), a.clone(), b.clone());
    let first = std::thread::spawn(move || show(&store, Some(&a2)).files);
    let store = case.store.clone();
    let second = std::thread::spawn(move || show(&store, Some(&b2)).files);
    let (first, second) = (first.join().unwrap(), second.join().unwrap());
    assert_same(&first, &second, "two filesystems at once");
    assert_eq!(case.agree(&a, "after both, through one"), 0);
    assert_eq!(case.agree(&b, "after both, through the other"), 0);
}

#[test]
fn an_index_directory_that_cannot_be_made_leaves_the_mount_reading_whole() {
    let case = Case::new("stores/jsonl");
    // Its base is under a regular file, so no directory can be made there.
    let blocker = case.index_base.with_extension("file");
    std::fs::write(&blocker, b"").unwrap();
    let why = PersistentIndex::open(&blocker.join("index"), &case.store, 1 << 30).unwrap_err();
    assert!(why.contains("cannot make index directory"), "{why}");
    // Inside the store it is refused too: sessionfs never writes there.
    let inside = PersistentIndex::open(&case.store.join(".index"), &case.store, 1 << 30);
    assert!(inside.unwrap_err().contains("inside the store"));
}

/// A tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, options: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(at)
            .status()
            .expect("mount");
        assert!(status.success(), "mount -t tmpfs (these tests run as root)");
        Tmpfs(at.to_path_buf())
    }

    fn remount(&self, options: &str) {
        let status = std::process::Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(&self.0)
            .status()
            .expect("mount");
        assert!(status.success(), "remount {options}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_or_read_only_index_directory_changes_speed_only() {
    let case = Case::new("stores/jsonl-zstd");
    let tmpfs = Tmpfs::mount(&case.index_base, "size=1m,mode=0700");
    let index = case.index();
    // Filled up: every save fails for want of space.
    let mut filler = std::fs::File::create(case.index_base.join("filler")).unwrap();
    while filler.write_all(&[0; 4096]).is_ok() {}
    drop(filler);
    let delivered = case.agree(&index, "index directory full");
    assert!(delivered > 0);
    assert!(index_files(&index).is_empty(), "a save fit in a full tmpfs");
    drop(index);
    // Read-only: what was kept is still read; nothing new is written.
    std::fs::remove_file(case.index_base.join("filler")).unwrap();
    let index = case.index();
    case.agree(&index, "index directory with room");
    tmpfs.remount("ro");
    assert_eq!(case.agree(&index, "index directory read-only"), 0);
    let log = case.logs().remove(0);
    let (last, turn) = last_seq_and_turn(&log);
    append(&log, &turn_lines(last, turn + 1));
    let delivered = case.agree(&index, "read-only index, log extended");
    assert!(delivered >= 3);
    drop(index);
}

#[test]
fn the_least_recently_used_files_go_beyond_the_bound() {
    let case = Case::new("stores/jsonl-zstd");
    let index = case.index();
    case.agree(&index, "unbounded");
    let sizes: Vec<u64> = index_files(&index)
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .collect();
    let total: u64 = sizes.iter().sum();
    let bound = total / 2;
    let bounded = Arc::new(PersistentIndex::open(&case.index_base, &case.store, bound).unwrap());
    // Every file is rewritten when its log grows; past the bound, the oldest go.
    for log in case.logs() {
        let (last, turn) = last_seq_and_turn(&log);
        append(&log, &turn_lines(last, turn + 1));
    }
    case.agree(&bounded, "bounded");
    let kept: u64 = index_files(&bounded)
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    assert!(kept <= bound, "{kept} bytes kept, bound {bound}");
    assert!(kept > 0, "everything was evicted");
}

/// A keeper that hands out the bytes it was given, or `replay` in their place.
#[derive(Debug, Default)]
struct Recorder {
    saved: std::sync::Mutex<Option<Vec<u8>>>,
    replay: std::sync::Mutex<Option<Vec<u8>>>,
}

impl SavedScans for Recorder {
    fn load(&self, _key: &SessionKey) -> Option<Vec<u8>> {
        self.replay.lock().unwrap().clone()
    }
    fn save(&self, _key: &SessionKey, bytes: Vec<u8>) {
        *self.saved.lock().unwrap() = Some(bytes);
    }
}

#[test]
fn damaged_saved_scans_never_panic_a_view_open() {
    use sessionfs::view::{FileId, SessionSource, SessionView};
    let case = Case::new("stores/jsonl");
    let backend: Arc<dyn Backend> = Arc::from(store::open(&case.store).unwrap());
    let listing = backend
        .list()
        .into_iter()
        .find(|l| l.id == "pipeline-compaction")
        .expect("fixture session");
    let recorder = Arc::new(Recorder::default());
    let open = |recorder: &Arc<Recorder>| {
        let source = SessionSource::new(backend.clone(), listing.key.clone());
        let saved = recorder.clone() as Arc<dyn SavedScans>;
        SessionView::open(source, &listing.id, None, Duration::ZERO, None, Some(saved))
    };
    let mut whole = open(&recorder);
    let payload = recorder
        .saved
        .lock()
        .unwrap()
        .clone()
        .expect("a saved scan");
    let want = whole.file(FileId::Surface).unwrap().unwrap().bytes.to_vec();
    // The bytes as saved read back to the same view.
    *recorder.replay.lock().unwrap() = Some(payload.clone());
    let mut again = open(&recorder);
    assert_eq!(
        again.file(FileId::Surface).unwrap().unwrap().bytes.to_vec(),
        want
    );
    // Damaged ones (the file's checksum aside) are refused or read, never a panic.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for trial in 0..3000 {
        let mut bytes = payload.clone();
        match trial % 3 {
            0 => bytes.truncate((next() % payload.len() as u64) as usize),
            1 => {
                for _ in 0..1 + next() % 4 {
                    let at = (next() % bytes.len() as u64) as usize;
                    bytes[at] = next() as u8;
                }
            }
            _ => {
                let at = (next() % bytes.len() as u64) as usize;
                bytes.insert(at, next() as u8);
            }
        }
        *recorder.replay.lock().unwrap() = Some(bytes);
        let mut view = open(&recorder);
        for which in [
            FileId::Header,
            FileId::Surface,
            FileId::Transcript,
            FileId::Index,
        ] {
            let _ = view.file(which);
        }
        for seq in 0..view.event_count().min(50) {
            let _ = view.file_size(FileId::Event(seq));
            let _ = view.file(FileId::Event(seq));
        }
    }
}

#[test]
fn a_refused_log_that_changed_is_read_again() {
    let case = Case::new("stores/crash/jsonl");
    let index = case.index();
    case.agree(&index, "indexed");
    let log = case
        .logs()
        .into_iter()
        .find(|l| {
            l.to_string_lossy()
                .contains("drill-g-unknown-event-mid-turn")
        })
        .expect("the fixture refused for an unknown event type");
    assert!(
        show(&case.store, Some(&index))
            .files
            .keys()
            .any(|n| n.contains("drill-g") && n.ends_with("/error")),
        "the fixture is refused"
    );
    // Cut before the unknown event: what is left can be read.
    let text = std::fs::read_to_string(&log).unwrap();
    let cut = text.find("future/sandbox-audit").unwrap();
    let cut = text[..cut].rfind('\n').unwrap() + 1;
    std::fs::write(&log, &text[..cut]).unwrap();
    case.agree(&index, "the refused log cut before its unknown event");
}
