//! "Flush, then snapshot": a fork flushed through its parent's `flush` is in a
//! plain `rsync -a` copy of the store (for SQLite, of the database file alone),
//! and a mount of that copy shows the same tree byte for byte. A session's flush
//! covers every pending fork below it, grandchildren included.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Mount, TempDir, bounded, session_dir, store_copy};

/// One entry of a mounted tree, read without following symlinks.
#[derive(Debug, PartialEq, Eq)]
enum Entry {
    Dir,
    Link(PathBuf),
    /// A control file's bytes are live status, not data: only its presence counts.
    Control,
    File(Vec<u8>),
}

/// Every entry under `root`; with `live_status`, control files are read like
/// any other file.
fn tree(root: &Path, live_status: bool) -> BTreeMap<PathBuf, Entry> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("readdir") {
            let path = entry.expect("entry").path();
            let meta = std::fs::symlink_metadata(&path).expect("lstat");
            let relative = path.strip_prefix(root).expect("prefix").to_path_buf();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let entry = if meta.is_dir() {
                stack.push(path.clone());
                Entry::Dir
            } else if meta.file_type().is_symlink() {
                Entry::Link(std::fs::read_link(&path).expect("readlink"))
            } else if !live_status && matches!(name, "fork" | "flush") {
                Entry::Control
            } else {
                Entry::File(std::fs::read(&path).expect("read"))
            };
            out.insert(relative, entry);
        }
    }
    out
}

/// The paths where two trees differ, named rather than dumped.
fn differences(a: &BTreeMap<PathBuf, Entry>, b: &BTreeMap<PathBuf, Entry>) -> Vec<PathBuf> {
    a.keys()
        .chain(b.keys())
        .filter(|path| a.get(*path) != b.get(*path))
        .cloned()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

fn rsync(args: &[&str]) -> String {
    let out = Command::new("rsync")
        .args(args)
        .output()
        .expect("rsync is installed (.ci/run installs it)");
    assert!(
        out.status.success(),
        "rsync {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn flush(session: &Path) -> String {
    let control = session.join("flush");
    bounded(Duration::from_secs(60), "echo > flush", move || {
        std::fs::write(&control, b"\n").expect("flush");
        std::fs::read_to_string(&control).expect("cat flush")
    })
}

/// Fork, flush through the parent, copy the store with `rsync -a`, mount the copy
/// and compare both trees.
fn flushed_fork_survives_a_copy_of_the_store(store: &str) {
    let copy = store_copy(store);
    let mount = Mount::new(&copy.path, &["-o", "grace=0,window=60000"]);
    let parent = session_dir(mount.path(), "release-notes");
    std::fs::write(parent.join("fork"), b"42 backed-up\n").expect("fork");
    let status = flush(&parent);
    assert!(
        status.starts_with("pending: 0 session(s)")
            && status.contains("durable: backed-up through seq 43"),
        "{store}: {status}"
    );
    if copy.path.is_file() {
        // The checkpoint moved the fork from sessions.db-wal into sessions.db.
        assert!(
            status.contains(" complete: all "),
            "{store}: the checkpoint did not complete: {status}"
        );
    }

    let backup = TempDir::new("rsync");
    let copied = if copy.path.is_file() {
        let db = backup.path().join("sessions.db");
        rsync(&["-a", &copy.path.to_string_lossy(), &db.to_string_lossy()]);
        db
    } else {
        let root = backup.path().join("store");
        rsync(&[
            "-a",
            &format!("{}/", copy.path.display()),
            &root.to_string_lossy(),
        ]);
        root
    };
    let restored = Mount::new(&copied, &["-o", "grace=0"]);
    let live = tree(mount.path(), false);
    assert!(
        live.keys().any(|p| p.starts_with("backed-up/events")),
        "{store}: the fork is in the live tree"
    );
    let restored_tree = tree(restored.path(), false);
    let differ = differences(&live, &restored_tree);
    assert!(differ.is_empty(), "{store}: the copy differs at {differ:?}");
}

#[test]
fn a_flushed_fork_survives_rsync_of_a_raw_jsonl_store() {
    flushed_fork_survives_a_copy_of_the_store("jsonl");
}

#[test]
fn a_flushed_fork_survives_rsync_of_a_zstd_jsonl_store() {
    flushed_fork_survives_a_copy_of_the_store("jsonl-zstd");
}

#[test]
fn a_flushed_fork_survives_rsync_of_the_sqlite_database_file_alone() {
    flushed_fork_survives_a_copy_of_the_store("sqlite17");
}

/// `rsync -a` of a mount copies every file whole, control files included (it
/// copies as many bytes as stat reports), and a second run finds nothing to
/// transfer.
fn rsync_of_a_mount_is_stable(store: &str) {
    let copy = store_copy(store);
    let mount = Mount::new(&copy.path, &["-o", "grace=0,window=60000"]);
    let parent = session_dir(mount.path(), "release-notes");
    std::fs::write(parent.join("fork"), b"42 backed-up\n").expect("fork");
    flush(&parent);
    let backup = TempDir::new("rsync");
    let source = format!("{}/", mount.path().display());
    let target = backup.path().join("tree");
    rsync(&["-a", &source, &target.to_string_lossy()]);
    let second = rsync(&[
        "-a",
        "--itemize-changes",
        "--stats",
        &source,
        &target.to_string_lossy(),
    ]);
    let changes: Vec<&str> = second
        .lines()
        .take_while(|l| !l.is_empty())
        .filter(|l| !l.starts_with("Number of files:"))
        .collect();
    assert!(
        changes.is_empty() && second.contains("Number of regular files transferred: 0"),
        "{store}: the second rsync transferred something:\n{second}"
    );
    let differ = differences(&tree(&target, true), &tree(mount.path(), true));
    assert!(
        differ.is_empty(),
        "{store}: the copy does not hold what reads of the mount return at {differ:?}"
    );
}

#[test]
fn a_second_rsync_of_a_raw_jsonl_mount_transfers_nothing() {
    rsync_of_a_mount_is_stable("jsonl");
}

#[test]
fn a_second_rsync_of_a_zstd_jsonl_mount_transfers_nothing() {
    rsync_of_a_mount_is_stable("jsonl-zstd");
}

#[test]
fn a_second_rsync_of_an_sqlite_mount_transfers_nothing() {
    rsync_of_a_mount_is_stable("sqlite17");
}

/// A parent's flush makes durable a pending child, the child's pending fork, and
/// a fork of a child the Harness wrote; a sibling lineage's fork stays pending.
fn a_parent_flush_covers_grandchildren(store: &str) {
    let copy = store_copy(store);
    let mount = Mount::new(&copy.path, &["-o", "grace=0,window=60000"]);
    let parent = session_dir(mount.path(), "release-notes");
    std::fs::write(parent.join("fork"), b"42 child\n").expect("fork");
    let child = session_dir(mount.path(), "child");
    std::fs::write(child.join("fork"), b"42 grandchild\n").expect("fork of the pending child");
    // release-notes-alt is the Harness's own child of release-notes.
    let stored_child = session_dir(mount.path(), "release-notes-alt");
    std::fs::write(stored_child.join("fork"), b"42 stored-grandchild\n")
        .expect("fork of a stored child");
    std::fs::write(
        session_dir(mount.path(), "ledger-chat").join("fork"),
        b"115 elsewhere\n",
    )
    .expect("fork of another lineage");

    let before = std::fs::read_to_string(parent.join("flush")).expect("cat flush");
    assert!(
        before.starts_with("pending: 3 session(s)"),
        "{store}: {before}"
    );
    let status = flush(&parent);
    assert!(
        status.starts_with("pending: 0 session(s)"),
        "{store}: {status}"
    );
    for id in ["child", "grandchild", "stored-grandchild"] {
        assert!(
            status.contains(&format!("durable: {id} through seq 43")),
            "{store}: {id} is not durable: {status}"
        );
    }
    let root = std::fs::read_to_string(mount.path().join("flush")).expect("cat flush");
    assert!(
        root.starts_with("pending: 1 session(s)") && root.contains("pending-session: elsewhere"),
        "{store}: {root}"
    );
    // The child's own flush status covers its fork only.
    let below = std::fs::read_to_string(child.join("flush")).expect("cat flush");
    assert!(
        below.contains("durable: grandchild") && !below.contains("durable: stored-grandchild"),
        "{store}: {below}"
    );
    drop(mount);

    // What the flush wrote is in the store; the window never closed for the rest.
    let fresh = Mount::new(&copy.path, &["-o", "grace=0"]);
    for id in ["child", "grandchild", "stored-grandchild"] {
        assert!(
            session_dir(fresh.path(), id).join("header.json").exists(),
            "{store}: {id} is not in the store"
        );
    }
}

#[test]
fn a_parent_flush_covers_grandchildren_on_zstd_jsonl() {
    a_parent_flush_covers_grandchildren("jsonl-zstd");
}

#[test]
fn a_parent_flush_covers_grandchildren_on_sqlite() {
    a_parent_flush_covers_grandchildren("sqlite17");
}

/// A Harness connection in a read transaction holds back the frames written
/// after its snapshot: the flush still returns at once, `cat flush` says the
/// checkpoint is incomplete, and the next flush completes it.
#[test]
fn a_reader_holds_the_checkpoint_back_without_blocking_the_flush() {
    let copy = store_copy("sqlite17");
    let mount = Mount::new(&copy.path, &["-o", "grace=0,window=60000"]);
    let parent = session_dir(mount.path(), "release-notes");
    let harness = rusqlite::Connection::open(&copy.path).expect("open as the Harness would");
    harness.execute_batch("BEGIN").expect("begin");
    let sessions: i64 = harness
        .query_row("SELECT count(*) FROM sessions", [], |row| row.get(0))
        .expect("a read starts the snapshot");
    assert!(sessions > 0);

    std::fs::write(parent.join("fork"), b"42 held-back\n").expect("fork");
    let started = std::time::Instant::now();
    let status = flush(&parent);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the flush waited on the reader (the busy timeout is 5 s)"
    );
    assert!(
        status.contains("durable: held-back through seq 43") && status.contains(" incomplete: "),
        "{status}"
    );

    harness.execute_batch("COMMIT").expect("end the read");
    let status = flush(&parent);
    assert!(status.contains(" complete: all "), "{status}");
}
