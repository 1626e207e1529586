//! Issue 25: forks flushed into a live SQLite store never make the Harness's
//! own writes fail. A writer configured like the Harness's (its own
//! connection, busy timeout 0, deferred `BEGIN` that re-reads the schema
//! before it writes, a commit every 25 ms and a flush-style commit every
//! 200 ms) runs while 20 forks of a 69,030-event session are flushed through
//! the mount; meanwhile a lister checks that every child the database lists is
//! whole. Leftovers of a write cut short are removed at the next mount.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::harness_writer::{BIG, BIG_EVENTS, HarnessWriter, TICK, WRITER_SESSION, big_log};
use common::{Mount, TempDir, read_json, session_dir};
use rusqlite::{Connection, OpenFlags};
use sessionfs::model::header::SessionHeader;
use sessionfs::store::Writer;
use sessionfs::store::sqlite::SqliteStore;

const FORKS: usize = 20;

/// A copy of the schema-17 fixture with the big session in it, and the
/// writer's session beside it.
fn big_store(dir: &Path) -> std::path::PathBuf {
    let db = dir.join("sessions.db");
    std::fs::copy(common::fixtures().join("stores/sqlite17/sessions.db"), &db).unwrap();
    let header = SessionHeader {
        cwd: Some("/w".into()),
        ..SessionHeader::new(BIG, 1_772_000_000_000)
    };
    SqliteStore::open(&db)
        .unwrap()
        .create(&header, &big_log())
        .unwrap();
    Connection::open(&db)
        .unwrap()
        .execute(
            "INSERT INTO sessions SELECT ?1, version, created_at, cwd, NULL, NULL, origin, delegation_depth, agent_preset, 'inc-live', 0 FROM sessions WHERE id = 'ledger-chat'",
            [WRITER_SESSION],
        )
        .unwrap();
    db
}

/// Every child the database lists, checked whole, until `stop`.
fn run_lister(db: &Path, stop: Arc<AtomicBool>) -> Vec<String> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY;
    let reader = Connection::open_with_flags(db, flags).unwrap();
    reader.busy_timeout(Duration::from_secs(5)).unwrap();
    let mut partial = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let mut listed = reader
            .prepare("SELECT s.id, (SELECT max(seq) FROM events WHERE session_id = s.id) FROM sessions s WHERE s.id LIKE 'fork-%'")
            .unwrap();
        let children: Vec<(String, Option<i64>)> = listed
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        for (id, last) in children {
            if last != Some(BIG_EVENTS as i64) {
                partial.push(format!("{id} listed with last seq {last:?}"));
            }
        }
        thread::sleep(Duration::from_millis(3));
    }
    partial
}

fn markers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter(|name| name.contains("-sessionfs-pending-"))
        .collect()
}

#[test]
fn forks_flushed_into_a_live_sqlite_store_never_fail_the_harness_writes() {
    let temp = TempDir::new("writer-safety");
    let db = big_store(temp.path());
    let writer = HarnessWriter::connect(&db);
    let mount = Mount::new(&db, &[]);
    let parent = session_dir(mount.path(), BIG);
    assert_eq!(
        read_json(&parent.join("header.json"))["id"],
        BIG,
        "the big session is mounted"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let writing = thread::spawn({
        let stop = stop.clone();
        move || writer.run(|_| stop.load(Ordering::Relaxed))
    });
    let listing = thread::spawn({
        let (stop, db) = (stop.clone(), db.clone());
        move || run_lister(&db, stop)
    });
    let started = Instant::now();
    for n in 0..FORKS {
        std::fs::write(
            parent.join("fork"),
            format!("{} fork-{n}\n", BIG_EVENTS - 1),
        )
        .expect("fork");
        std::fs::write(mount.path().join("flush"), b"\n").expect("flush");
    }
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (commits, failures) = writing.join().unwrap();
    let partial = listing.join().unwrap();
    eprintln!("{FORKS} forks flushed in {took:?}; the writer made {commits} commits");
    assert!(failures.is_empty(), "failed writer commits: {failures:?}");
    assert!(
        commits as f64 >= took.as_secs_f64() / TICK.as_secs_f64() * 0.5,
        "the writer kept committing: {commits}"
    );
    assert!(
        partial.is_empty(),
        "children listed half written: {partial:?}"
    );

    let check = Connection::open_with_flags(&db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let children: i64 = check
        .query_row(
            "SELECT count(*) FROM sessions WHERE id LIKE 'fork-%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(children, FORKS as i64);
    assert!(
        markers(temp.path()).is_empty(),
        "{:?}",
        markers(temp.path())
    );
    let child = session_dir(mount.path(), &format!("fork-{}", FORKS - 1));
    assert_eq!(
        read_json(&child.join("header.json"))["seedLength"],
        BIG_EVENTS
    );
}

#[test]
fn rows_of_an_unfinished_fork_are_removed_at_the_next_mount() {
    let temp = TempDir::new("writer-leftover");
    let db = temp.path().join("sessions.db");
    std::fs::copy(common::fixtures().join("stores/sqlite17/sessions.db"), &db).unwrap();
    // What a crash part-way leaves: rows without their session row, and the
    // marker naming the child.
    let crashed = Connection::open(&db).unwrap();
    crashed.execute_batch("PRAGMA foreign_keys = OFF").unwrap();
    crashed
        .execute(
            "INSERT INTO events SELECT 'cut-short', seq, type, time, data, source_event_seqs, surface_op, ignorable FROM events WHERE session_id = 'ledger-chat'",
            [],
        )
        .unwrap();
    drop(crashed);
    let marker = temp.path().join(format!(
        "sessions.db-sessionfs-pending-{}",
        "cut-short"
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    ));
    std::fs::write(&marker, "cut-short").unwrap();

    let mount = Mount::new(&db, &[]);
    assert!(!session_dir(mount.path(), "cut-short").exists());
    common::within(Duration::from_secs(5), "the leftover rows removed", || {
        !marker.exists()
    });
    let check = Connection::open_with_flags(&db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let rows: i64 = check
        .query_row(
            "SELECT count(*) FROM events WHERE session_id = 'cut-short'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(rows, 0);
    let kept: i64 = check
        .query_row(
            "SELECT count(*) FROM events WHERE session_id = 'ledger-chat'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(kept > 0, "other sessions' rows stay");
}
