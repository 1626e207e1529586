//! A mount that lives beside a running Harness (issue #12): open descriptors
//! read on into appended bytes, new sessions are found at once, deleted ones
//! leave, I/O trouble is not reported as damage, a daemon unmounts only its own
//! mount, and changes show within a second without polling the store.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::harness::{append_jsonl, session_home};
use common::{Mount, session_dir, store_copy, within};
use serde_json::{Value, json};

/// A user turn after seq `last`, whose message text is `needle`.
fn user_turn(last: u64, turn: u64, needle: &str) -> Vec<Value> {
    let time = 1_790_000_000_000i64;
    vec![
        json!({"type": "turn/start", "seq": last + 1, "time": time, "data": {"turn": turn}}),
        json!({"type": "step/start", "seq": last + 2, "time": time + 1, "data": {"turn": turn, "step": 1}}),
        json!({"type": "user/message", "seq": last + 3, "time": time + 2, "data": {"content": [{"type": "text", "text": needle}], "source": {"kind": "user"}, "role": "user", "id": format!("u-{needle}")}, "surfaceOp": "append"}),
    ]
}

fn event_count(dir: &Path) -> u64 {
    std::fs::read_dir(dir.join("events"))
        .expect("events")
        .count() as u64
}

fn listed(mount: &Path) -> Vec<String> {
    std::fs::read_dir(mount)
        .expect("list root")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect()
}

/// A copy of session `from`'s log stored as a new session `id` beside it.
fn clone_session(store: &Path, from: &str, id: &str) -> PathBuf {
    let source = session_home(store, from);
    let text = std::fs::read_to_string(source.join("session.jsonl")).expect("read");
    let renamed = text.replacen(
        &format!("\"id\":\"{from}\""),
        &format!("\"id\":\"{id}\""),
        1,
    );
    let dir = source.parent().expect("project").join(id);
    std::fs::create_dir(&dir).expect("mkdir");
    let log = dir.join("session.jsonl");
    std::fs::write(&log, renamed).expect("write");
    log
}

#[test]
fn an_open_descriptor_reads_on_into_appended_bytes() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=60"]);
    let dir = session_dir(mount.path(), "release-notes");
    let last = event_count(&dir) - 1;
    let mut transcript = std::fs::File::open(dir.join("transcript.md")).expect("open");
    let mut seen = Vec::new();
    transcript.read_to_end(&mut seen).expect("read to EOF");
    let needle = "read on into this 5d1e";
    append_jsonl(&copy.path, "release-notes", &user_turn(last, 90, needle));
    // The very next read, as `tail -f` or a reader at EOF makes it.
    transcript.read_to_end(&mut seen).expect("read on");
    assert!(
        String::from_utf8_lossy(&seen).contains(needle),
        "the descriptor read on into the appended turn"
    );
    let whole = std::fs::read(dir.join("transcript.md")).expect("read again");
    assert_eq!(seen, whole, "the descriptor read what a fresh open reads");
}

#[test]
fn twenty_new_sessions_stated_at_once_are_all_found() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=60"]);
    // The mount has listed the store once, as a user's first `ls` does.
    assert!(listed(mount.path()).contains(&"release-notes".to_string()));
    let ids: Vec<String> = (0..20).map(|n| format!("burst-{n:02}")).collect();
    for id in &ids {
        clone_session(&copy.path, "release-notes", id);
    }
    let found: Vec<bool> = std::thread::scope(|scope| {
        let stats: Vec<_> = ids
            .iter()
            .map(|id| {
                let path = mount.path().join(id).join("header.json");
                scope.spawn(move || std::fs::metadata(path).is_ok())
            })
            .collect();
        stats.into_iter().map(|s| s.join().expect("stat")).collect()
    });
    let missing: Vec<&String> = ids
        .iter()
        .zip(&found)
        .filter(|(_, f)| !**f)
        .map(|(id, _)| id)
        .collect();
    assert!(
        missing.is_empty(),
        "not found by the first stat: {missing:?}"
    );
}

#[test]
fn a_deleted_session_leaves_while_open_files_keep_their_snapshot() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=60"]);
    let dir = session_dir(mount.path(), "release-notes");
    let mut transcript = std::fs::File::open(dir.join("transcript.md")).expect("open");
    let mut head = vec![0; 100];
    transcript.read_exact(&mut head).expect("read a first part");
    let before = std::fs::read(dir.join("transcript.md")).expect("whole");
    let held = std::fs::File::open(&dir).expect("hold the session directory");
    assert!(listed(mount.path()).contains(&"release-notes".to_string()));

    std::fs::remove_dir_all(session_home(&copy.path, "release-notes")).expect("delete");
    within(
        Duration::from_secs(1),
        "the deleted session leaving the listing",
        || !listed(mount.path()).contains(&"release-notes".to_string()),
    );
    let mut rest = Vec::new();
    transcript
        .read_to_end(&mut rest)
        .expect("read on after the delete");
    head.extend(rest);
    assert_eq!(head, before, "an open file keeps reading its snapshot");

    // Whatever a held directory still shows, it claims no damage.
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::io::AsRawFd;
    let name = std::ffi::CString::new(Path::new("error").as_os_str().as_bytes()).expect("name");
    // SAFETY: a valid directory descriptor and NUL-terminated name.
    let fd = unsafe { libc::openat(held.as_raw_fd(), name.as_ptr(), libc::O_RDONLY) };
    if fd >= 0 {
        // SAFETY: a descriptor openat just returned, owned from here on.
        let mut error = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let mut text = String::new();
        let _ = error.read_to_string(&mut text);
        assert!(
            !text.contains("restore") && !text.contains("corrupt") && !text.contains("damaged"),
            "a vanished session is not damaged: {text}"
        );
    }
}

#[test]
fn a_session_deleted_and_created_again_shows_its_new_content() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=60"]);
    let dir = session_dir(mount.path(), "release-notes");
    let old = std::fs::read_to_string(dir.join("transcript.md")).expect("old transcript");
    let home = session_home(&copy.path, "release-notes");
    let header = std::fs::read_to_string(home.join("session.jsonl"))
        .expect("log")
        .lines()
        .next()
        .expect("header")
        .to_string();
    std::fs::remove_dir_all(&home).expect("delete");
    std::fs::create_dir(&home).expect("create again");
    let needle = "a new life under an old name 0b7a";
    let mut text = format!("{header}\n");
    for event in user_turn(0, 1, needle) {
        let mut event = event;
        event["seq"] = json!(event["seq"].as_u64().expect("seq") - 1);
        text.push_str(&format!("{event}\n"));
    }
    std::fs::write(home.join("session.jsonl"), text).expect("write");
    within(Duration::from_secs(2), "the new content", || {
        std::fs::read_to_string(dir.join("transcript.md")).is_ok_and(|t| t.contains(needle))
    });
    assert_eq!(event_count(&dir), 3, "only the new log's events");
    assert!(!old.is_empty());
}

/// Sets a file's modification time `age` into the past.
fn age_file(path: &Path, age: Duration) {
    let file = std::fs::File::options()
        .write(true)
        .open(path)
        .expect("open to age");
    file.set_modified(std::time::SystemTime::now() - age)
        .expect("set mtime");
}

#[test]
fn sqlite_own_wal_files_are_not_activity() {
    let copy = store_copy("crash/sqlite17");
    age_file(&copy.path, Duration::from_secs(3 * 86_400));
    // A grace far longer than the test: only the database's age can close the turn.
    let mount = Mount::new(&copy.path, &["-o", "grace=120"]);
    let dir = session_dir(mount.path(), "drill-a-two-unstarted-tools");
    // Another session is read first, so the mount's own -wal and -shm exist.
    let _ =
        std::fs::read(session_dir(mount.path(), "drill-b2-parallel-closers").join("index.jsonl"));
    let index = std::fs::read_to_string(dir.join("index.jsonl")).expect("index");
    assert!(
        index.contains("\"synthetic\":true"),
        "a database untouched for days is shown repaired at once:\n{index}"
    );
}

#[test]
fn a_busy_database_is_not_damage_and_is_retried() {
    let copy = store_copy("sqlite17");
    // In rollback-journal mode a writer's exclusive lock keeps readers out.
    rusqlite::Connection::open(&copy.path)
        .expect("db")
        .execute_batch("PRAGMA journal_mode = DELETE")
        .expect("journal mode");
    let mount = Mount::new(&copy.path, &["-o", "grace=60"]);
    assert!(listed(mount.path()).contains(&"ledger-chat".to_string()));
    let holder = rusqlite::Connection::open(&copy.path).expect("db");
    holder
        .busy_timeout(Duration::from_secs(10))
        .expect("timeout");
    // Held past sessionfs's busy timeout (5 s).
    holder.execute_batch("BEGIN EXCLUSIVE").expect("lock");
    let dir = session_dir(mount.path(), "ledger-chat");
    let error = std::fs::read_to_string(dir.join("error"));
    let still_listed = listed(mount.path()).contains(&"ledger-chat".to_string());
    holder.execute_batch("ROLLBACK").expect("unlock");
    drop(holder);
    let error = error.expect("the error file explains the busy database");
    assert!(error.contains("locked"), "{error}");
    assert!(
        !error.contains("restore") && !error.contains("damaged"),
        "a busy database is not damage: {error}"
    );
    assert!(
        still_listed,
        "a store that cannot be listed now removes nothing"
    );
    // The next access reads again.
    within(
        Duration::from_secs(1),
        "the view once the lock is gone",
        || !dir.join("error").exists() && std::fs::read(dir.join("surface.jsonl")).is_ok(),
    );
}

#[test]
fn a_log_that_cannot_be_read_now_is_not_damage_and_is_retried() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=60"]);
    let _ = listed(mount.path());
    let log = session_home(&copy.path, "release-notes").join("session.jsonl");
    let saved = log.with_extension("saved");
    // The log vanishes for a while, as during a restore or a move of the store.
    std::fs::rename(&log, &saved).expect("move away");
    let dir = session_dir(mount.path(), "release-notes");
    let error = std::fs::read_to_string(dir.join("error")).expect("error file");
    assert!(
        !error.contains("restore") && !error.contains("damaged") && !error.contains("corrupt"),
        "a log that cannot be read now is not damage: {error}"
    );
    std::fs::rename(&saved, &log).expect("put back");
    within(
        Duration::from_secs(1),
        "the view once the log reads again",
        || !dir.join("error").exists() && std::fs::read(dir.join("transcript.md")).is_ok(),
    );
}

/// The mounts stacked on `path`, bottom first.
fn mounts_at(path: &Path) -> Vec<sessionfs::mountinfo::MountEntry> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    sessionfs::mountinfo::parse(&text)
        .into_iter()
        .filter(|e| e.mount_point == path)
        .collect()
}

/// A second `sessionfs -f` mounted on a path that already has a mount; ended
/// (and whatever it left detached) when dropped.
struct Stacked {
    child: std::process::Child,
    path: PathBuf,
}

impl Stacked {
    fn new(store: &Path, path: &Path) -> (Stacked, sessionfs::mountinfo::MountEntry) {
        let before = mounts_at(path).len();
        let child = std::process::Command::new(common::binary())
            .args(["-f", "-o", "grace=60"])
            .arg(store)
            .arg(path)
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        let stacked = Stacked {
            child,
            path: path.to_path_buf(),
        };
        within(Duration::from_secs(10), "the stacked mount", || {
            mounts_at(path).len() > before
        });
        let entry = mounts_at(path).pop().expect("top");
        (stacked, entry)
    }
}

impl Drop for Stacked {
    fn drop(&mut self) {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && !matches!(self.child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let path = std::ffi::CString::new(self.path.as_os_str().as_encoded_bytes()).expect("path");
        // Whatever is left on the path (a dead connection) is detached.
        while !mounts_at(&self.path).is_empty() {
            // SAFETY: a valid NUL-terminated path.
            if unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) } != 0 {
                break;
            }
        }
    }
}

/// Waits for a child process (not reaped) to end: gone or a zombie.
fn wait_exited(pid: u32) {
    within(Duration::from_secs(10), "the daemon's exit", || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|s| s.trim_start().starts_with('Z'))
        })
    });
}

#[test]
fn unmounting_a_stacked_mount_leaves_the_one_below() {
    let below = store_copy("jsonl");
    let above = store_copy("sqlite17");
    let mount = Mount::new(&below.path, &["-o", "grace=60"]);
    let path = mount.path().canonicalize().expect("path");
    let own = mounts_at(&path).pop().expect("the first mount");
    let (mut stacked, _) = Stacked::new(&above.path, &path);
    let cpath = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::umount(cpath.as_ptr()) }, 0, "umount once");
    within(Duration::from_secs(10), "the upper daemon's exit", || {
        matches!(stacked.child.try_wait(), Ok(Some(_)))
    });
    assert_eq!(
        mounts_at(&path),
        vec![own],
        "the mount below is still there, untouched"
    );
    assert!(listed(&path).contains(&"release-notes".to_string()));
}

#[test]
fn a_detached_daemon_ends_without_unmounting_the_new_mount() {
    let first = store_copy("jsonl");
    let second = store_copy("sqlite17");
    let mount = Mount::new(&first.path, &["-o", "grace=60"]);
    let path = mount.path().canonicalize().expect("path");
    // A file kept open keeps the detached mount's connection alive.
    let open =
        std::fs::File::open(session_dir(&path, "release-notes").join("header.json")).expect("open");
    let cpath = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(
        unsafe { libc::umount2(cpath.as_ptr(), libc::MNT_DETACH) },
        0
    );
    let (_stacked, entry) = Stacked::new(&second.path, &path);
    // SAFETY: signalling the first mount's daemon, our child.
    unsafe { libc::kill(mount.pid() as i32, libc::SIGTERM) };
    wait_exited(mount.pid());
    assert_eq!(mounts_at(&path), vec![entry], "the new mount is untouched");
    assert!(listed(&path).contains(&"ledger-chat".to_string()));
    drop(open);
}

/// The inotify watches a process holds, from its descriptors' fdinfo.
fn inotify_watches(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .expect("fdinfo")
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .map(|info| {
            info.lines()
                .filter(|l| l.starts_with("inotify wd:"))
                .count()
        })
        .sum()
}

#[test]
fn a_removed_session_name_leads_nowhere_within_a_second_without_a_listing() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=60"]);
    let dir = session_dir(mount.path(), "release-notes");
    assert!(dir.join("header.json").exists());
    std::fs::remove_dir_all(session_home(&copy.path, "release-notes")).expect("delete");
    within(
        Duration::from_secs(1),
        "the removed session's name failing",
        || std::fs::metadata(&dir).is_err(),
    );
}

#[test]
fn watches_follow_the_sessions_in_use() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=60"]);
    let projects = std::fs::read_dir(&copy.path).expect("root").count();
    within(
        Duration::from_secs(2),
        "the store's directories watched",
        || inotify_watches(mount.pid()) == projects + 1,
    );
    let used = ["release-notes", "gateway-resume", "ops-audit-log"];
    for id in used {
        std::fs::read(session_dir(mount.path(), id).join("index.jsonl")).expect("read");
    }
    assert_eq!(
        inotify_watches(mount.pid()),
        projects + 1 + used.len(),
        "one watch per session in use"
    );
    // A change in a used session shows at once, with nothing polled.
    let dir = session_dir(mount.path(), "gateway-resume");
    let last = event_count(&dir) - 1;
    let transcript = dir.join("transcript.md");
    let needle = "watched, not polled 77c1";
    append_jsonl(&copy.path, "gateway-resume", &user_turn(last, 50, needle));
    within(Duration::from_secs(1), "the appended turn", || {
        std::fs::read_to_string(&transcript).is_ok_and(|t| t.contains(needle))
    });
}

#[test]
fn a_tiny_cache_keeps_few_watches() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=60,cache=0"]);
    let projects = std::fs::read_dir(&copy.path).expect("root").count();
    for id in [
        "release-notes",
        "gateway-resume",
        "ops-audit-log",
        "ledger-chat",
    ] {
        std::fs::read(session_dir(mount.path(), id).join("index.jsonl")).expect("read");
    }
    let watches = inotify_watches(mount.pid());
    assert!(
        (projects + 1..=projects + 2).contains(&watches),
        "the store's directories are watched, views dropped from the cache are not: {watches} watches"
    );
}

#[test]
fn the_polling_fallback_shows_changes_within_a_second() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=60,poll"]);
    let dir = session_dir(mount.path(), "release-notes");
    let last = event_count(&dir) - 1;
    assert_eq!(inotify_watches(mount.pid()), 0, "-o poll watches nothing");
    let needle = "polled, not watched 3e0a";
    append_jsonl(&copy.path, "release-notes", &user_turn(last, 90, needle));
    within(
        Duration::from_secs(1),
        "the appended turn in events/",
        || event_count(&dir) == last + 4,
    );
}
