//! A SQLite writer configured like the Harness's, and the big session it
//! shares a database with: used by tests/mount_writer_safety.rs and by
//! examples/writer_safety.rs, so the test and the figure measure one writer.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};
use serde_json::{Value, json};
use sessionfs::json::JsonMap;

/// The big session's id and length (six-event turns).
pub const BIG: &str = "big-session";
pub const BIG_EVENTS: u64 = 69_030;
/// The writer's own session, which must exist before it commits.
pub const WRITER_SESSION: &str = "harness-live";
/// The Harness's write-behind cadence: a batch every 25 ms, and every 8th
/// tick (200 ms) a flush-style commit after it.
pub const TICK: Duration = Duration::from_millis(25);
pub const FLUSH_EVERY: u64 = 8;

/// A log of six-event turns, `BIG_EVENTS` events in all.
pub fn big_log() -> Vec<JsonMap> {
    let mut events = Vec::new();
    let time = |seq: usize| 1_772_000_000_000i64 + seq as i64 * 7;
    for turn in 1..=BIG_EVENTS / 6 {
        let bodies = [
            ("turn/start", json!({"turn": turn})),
            ("step/start", json!({"turn": turn, "step": 1})),
            (
                "user/message",
                json!({"content": [{"type": "text", "text": format!("question {turn}")}], "source": {"kind": "user"}, "role": "user", "id": format!("u-{turn}")}),
            ),
            (
                "assistant/message",
                json!({"turn": turn, "step": 1, "message": {"role": "assistant", "content": [{"type": "text", "text": format!("answer {turn}, at some length to fill a page now and then")}], "source": {"kind": "model", "provider": "acme", "model": "m1"}, "id": format!("a-{turn}")}}),
            ),
            ("step/end", json!({"turn": turn, "step": 1})),
            (
                "turn/end",
                json!({"turn": turn, "reason": {"kind": "completed"}}),
            ),
        ];
        for (kind, data) in bodies {
            let seq = events.len();
            let mut event = json!({"type": kind, "seq": seq, "time": time(seq), "data": data});
            if kind.ends_with("/message") {
                event["surfaceOp"] = "append".into();
            }
            let Value::Object(map) = event else {
                unreachable!("json! of an object")
            };
            events.push(map);
        }
    }
    assert_eq!(events.len() as u64, BIG_EVENTS);
    events
}

/// The Harness's connection: its own, busy timeout 0, foreign keys on,
/// synchronous FULL, appending to `WRITER_SESSION`.
pub struct HarnessWriter {
    connection: Connection,
    next_seq: i64,
    shm: PathBuf,
}

impl HarnessWriter {
    pub fn connect(db: &Path) -> HarnessWriter {
        let connection = Connection::open(db).expect("writer connection");
        connection.busy_timeout(Duration::ZERO).expect("timeout");
        connection
            .execute_batch("PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL;")
            .expect("pragmas");
        // SQLite opens the files at the first statement; the Harness has long
        // made one by the time a user forks.
        let _: i64 = connection
            .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
            .expect("first read");
        let mut shm = db.as_os_str().to_owned();
        shm.push("-shm");
        HarnessWriter {
            connection,
            next_seq: 0,
            shm: shm.into(),
        }
    }

    /// One write transaction as the Harness runs it: a deferred `BEGIN`, the
    /// schema and tail read first, then the insert and the revision bump. A
    /// failure names the statement and SQLite's extended result code (5 is
    /// `SQLITE_BUSY`, 517 `SQLITE_BUSY_SNAPSHOT`: a commit of another
    /// connection since this one's read began).
    pub fn commit(&mut self) -> Result<(), String> {
        let c = &self.connection;
        let mut stage = "BEGIN";
        let written = (|| {
            c.execute_batch("BEGIN")?;
            stage = "read";
            let _: i64 = c.query_row("PRAGMA user_version", [], |r| r.get(0))?;
            let _: i64 = c.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
            let _: Option<i64> = c.query_row(
                "SELECT max(seq) FROM events WHERE session_id = ?1",
                [WRITER_SESSION],
                |r| r.get(0),
            )?;
            stage = "INSERT";
            c.execute(
                "INSERT INTO events (session_id, seq, type, time, data) VALUES (?1, ?2, 'session/title', ?3, '{\"title\":\"t\"}')",
                params![WRITER_SESSION, self.next_seq, 1_772_000_000_000i64 + self.next_seq],
            )?;
            stage = "UPDATE";
            c.execute(
                "UPDATE sessions SET revision = revision + 1 WHERE id = ?1",
                [WRITER_SESSION],
            )?;
            stage = "COMMIT";
            c.execute_batch("COMMIT")
        })();
        match written {
            Ok(()) => {
                self.next_seq += 1;
                Ok(())
            }
            Err(e) => {
                let _ = c.execute_batch("ROLLBACK");
                let code = match &e {
                    rusqlite::Error::SqliteFailure(failure, _) => failure.extended_code,
                    _ => 0,
                };
                let holders = write_lock_holders(&self.shm);
                Err(format!("{stage}: {e} (code {code}; {holders})"))
            }
        }
    }

    /// Commits on the Harness's cadence until `done(attempted)`; returns the
    /// commits attempted and the failures with their messages.
    pub fn run(mut self, done: impl Fn(u64) -> bool) -> (u64, Vec<String>) {
        let (mut attempted, mut failures) = (0, Vec::new());
        let start = Instant::now();
        let mut tick = 0u64;
        // A refused commit says how late it began and how long the one
        // before it took (a flush's commit follows its batch's at once).
        let mut previous_took = Duration::ZERO;
        while !done(attempted) {
            let batches = if tick % FLUSH_EVERY == FLUSH_EVERY - 1 {
                2
            } else {
                1
            };
            for _ in 0..batches {
                attempted += 1;
                let began = Instant::now();
                let late = began.saturating_duration_since(start + TICK * tick as u32);
                if let Err(e) = self.commit() {
                    failures.push(format!(
                        "commit {attempted} at {:?}, {late:?} after its tick, the one before took {previous_took:?}: {e}",
                        start.elapsed()
                    ));
                }
                previous_took = began.elapsed();
            }
            tick += 1;
            thread::sleep((start + TICK * tick as u32).saturating_duration_since(Instant::now()));
        }
        (attempted, failures)
    }
}

/// Who holds the WAL write lock (byte 120 of `-shm`) now, from /proc/locks:
/// read, not locked, as a descriptor of ours on `-shm` closed again would
/// drop this process's SQLite locks on it.
fn write_lock_holders(shm: &Path) -> String {
    let Ok(inode) = std::fs::metadata(shm).map(|m| m.ino()) else {
        return "no -shm".into();
    };
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let holders: Vec<String> = locks
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // "1: POSIX ADVISORY WRITE 1234 00:2a:5678 120 120"
            let [_, "POSIX", _, kind, pid, file, start, end] = fields[..] else {
                return None;
            };
            let on_shm = file.rsplit(':').next()?.parse::<u64>().ok()? == inode;
            let (start, end): (u64, u64) = (start.parse().ok()?, end.parse().unwrap_or(u64::MAX));
            if !on_shm || start > 120 || end < 120 {
                return None;
            }
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let whose = if pid == std::process::id().to_string() {
                "this process".to_string()
            } else {
                comm.trim().to_string()
            };
            Some(format!(
                "{kind} by pid {pid} ({whose}{})",
                threads_waiting(pid)
            ))
        })
        .collect();
    if holders.is_empty() {
        "write lock free by the time it was looked for".into()
    } else {
        format!("write lock held: {}", holders.join(", "))
    }
}

/// Where a thread of sessionfs waits when it has nothing to do.
const IDLE_WAITS: [&str; 6] = [
    "0",
    "futex_",
    "do_epoll_wait",
    "poll_schedule_timeout",
    "do_sigtimedwait",
    "fuse_dev_do_read",
];

/// What a running thread does over the next 20 ms: its time on a CPU and
/// waiting for one (`schedstat`, ns), and its page faults (`stat`). A lock
/// held by a thread on the CPU throughout is held by work; one off it, by
/// the machine.
fn running_for(task: &Path) -> String {
    let sample = || {
        let sched = std::fs::read_to_string(task.join("schedstat")).unwrap_or_default();
        let mut ns = sched
            .split_whitespace()
            .map(|v| v.parse::<u64>().unwrap_or(0));
        let (on_cpu, waiting) = (ns.next().unwrap_or(0), ns.next().unwrap_or(0));
        let stat = std::fs::read_to_string(task.join("stat")).unwrap_or_default();
        // minflt is the 8th field after the parenthesised name.
        let faults = stat
            .rsplit(") ")
            .next()
            .and_then(|rest| rest.split(' ').nth(7))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        (on_cpu, waiting, faults)
    };
    let before = sample();
    thread::sleep(Duration::from_millis(20));
    let after = sample();
    format!(
        " (over 20 ms: {:.1} ms on a CPU, {:.1} ms waiting for one, {} page faults)",
        after.0.saturating_sub(before.0) as f64 / 1e6,
        after.1.saturating_sub(before.1) as f64 / 1e6,
        after.2.saturating_sub(before.2)
    )
}

/// What the threads of `pid` that are not running wait on in the kernel
/// (`/proc/PID/task/*/wchan`), and the kernel stack of any in
/// uninterruptible sleep: a lock held across a stall says where it stalls.
fn threads_waiting(pid: &str) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return String::new();
    };
    let mut waiting = Vec::new();
    for task in tasks.flatten() {
        let dir = task.path();
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        let stat = read("stat");
        // The state follows the parenthesised name.
        let state = stat
            .rsplit(") ")
            .next()
            .and_then(|rest| rest.split(' ').next());
        let (comm, wchan) = (read("comm"), read("wchan"));
        match state {
            Some("D") => {
                let stack: Vec<String> =
                    read("stack").lines().take(8).map(str::to_string).collect();
                waiting.push(format!(
                    "{} D in {wchan} [{}]",
                    comm.trim(),
                    stack.join(" | ")
                ));
            }
            Some("R") => waiting.push(format!("{} running{}", comm.trim(), running_for(&dir))),
            _ if !wchan.is_empty() && !IDLE_WAITS.iter().any(|idle| wchan.starts_with(idle)) => {
                waiting.push(format!("{} in {wchan}", comm.trim()));
            }
            _ => {}
        }
    }
    if waiting.is_empty() {
        String::new()
    } else {
        format!("; threads: {}", waiting.join("; "))
    }
}
