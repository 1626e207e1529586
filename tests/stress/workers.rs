//! Who loads the mount: readers that stat, read and list at random, the
//! Harness's writer appending turns, a forker writing `fork` and `flush`, and a
//! watcher of the sessionfs process's memory. Each records what it met in the
//! shared [`Findings`] and stops when [`Shared::stop`] is set (the writer runs
//! for a given time instead, on the scenario's own thread).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use super::invariants::{
    Findings, check_events_listing, check_root_listing, check_session_listing, checked_read,
};
use super::session_log::{Tail, write_turn};
use crate::common::{Rng, session_dir};

/// What a reader timed.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub enum Op {
    Stat,
    Read,
    Readdir,
}

/// What the workers share.
pub struct Shared {
    pub mount: PathBuf,
    stop: AtomicBool,
    /// Session directory names in the mount root, refreshed by root listings.
    names: RwLock<Arc<Vec<String>>>,
    /// Event file names per session, refreshed by `events/` listings.
    events: Mutex<HashMap<String, Arc<Vec<String>>>>,
    pub findings: Findings,
}

impl Shared {
    /// The mount at `mount`, whose root lists `names` (its sessions) now.
    pub fn new(mount: &Path, names: Vec<String>) -> Shared {
        Shared {
            mount: mount.to_path_buf(),
            stop: AtomicBool::new(false),
            names: RwLock::new(Arc::new(names)),
            events: Mutex::default(),
            findings: Findings::default(),
        }
    }

    /// Tells every worker to finish its current operation and return.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Until stopped: a readdir (20%), a stat (35%) or a checked read (45%) of a
/// random session's file. Returns each operation with its latency in µs.
pub fn reader(shared: Arc<Shared>, mut rng: Rng) -> Vec<(Op, u32)> {
    let mut latencies = Vec::with_capacity(1 << 16);
    while !shared.stopped() {
        let names = shared.names.read().unwrap().clone();
        let session = names[rng.index(names.len())].clone();
        let roll = rng.below(100);
        let start = Instant::now();
        let op = if roll < 20 {
            readdir(&shared, &mut rng, &session);
            Op::Readdir
        } else if roll < 55 {
            let path = pick_file(&shared, &mut rng, &session);
            if let Err(e) = std::fs::metadata(&path) {
                shared.findings.errno(&path, "stat", &e);
            }
            Op::Stat
        } else {
            let path = pick_file(&shared, &mut rng, &session);
            checked_read(&shared.findings, &session, &path);
            Op::Read
        };
        latencies.push((
            op,
            start.elapsed().as_micros().min(u128::from(u32::MAX)) as u32,
        ));
    }
    latencies
}

fn list(findings: &Findings, path: &Path) -> Option<Vec<String>> {
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) => {
            findings.errno(path, "opendir", &e);
            return None;
        }
    };
    let mut names = Vec::new();
    for entry in entries {
        match entry {
            Ok(e) => names.push(e.file_name().into_string().expect("UTF-8 names")),
            Err(e) => {
                findings.errno(path, "readdir", &e);
                return None;
            }
        }
    }
    Some(names)
}

/// One listing, checked: the root (which refreshes the names readers pick
/// from), a session's `events/` (which refreshes its event names), the session
/// directory, or its `children/` with every link read.
fn readdir(shared: &Shared, rng: &mut Rng, session: &str) {
    let findings = &shared.findings;
    let dir = shared.mount.join(session);
    match rng.below(4) {
        0 => {
            let Some(names) = list(findings, &shared.mount) else {
                return;
            };
            let mut sessions: Vec<String> = names
                .into_iter()
                .filter(|n| !crate::common::ROOT_OWN.contains(&n.as_str()))
                .collect();
            check_root_listing(findings, &sessions);
            sessions.sort();
            *shared.names.write().unwrap() = Arc::new(sessions);
        }
        1 => {
            let Some(names) = list(findings, &dir.join("events")) else {
                return;
            };
            check_events_listing(findings, session, &names);
            shared
                .events
                .lock()
                .unwrap()
                .insert(session.to_string(), Arc::new(names));
        }
        2 => {
            if let Some(names) = list(findings, &dir) {
                check_session_listing(findings, session, &names);
            }
        }
        _ => {
            let children = dir.join("children");
            for child in list(findings, &children).unwrap_or_default() {
                let link = children.join(&child);
                if let Err(e) = std::fs::read_link(&link) {
                    findings.errno(&link, "readlink", &e);
                }
            }
        }
    }
}

/// A file of a session to stat or read: one of the generated files, or (half
/// the time) an event file from the last listing of its `events/`.
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
                    dir.join("events").join(&names[rng.index(names.len())])
                }
                _ => dir.join("header.json"),
            }
        }
    }
}

/// What the writer appended.
pub struct Written {
    pub turns: u64,
    /// zstd frames: one per turn, two when the turn was left open between them.
    pub batches: u64,
}

/// For `run`: a turn to a random session of `tails` every 20–50 ms, a third
/// of them in two batches with the turn open in between.
pub fn writer(store: &Path, tails: &mut [Tail], mut rng: Rng, run: Duration) -> Written {
    let start = Instant::now();
    let mut written = Written {
        turns: 0,
        batches: 0,
    };
    while start.elapsed() < run {
        let i = rng.index(tails.len());
        let split = rng.below(3) == 0;
        write_turn(store, &mut tails[i], written.turns, split);
        written.batches += 1 + u64::from(split);
        written.turns += 1;
        std::thread::sleep(Duration::from_millis(20 + rng.below(30)));
    }
    written
}

/// What the forker made.
pub struct Forked {
    /// Each child with the boundary it was forked at.
    pub made: Vec<(String, u64)>,
    pub errors: Vec<String>,
    pub flushes: u32,
}

/// Until stopped, every 150–300 ms: an unnamed fork of one of `boundaries`
/// (a session and a stable turn end of it) or, a third of the time, of a child
/// made earlier at its own boundary; the child is found by name in the
/// parent's `fork` status. Every fourth fork is followed by a root `flush`.
pub fn forker(shared: Arc<Shared>, boundaries: Vec<(&'static str, u64)>, mut rng: Rng) -> Forked {
    let mut forked = Forked {
        made: Vec::new(),
        errors: Vec::new(),
        flushes: 0,
    };
    let mut n = 0u64;
    while !shared.stopped() {
        n += 1;
        let (parent, boundary) = if forked.made.is_empty() || rng.below(3) != 0 {
            let (id, b) = rng.pick(&boundaries);
            (id.to_string(), b)
        } else {
            forked.made[rng.index(forked.made.len())].clone()
        };
        match fork(&shared.mount, &parent, boundary, &forked.made) {
            Ok(child) => forked.made.push((child, boundary)),
            Err(e) => forked.errors.push(e),
        }
        if n.is_multiple_of(4) {
            match std::fs::write(shared.mount.join("flush"), b"\n") {
                Ok(()) => forked.flushes += 1,
                Err(e) => forked.errors.push(format!("flush: {e}")),
            }
        }
        std::thread::sleep(Duration::from_millis(150 + rng.below(150)));
    }
    forked
}

/// Forks `parent` through `boundary`; the new child's name, which is not one
/// of `made`.
fn fork(
    mount: &Path,
    parent: &str,
    boundary: u64,
    made: &[(String, u64)],
) -> Result<String, String> {
    let fork = session_dir(mount, parent).join("fork");
    std::fs::write(&fork, format!("{boundary}\n"))
        .map_err(|e| format!("fork of {parent} at {boundary}: {e}"))?;
    let status = std::fs::read_to_string(&fork).unwrap_or_default();
    let prefix = format!("fork: through seq {boundary} -> ");
    let known: BTreeSet<&str> = made.iter().map(|(c, _)| c.as_str()).collect();
    status
        .lines()
        .filter_map(|l| l.strip_prefix(prefix.as_str()))
        .find(|c| !known.contains(c))
        .map(str::to_string)
        .ok_or_else(|| format!("fork of {parent} at {boundary}: no new child in {status:?}"))
}

/// Until stopped, samples the resident memory of process `pid` every 50 ms;
/// returns the largest sample, in KiB.
pub fn memory_watcher(shared: Arc<Shared>, pid: u32) -> u64 {
    let mut peak = vm_rss_kib(pid).unwrap_or(0);
    while !shared.stopped() {
        peak = peak.max(vm_rss_kib(pid).unwrap_or(0));
        std::thread::sleep(Duration::from_millis(50));
    }
    peak
}

/// The resident memory of process `pid`, in KiB.
pub fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
