//! Issue 25's writer-safety figure: while forks of a 69,030-event session are
//! flushed through a mount, a writer configured like the Harness's (its own
//! connection, busy timeout 0, deferred `BEGIN` that reads the schema and its
//! tail before it writes, a commit every 25 ms and a flush-style commit every
//! 200 ms) makes 1,000 commits. Prints how many failed, how many forks were
//! flushed meanwhile, and the longest time sessionfs held the WAL write lock
//! while the writer was connected (seen with `F_GETLK` on the `-shm` file,
//! which reports only other processes' locks, so this process's writer never
//! counts).
//!
//! `cargo build --release --bin sessionfs && cargo run --release --example
//! writer_safety [-- --dir PATH]`. Must run as root (it mounts).

#[allow(dead_code)]
#[path = "bench/mount.rs"]
mod mount;

#[path = "../tests/common/harness_writer.rs"]
mod harness_writer;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use harness_writer::{BIG, BIG_EVENTS, HarnessWriter, WRITER_SESSION, big_log};
use rusqlite::Connection;
use sessionfs::model::header::SessionHeader;
use sessionfs::store::Writer;
use sessionfs::store::sqlite::{SqliteStore, initialise};

const COMMITS: u64 = 1_000;
/// The WAL write lock's byte in `-shm`.
const WAL_WRITE_LOCK: i64 = 120;

/// A fresh schema-17 database holding the big session and the writer's own.
fn store(dir: &Path) -> PathBuf {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("store dir");
    let db = dir.join("sessions.db");
    let connection = Connection::open(&db).expect("create database");
    connection
        .execute_batch("PRAGMA journal_mode = WAL")
        .expect("WAL");
    initialise(&connection, "writer-safety").expect("schema");
    drop(connection);
    let store = SqliteStore::open(&db).expect("open store");
    let header = SessionHeader::new(BIG, 1_772_000_000_000);
    store.create(&header, &big_log()).expect("big session");
    store
        .create(&SessionHeader::new(WRITER_SESSION, 1_772_000_000_000), &[])
        .expect("writer's session");
    db
}

/// Whether another process holds the WAL write lock now.
fn write_locked(shm: &File) -> bool {
    // SAFETY: an all-zero flock is a valid value to fill in.
    let mut probe: libc::flock = unsafe { std::mem::zeroed() };
    probe.l_type = libc::F_WRLCK as libc::c_short;
    probe.l_whence = libc::SEEK_SET as libc::c_short;
    probe.l_start = WAL_WRITE_LOCK;
    probe.l_len = 1;
    // SAFETY: a valid descriptor and a flock for F_GETLK to fill in.
    let asked = unsafe { libc::fcntl(shm.as_raw_fd(), libc::F_GETLK, &mut probe) };
    asked == 0 && probe.l_type != libc::F_UNLCK as libc::c_short
}

/// The longest span sessionfs held the write lock, polled every 50 µs: at
/// least (first to last sighting of one lock) and at most (first sighting to
/// the first poll that saw it free, which a descheduled poller stretches).
fn run_lock_watch(db: &Path, stop: Arc<AtomicBool>) -> (Duration, Duration) {
    let mut shm = db.as_os_str().to_owned();
    shm.push("-shm");
    let shm = File::open(shm).expect("-shm");
    let (mut at_least, mut at_most) = (Duration::ZERO, Duration::ZERO);
    let mut held: Option<(Instant, Instant)> = None;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        match (write_locked(&shm), held) {
            (true, None) => held = Some((now, now)),
            (true, Some((first, _))) => held = Some((first, now)),
            (false, Some((first, last))) => {
                at_least = at_least.max(last - first);
                at_most = at_most.max(now - first);
                held = None;
            }
            (false, None) => {}
        }
        thread::sleep(Duration::from_micros(50));
    }
    (at_least, at_most)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = match args.as_slice() {
        [flag, dir] if flag == "--dir" => PathBuf::from(dir),
        [] => PathBuf::from("/dev/shm/sessionfs-writer-safety"),
        _ => {
            eprintln!("usage: writer_safety [--dir PATH]");
            std::process::exit(2);
        }
    };
    let binary = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/sessionfs");
    let db = store(&dir.join("store"));
    let log = dir.join("sessionfs.log");
    let mount = mount::Mount::new(&binary, &db, &dir.join("mnt"), "", &log);
    let parent = dir.join("mnt").join(sessionfs::fs::mount_name(BIG));
    let stop = Arc::new(AtomicBool::new(false));
    let watch = thread::spawn({
        let (db, stop) = (db.clone(), stop.clone());
        move || run_lock_watch(&db, stop)
    });
    // Connected before the first fork, as the Harness is.
    let connection = HarnessWriter::connect(&db);
    // The lock watch ends with the writer: a fork still being written after
    // its last commit holds the lock with no one to get in the way of.
    let writer = thread::spawn({
        let stop = stop.clone();
        move || {
            let ran = connection.run(|attempted| attempted >= COMMITS);
            stop.store(true, Ordering::Relaxed);
            ran
        }
    });
    let started = Instant::now();
    let mut forks = 0;
    let mut flush_longest = Duration::ZERO;
    while !writer.is_finished() {
        std::fs::write(
            parent.join("fork"),
            format!("{} fork-{forks}\n", BIG_EVENTS - 1),
        )
        .expect("fork");
        let flushing = Instant::now();
        std::fs::write(dir.join("mnt/flush"), b"\n").expect("flush");
        flush_longest = flush_longest.max(flushing.elapsed());
        forks += 1;
    }
    let (_, failures) = writer.join().expect("writer");
    let (at_least, at_most) = watch.join().expect("lock watch");
    let took = started.elapsed();
    mount.finish();
    println!("writer safety (issue 25), a {BIG_EVENTS}-event session, release build");
    println!(
        "  writer commits                 {COMMITS} over {:.1} s (every 25 ms, a flush every 200 ms)",
        took.as_secs_f64()
    );
    println!("  failed writer commits          {}", failures.len());
    println!("  forks flushed meanwhile        {forks}");
    println!(
        "  longest write lock, sessionfs  {:.2} ms to {:.2} ms (polled every 50 µs)",
        at_least.as_secs_f64() * 1e3,
        at_most.as_secs_f64() * 1e3
    );
    println!(
        "  slowest fork + flush           {:.2} s",
        flush_longest.as_secs_f64()
    );
    for failure in failures.iter().take(5) {
        println!("  {failure}");
    }
}
