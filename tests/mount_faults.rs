//! Issue #8, faults: `kill -9` of sessionfs at random points while it forks
//! and flushes, over and over, and unmounting (plain, lazy, by signal) while
//! readers hold files open and a fork waits in the write-behind window. After
//! every crash a fresh mount must find each session that was durable intact and
//! each child it finds complete.
//!
//! `kill -9` kills the process, not the machine: the kernel keeps what was
//! written, so this checks that no crash point leaves a partial child or touches
//! an existing session, not what survives a power cut.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{
    Mount, Rng, digest, event_names, events, is_mounted, read_json, session_dir, snapshot,
    store_copy,
};
use serde_json::Value;

/// What a session looks like through a mount, as hashes of its views.
fn fingerprint(dir: &Path) -> Vec<(String, u64)> {
    [
        "header.json",
        "surface.jsonl",
        "index.jsonl",
        "transcript.md",
        "error",
    ]
    .iter()
    .map(|f| {
        (
            f.to_string(),
            std::fs::read(dir.join(f)).map(|b| digest(&b)).unwrap_or(0),
        )
    })
    .collect()
}

/// The logical content of every session in an SQLite store: a digest of its row
/// and of its event rows, by id.
fn sqlite_rows(db: &Path) -> BTreeMap<String, u64> {
    let connection = rusqlite::Connection::open(db).expect("open the database");
    let mut out = BTreeMap::new();
    let mut sessions = connection
        .prepare("SELECT * FROM sessions ORDER BY id")
        .expect("sessions");
    let columns = sessions.column_count();
    let rows: Vec<(String, String)> = sessions
        .query_map([], |row| {
            let id: String = row.get(0)?;
            let cells: Vec<rusqlite::types::Value> =
                (0..columns).map(|i| row.get(i)).collect::<Result<_, _>>()?;
            Ok((id, format!("{cells:?}")))
        })
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    let mut select = connection
        .prepare("SELECT * FROM events WHERE session_id = ?1 ORDER BY seq")
        .expect("events");
    let event_columns = select.column_count();
    for (id, session_row) in rows {
        let events: Vec<String> = select
            .query_map([&id], |row| {
                let cells: Vec<rusqlite::types::Value> = (0..event_columns)
                    .map(|i| row.get(i))
                    .collect::<Result<_, _>>()?;
                Ok(format!("{cells:?}"))
            })
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        out.insert(id, digest(format!("{session_row}{events:?}").as_bytes()));
    }
    out
}

/// A parent the loop forks from: its events and the turn ends it may fork at.
struct Parent {
    id: &'static str,
    events: Vec<Value>,
    turn_ends: Vec<u64>,
}

/// A child the loop asked for.
#[derive(Clone, Debug)]
struct Asked {
    child: String,
    parent: usize,
    boundary: u64,
}

/// Checks a child read through a fresh mount: complete, and the parent's prefix
/// plus the end-seed marker.
fn check_child(mount: &Path, asked: &Asked, parent: &Parent) -> Result<(), String> {
    let dir = session_dir(mount, &asked.child);
    if dir.join("error").exists() {
        return Err(format!(
            "{}: shown as unreadable: {}",
            asked.child,
            std::fs::read_to_string(dir.join("error")).unwrap_or_default()
        ));
    }
    let header = read_json(&dir.join("header.json"));
    if header["id"] != asked.child.as_str()
        || header["parentSession"] != parent.id
        || header["seedLength"] != asked.boundary + 1
    {
        return Err(format!("{}: header {header}", asked.child));
    }
    let got = events(&dir);
    if got.len() as u64 != asked.boundary + 2 {
        return Err(format!(
            "{}: {} events, expected {}",
            asked.child,
            got.len(),
            asked.boundary + 2
        ));
    }
    for (i, (g, p)) in got
        .iter()
        .zip(&parent.events)
        .take(asked.boundary as usize + 1)
        .enumerate()
    {
        if g != p {
            return Err(format!(
                "{}: event {i} differs from the parent's",
                asked.child
            ));
        }
    }
    let marker = &got[asked.boundary as usize + 1];
    if marker["type"] != "session/end-seed" || marker["seq"] != asked.boundary + 1 {
        return Err(format!("{}: last event {marker}", asked.child));
    }
    Ok(())
}

fn is_disconnect(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOTCONN) | Some(libc::ECONNABORTED) | Some(libc::ENODEV)
    )
}

fn wait_dead(pid: u32, limit: Duration) {
    let start = Instant::now();
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.is_empty() || stat.contains(") Z ") {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "sessionfs {pid} survived SIGKILL for {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Files a crashed write left behind: temporary files and session directories without a log.
fn leftovers(root: &Path) -> (usize, usize) {
    let mut tmp = 0;
    let mut empty = 0;
    let Ok(projects) = std::fs::read_dir(root) else {
        return (0, 0);
    };
    for project in projects.flatten().filter(|p| p.path().is_dir()) {
        for session in std::fs::read_dir(project.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let files: Vec<String> = std::fs::read_dir(session.path())
                .into_iter()
                .flatten()
                .flatten()
                .map(|f| f.file_name().to_string_lossy().into_owned())
                .collect();
            tmp += files.iter().filter(|f| f.ends_with(".tmp")).count();
            if !files
                .iter()
                .any(|f| f == "session.jsonl" || f == "session.jsonl.zstd")
            {
                empty += 1;
            }
        }
    }
    (tmp, empty)
}

fn kill_during_fork_and_flush(store_name: &str, iterations: u32, budget: Duration) {
    let copy = store_copy(store_name);
    let is_sqlite = copy.path.extension().is_some_and(|e| e == "db");
    let mut rng = Rng::seeded("faults");

    // The baseline: every fixture session's views, and the parents' events.
    let (baseline, parents) = {
        let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
        let names: Vec<String> = std::fs::read_dir(mount.path())
            .expect("root")
            .map(|e| e.expect("e").file_name().into_string().expect("u"))
            .filter(|n| !common::ROOT_OWN.contains(&n.as_str()))
            .collect();
        let baseline: BTreeMap<String, Vec<(String, u64)>> = names
            .iter()
            .map(|n| (n.clone(), fingerprint(&mount.path().join(n))))
            .collect();
        let parents: Vec<Parent> = ["release-notes", "ledger-chat", "gateway-resume"]
            .into_iter()
            .map(|id| {
                let events = events(&session_dir(mount.path(), id));
                let turn_ends = events
                    .iter()
                    .filter(|e| e["type"] == "turn/end")
                    .map(|e| e["seq"].as_u64().expect("seq"))
                    .collect();
                Parent {
                    id,
                    events,
                    turn_ends,
                }
            })
            .collect();
        (baseline, parents)
    };
    let parents = Arc::new(parents);
    // Bytes (JSONL) or rows (SQLite) that must never change once durable.
    let durable_bytes = |copy: &common::StoreCopy| -> BTreeMap<String, u64> {
        if is_sqlite {
            sqlite_rows(&copy.path)
        } else {
            snapshot(&copy.path)
                .into_iter()
                .filter(|(p, _)| !p.to_string_lossy().ends_with(".tmp"))
                .map(|(p, b)| (p.to_string_lossy().into_owned(), digest(&b)))
                .collect()
        }
    };
    let mut durable: BTreeMap<String, u64> = durable_bytes(&copy);
    let fixture_artifacts = durable.len();

    let mut verified: BTreeSet<String> = BTreeSet::new();
    let mut promised: Vec<Asked> = Vec::new();
    let mut all_asked: BTreeMap<String, Asked> = BTreeMap::new();
    let (mut accepted_total, mut flushes_total, mut found_total) = (0usize, 0usize, 0usize);
    let mut kill_points = Vec::new();
    let start = Instant::now();
    let mut done = 0;
    for iteration in 0..iterations {
        if start.elapsed() > budget {
            break;
        }
        let window = rng.pick(&[1u64, 5, 20, 100]);
        let mount = Mount::new(&copy.path, &["-o", &format!("grace=0,window={window}")]);
        let pid = mount.pid();
        let stop = Arc::new(AtomicBool::new(false));
        let worker = {
            let root = mount.path().to_path_buf();
            let parents = parents.clone();
            let stop = stop.clone();
            let mut rng = Rng(rng.next());
            std::thread::spawn(move || {
                let mut accepted: Vec<Asked> = Vec::new();
                let mut promised = 0usize;
                let mut flushes = 0usize;
                let mut other_errors = Vec::new();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let parent = rng.index(parents.len());
                    let ends = &parents[parent].turn_ends;
                    let boundary = rng.pick(ends);
                    let child = format!("k{iteration:02}-{n:03}");
                    n += 1;
                    match std::fs::write(
                        session_dir(&root, parents[parent].id).join("fork"),
                        format!("{boundary} {child}\n"),
                    ) {
                        Ok(()) => accepted.push(Asked {
                            child,
                            parent,
                            boundary,
                        }),
                        Err(e) if is_disconnect(&e) => break,
                        Err(e) => other_errors.push(format!("fork {child}: {e}")),
                    }
                    if rng.below(3) == 0 {
                        let before = accepted.len();
                        match std::fs::write(root.join("flush"), b"\n") {
                            Ok(()) => {
                                promised = before;
                                flushes += 1;
                            }
                            Err(e) if is_disconnect(&e) => break,
                            Err(e) => other_errors.push(format!("flush: {e}")),
                        }
                    }
                }
                (accepted, promised, flushes, other_errors)
            })
        };
        let delay = Duration::from_millis(rng.below(250));
        std::thread::sleep(delay);
        kill_points.push(delay.as_millis() as u64);
        // SAFETY: kill(2) on our own child process.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        wait_dead(pid, Duration::from_secs(5));
        stop.store(true, Ordering::Relaxed);
        let (accepted, promised_count, flushes, other_errors) = worker.join().expect("worker");
        drop(mount);
        assert!(
            other_errors.is_empty(),
            "iteration {iteration}: {other_errors:?}"
        );
        accepted_total += accepted.len();
        flushes_total += flushes;
        promised.extend(accepted[..promised_count].iter().cloned());
        for asked in &accepted {
            all_asked.insert(asked.child.clone(), asked.clone());
        }

        // What was durable before is intact, byte for byte (or row for row).
        let now = durable_bytes(&copy);
        for (key, hash) in &durable {
            assert_eq!(
                now.get(key),
                Some(hash),
                "{store_name}, iteration {iteration}: durable {key} changed or vanished after kill -9 at {delay:?}"
            );
        }
        // A fresh mount loads the store: fixture sessions look as before, every
        // promised child is there, and every child there is complete.
        let fresh = Mount::new(&copy.path, &["-o", "grace=0"]);
        for (name, print) in &baseline {
            assert_eq!(
                &fingerprint(&fresh.path().join(name)),
                print,
                "{store_name}, iteration {iteration}: {name} changed"
            );
        }
        let present: BTreeSet<String> = std::fs::read_dir(fresh.path())
            .expect("root")
            .map(|e| e.expect("e").file_name().into_string().expect("u"))
            .filter(|n| !common::ROOT_OWN.contains(&n.as_str()) && !baseline.contains_key(n))
            .collect();
        for asked in &promised {
            assert!(
                present.contains(&asked.child),
                "{store_name}, iteration {iteration}: {} was flushed before the kill but is gone",
                asked.child
            );
        }
        for name in &present {
            let asked = all_asked
                .get(name)
                .unwrap_or_else(|| panic!("{store_name}: an unknown session {name} appeared"));
            if verified.insert(name.clone()) {
                check_child(fresh.path(), asked, &parents[asked.parent]).unwrap_or_else(|e| {
                    panic!("{store_name}, iteration {iteration}, kill at {delay:?}: {e}")
                });
            } else {
                assert_eq!(
                    event_names(&session_dir(fresh.path(), name)).len() as u64,
                    asked.boundary + 2,
                    "{name} stays complete"
                );
            }
        }
        found_total = present.len();
        drop(fresh);
        // Everything present now is durable from here on.
        durable = durable_bytes(&copy);
        done += 1;
    }
    let (tmp, empty) = if is_sqlite {
        (0, 0)
    } else {
        leftovers(&copy.path)
    };
    let extra = if is_sqlite {
        String::new()
    } else {
        format!("; leftovers: {tmp} temporary files, {empty} session directories without a log")
    };
    eprintln!(
        "faults: {store_name}: {done} kill -9 iterations in {:.1?} (kill after {kill_points:?} ms); {accepted_total} forks accepted, {flushes_total} flushes returned, {} children promised durable, {found_total} children in the store ({} artifacts before){extra}",
        start.elapsed(),
        promised.len(),
        fixture_artifacts
    );
    assert!(done >= 5, "only {done} iterations ran");
    assert!(
        found_total > 0,
        "no child ever became durable: the loop tested nothing"
    );
}

#[test]
fn kill_9_during_fork_and_flush_on_zstd() {
    kill_during_fork_and_flush("jsonl-zstd", 20, Duration::from_secs(40));
}

#[test]
fn kill_9_during_fork_and_flush_on_sqlite17() {
    kill_during_fork_and_flush("sqlite17", 20, Duration::from_secs(40));
}

// ---- unmounting --------------------------------------------------------------

/// `sessionfs -f` with its stderr kept in a file and info logging on.
fn captured(store: &Path, options: &[&str]) -> Mount {
    Mount::builder(store)
        .options(options)
        .env("RUST_LOG", "info")
        .capture_stderr()
        .start()
}

fn umount(path: &Path, flags: i32) -> Result<(), i32> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path.
    let rc = unsafe {
        if flags == 0 {
            libc::umount(c.as_ptr())
        } else {
            libc::umount2(c.as_ptr(), flags)
        }
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(-1))
    }
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// Reads what is left through a held descriptor; describes the outcome.
fn read_rest(file: &mut std::fs::File) -> String {
    let mut rest = Vec::new();
    match file.read_to_end(&mut rest) {
        Ok(0) => "EOF".into(),
        Ok(n) => format!("{n} more bytes"),
        Err(e) => format!("error {e}"),
    }
}

fn child_in_store(store: &Path, id: &str) -> bool {
    if store.extension().is_some_and(|e| e == "db") {
        sqlite_rows(store).contains_key(id)
    } else {
        std::fs::read_dir(store).expect("root").flatten().any(|p| {
            p.path().join(id).join("session.jsonl.zstd").exists()
                || p.path().join(id).join("session.jsonl").exists()
        })
    }
}

#[test]
fn umount_with_open_readers_and_a_pending_fork() {
    let copy = store_copy("jsonl-zstd");
    let mut mount = captured(&copy.path, &["-o", "grace=0,window=60000"]);
    let pid = mount.pid();
    let session = session_dir(mount.path(), "release-notes");
    let mut transcript =
        std::fs::File::open(session.join("transcript.md")).expect("open transcript");
    let mut head = [0u8; 100];
    transcript.read_exact(&mut head).expect("read the start");
    let mut header = std::fs::File::open(session.join("header.json")).expect("open header");
    std::fs::write(session.join("fork"), b"42 pending-at-umount\n").expect("fork");
    assert!(
        !child_in_store(&copy.path, "pending-at-umount"),
        "the child waits in the window"
    );

    let plain = umount(mount.path(), 0);
    eprintln!(
        "umount: plain umount with two open files: {plain:?} (EBUSY is {})",
        libc::EBUSY
    );
    assert_eq!(plain, Err(libc::EBUSY), "a busy mount is not unmounted");
    assert!(alive(pid) && is_mounted(mount.path()));
    let lazy = umount(mount.path(), libc::MNT_DETACH);
    assert_eq!(lazy, Ok(()), "umount -l detaches");
    assert!(!is_mounted(mount.path()), "detached at once");
    std::thread::sleep(Duration::from_millis(500));
    let after_detach = (read_rest(&mut transcript), read_rest(&mut header));
    let still_alive = alive(pid);
    eprintln!(
        "umount: after umount -l, the held transcript.md read gives {}, header.json {}; sessionfs alive: {still_alive}; child durable: {}",
        after_detach.0,
        after_detach.1,
        child_in_store(&copy.path, "pending-at-umount")
    );
    assert!(
        !after_detach.0.starts_with("error") && !after_detach.1.starts_with("error"),
        "held files keep working after a lazy unmount"
    );
    assert!(
        still_alive,
        "the kernel keeps the connection while files are open"
    );
    drop(transcript);
    drop(header);
    let status = mount.exited_within(Duration::from_secs(10));
    let stderr = mount.stderr();
    eprintln!(
        "umount: after the last file closed, sessionfs exited with {status:?}; stderr:\n{stderr}"
    );
    assert!(
        status.is_some(),
        "sessionfs exits once the detached mount's last file closes"
    );
    assert!(status.unwrap().success());
    assert!(
        child_in_store(&copy.path, "pending-at-umount"),
        "the pending child is written at shutdown"
    );
    assert!(!stderr.contains("not written"), "{stderr}");
    let fresh = Mount::new(&copy.path, &["-o", "grace=0"]);
    assert_eq!(
        event_names(&session_dir(fresh.path(), "pending-at-umount")).len(),
        44,
        "the child is complete"
    );
}

#[test]
fn a_fork_name_the_store_cannot_hold_is_refused_and_pending_forks_are_written_at_umount() {
    let copy = store_copy("jsonl-zstd");
    let mut mount = captured(&copy.path, &["-o", "grace=0,window=60000"]);
    let session = session_dir(mount.path(), "release-notes");
    // 52 × é escapes to 260 bytes: more than a directory name can hold.
    let unwritable = "\u{e9}".repeat(52);
    let err = std::fs::write(session.join("fork"), format!("42 {unwritable}\n"))
        .expect_err("refused before it is accepted");
    assert_eq!(err.raw_os_error(), Some(libc::ENAMETOOLONG));
    std::fs::write(session.join("fork"), b"42 written-at-umount\n").expect("fork");
    let start = Instant::now();
    assert_eq!(
        umount(mount.path(), 0),
        Ok(()),
        "nothing is open: a plain umount works"
    );
    let status = mount.exited_within(Duration::from_secs(10));
    eprintln!(
        "umount with a pending child: sessionfs exited with {status:?} {:.1?} after umount",
        start.elapsed()
    );
    assert!(status.is_some(), "sessionfs exits after umount");
    assert!(
        child_in_store(&copy.path, "written-at-umount"),
        "the pending child is written at shutdown"
    );
}

#[test]
fn sigterm_with_an_open_reader() {
    let copy = store_copy("sqlite17");
    let mut mount = captured(&copy.path, &["-o", "grace=0,window=60000"]);
    let pid = mount.pid();
    let session = session_dir(mount.path(), "release-notes");
    let mut held = std::fs::File::open(session.join("surface.jsonl")).expect("open");
    std::fs::write(session.join("fork"), b"42 pending-at-sigterm\n").expect("fork");
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(500));
    let detached = !is_mounted(mount.path());
    let first = (alive(pid), child_in_store(&copy.path, "pending-at-sigterm"));
    // A second SIGTERM, as a service manager might send.
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(500));
    let second_alive = alive(pid);
    let read = read_rest(&mut held);
    eprintln!(
        "sigterm: with a file open: detached {detached}; after SIGTERM alive {}, child durable {}; after a second SIGTERM alive {second_alive}; the held file reads {read}",
        first.0, first.1
    );
    assert!(detached, "SIGTERM detaches a busy mount lazily");
    drop(held);
    let status = mount.exited_within(Duration::from_secs(10));
    let stderr = mount.stderr();
    eprintln!("sigterm: after the file closed: exit {status:?}; stderr:\n{stderr}");
    assert!(
        status.is_some_and(|s| s.success()),
        "sessionfs exits cleanly once the last file closes"
    );
    assert!(
        child_in_store(&copy.path, "pending-at-sigterm"),
        "the pending child is written at shutdown"
    );
}

#[test]
fn sigterm_then_sigkill_keeps_pending_forks() {
    let copy = store_copy("jsonl-zstd");
    let mount = captured(&copy.path, &["-o", "grace=0,window=60000"]);
    let pid = mount.pid();
    let session = session_dir(mount.path(), "release-notes");
    let held = std::fs::File::open(session.join("surface.jsonl")).expect("open");
    std::fs::write(session.join("fork"), b"42 pending-at-stop\n").expect("fork");
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    wait_dead(pid, Duration::from_secs(5));
    drop(held);
    drop(mount);
    let durable = child_in_store(&copy.path, "pending-at-stop");
    eprintln!(
        "sigterm then sigkill 2 s later, a file held open: the pending child is durable: {durable}"
    );
    assert!(
        durable,
        "a fork accepted before SIGTERM survives the SIGKILL that follows"
    );
}
