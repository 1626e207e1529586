//! Damaged and unusual stores, built from fixture files by truncating or flipping
//! bytes: a torn tail shows the complete prefix, committed damage shows an `error`
//! file, one bad session never breaks the others, and the store is never modified.

mod common;

use std::path::{Path, PathBuf};

use common::{Mount, TempDir, copy_tree, fixtures, session_dir, snapshot};

fn events_in(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("events"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// A store holding one copied session artifact, plus a healthy neighbour.
fn store_with(artifact: &str, damage: impl FnOnce(&Path)) -> (TempDir, PathBuf) {
    let dir = TempDir::new("damage");
    let root = dir.path().join("store");
    let source = fixtures().join("stores").join(artifact);
    let relative = source
        .strip_prefix(
            fixtures()
                .join("stores")
                .join(artifact.split('/').next().expect("store")),
        )
        .expect("relative")
        .to_path_buf();
    copy_tree(&source, &root.join(&relative));
    let neighbour = if artifact.starts_with("jsonl-zstd") {
        "jsonl-zstd/_no-cwd"
    } else {
        "jsonl/_no-cwd"
    };
    copy_tree(
        &fixtures().join("stores").join(neighbour),
        &root.join("_no-cwd"),
    );
    let file = std::fs::read_dir(root.join(&relative))
        .expect("session dir")
        .next()
        .expect("file")
        .expect("entry")
        .path();
    damage(&file);
    (dir, root)
}

const NOTES: &str = "notes\\2026 · 50% «draft» 🦀~";

fn assert_neighbour_readable(mount: &Path) {
    let surface = session_dir(mount, NOTES).join("surface.jsonl");
    assert!(
        std::fs::read_to_string(&surface).is_ok_and(|s| !s.is_empty()),
        "the other session stays readable"
    );
}

#[test]
fn a_truncated_zstd_frame_is_a_torn_tail() {
    // Cut the last frame of a clean zstd log at several points inside it.
    let clean =
        fixtures().join("stores/jsonl-zstd/--workspace-orbit--/turn-outcomes/session.jsonl.zstd");
    let bytes = std::fs::read(&clean).expect("read");
    let expected_events = common::expected("sessions/turn-outcomes.json")["eventCount"]
        .as_u64()
        .expect("count") as usize;
    // Find the last frame's start by scanning frames.
    let mut starts = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        starts.push(at);
        match sessionfs::store::zstd_frames::scan_frame(&bytes[at..]) {
            sessionfs::store::zstd_frames::FrameScan::Complete(len) => at += len,
            other => panic!("fixture frame: {other:?}"),
        }
    }
    let last = *starts.last().expect("frames");
    for cut in [last + 3, last + 7, bytes.len() - 1] {
        let (dir, root) = store_with("jsonl-zstd/--workspace-orbit--/turn-outcomes", |file| {
            std::fs::write(file, &bytes[..cut]).expect("truncate");
        });
        let before = snapshot(dir.path());
        let mount = Mount::new(&root, &["-o", "grace=0"]);
        let session = session_dir(mount.path(), "turn-outcomes");
        assert!(
            !session.join("error").exists(),
            "cut at {cut}: a torn final frame is not an error"
        );
        let shown = events_in(&session);
        assert!(
            shown < expected_events + 3 && shown > 0,
            "cut at {cut}: {shown} events"
        );
        assert!(std::fs::read_to_string(session.join("transcript.md")).is_ok());
        assert_neighbour_readable(mount.path());
        drop(mount);
        assert_eq!(before, snapshot(dir.path()), "the store was not modified");
    }
}

#[test]
fn a_flipped_byte_in_a_complete_frame_refuses_the_session_only() {
    let clean =
        fixtures().join("stores/jsonl-zstd/--workspace-orbit--/turn-outcomes/session.jsonl.zstd");
    let bytes = std::fs::read(&clean).expect("read");
    let frame0 = match sessionfs::store::zstd_frames::scan_frame(&bytes) {
        sessionfs::store::zstd_frames::FrameScan::Complete(len) => len,
        other => panic!("{other:?}"),
    };
    // A byte inside the second frame's payload, and the last checksum byte.
    for (offset, label) in [(frame0 + 12, "payload"), (bytes.len() - 1, "checksum")] {
        let (dir, root) = store_with("jsonl-zstd/--workspace-orbit--/turn-outcomes", |file| {
            let mut damaged = bytes.clone();
            damaged[offset] ^= 0x55;
            std::fs::write(file, damaged).expect("write");
        });
        let before = snapshot(dir.path());
        let mount = Mount::new(&root, &["-o", "grace=0"]);
        let session = session_dir(mount.path(), "turn-outcomes");
        let error = std::fs::read_to_string(session.join("error"))
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        assert!(
            error.starts_with("corrupt Zstandard session log: "),
            "{label}: {error}"
        );
        assert!(
            error.contains("session.jsonl.zstd"),
            "{label}: names the file"
        );
        assert!(
            session.join("header.json").exists(),
            "{label}: the header frame is intact"
        );
        let err = std::fs::read(session.join("surface.jsonl")).expect_err("no derived views");
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
        assert_neighbour_readable(mount.path());
        drop(mount);
        assert_eq!(before, snapshot(dir.path()), "the store was not modified");
    }
}

#[test]
fn garbage_in_raw_jsonl_is_torn_at_the_tail_and_corrupt_before_a_turn_end() {
    let clean = fixtures().join("stores/jsonl/--workspace-orbit--/turn-outcomes/session.jsonl");
    let text = std::fs::read(&clean).expect("read");
    let lines: Vec<&[u8]> = text.split(|b| *b == b'\n').collect();
    // Garbage as the very last line: torn, the rest is shown.
    let (_dir, root) = store_with("jsonl/--workspace-orbit--/turn-outcomes", |file| {
        let mut damaged = text.clone();
        damaged.extend_from_slice(b"{\"type\":\"turn/start\",,,\n");
        std::fs::write(file, damaged).expect("write");
    });
    let mount = Mount::new(&root, &["-o", "grace=0"]);
    let session = session_dir(mount.path(), "turn-outcomes");
    assert!(!session.join("error").exists());
    assert_eq!(events_in(&session), 123);
    drop(mount);
    // Garbage in the middle, turn/end lines after it: corrupt, naming the line.
    let (_dir, root) = store_with("jsonl/--workspace-orbit--/turn-outcomes", |file| {
        let mut damaged: Vec<u8> = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            if i == 10 {
                damaged.extend_from_slice(b"not json at all");
            } else {
                damaged.extend_from_slice(line);
            }
            if i + 1 < lines.len() {
                damaged.push(b'\n');
            }
        }
        std::fs::write(file, damaged).expect("write");
    });
    let mount = Mount::new(&root, &["-o", "grace=0"]);
    let error = std::fs::read_to_string(session_dir(mount.path(), "turn-outcomes").join("error"))
        .expect("error");
    assert!(
        error.starts_with("corrupt session log: unparsable committed event at line 10"),
        "{error}"
    );
    assert_neighbour_readable(mount.path());
}

#[test]
fn one_id_in_two_artifacts_is_shown_once_naming_both() {
    let dir = TempDir::new("dup");
    let root = dir.path().join("store");
    copy_tree(
        &fixtures().join("stores/jsonl/_no-cwd"),
        &root.join("_no-cwd"),
    );
    copy_tree(
        &fixtures().join("stores/jsonl-zstd/_no-cwd"),
        &root.join("other/_no-cwd-copy"),
    );
    // Same session, both encodings, in two project directories.
    std::fs::rename(root.join("other/_no-cwd-copy"), root.join("--elsewhere--")).expect("move");
    std::fs::remove_dir(root.join("other")).expect("rmdir");
    let mount = Mount::new(&root, &["-o", "grace=0"]);
    let names = common::session_names(mount.path());
    assert_eq!(names.len(), 1, "one directory for the id: {names:?}");
    let error =
        std::fs::read_to_string(session_dir(mount.path(), NOTES).join("error")).expect("error");
    assert!(
        error.contains("/_no-cwd/") && error.contains("/session.jsonl;"),
        "names the raw log: {error}"
    );
    assert!(
        error.contains("/--elsewhere--/") && error.contains("/session.jsonl.zstd"),
        "names the zstd log: {error}"
    );
}

#[test]
fn a_foreign_sqlite_database_is_refused_at_mount_time() {
    let dir = TempDir::new("foreign");
    let db = dir.path().join("other.db");
    let connection = rusqlite::Connection::open(&db).expect("db");
    connection
        .execute_batch("CREATE TABLE t (x); PRAGMA user_version = 3;")
        .expect("schema");
    drop(connection);
    let mnt = TempDir::new("mnt");
    let out = std::process::Command::new(common::binary())
        .arg("-f")
        .arg(&db)
        .arg(mnt.path())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not a DeepSeek Harness session database"),
        "{stderr}"
    );
}
