//! What must hold while the mount is under load, and once it is quiet.
//!
//! "Consistent" follows `SessionFs::read` (src/fs/): an open file serves the
//! snapshot taken at `open`, and a file that only grew may be read further
//! through the same handle (a prefix extension, for `tail -f`). So for one file
//! descriptor:
//! * event files and `header.json` never change under a handle: a whole read
//!   has exactly the size `fstat` gave right after `open`, and parses;
//! * `transcript.md`, `surface.jsonl` and `index.jsonl` only grow in this run
//!   (no compaction, no crash closers: the grace period outlasts it), so a
//!   whole read is at least as long as `fstat` at open, a second read through
//!   the same descriptor is the same bytes or a longer prefix extension, and
//!   every read is a prefix of the file's final content once the writer stopped;
//! * JSONL files hold whole JSON lines only.
//!
//! Listings: the root lists each name once, `events/` lists seqs 0..n, and a
//! session directory lists its control files.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::session_log::Tail;
use crate::common::{digest, read_json, session_dir};

/// Every inconsistency and errno the workers met, and what is checked later.
#[derive(Default)]
pub struct Findings {
    /// Every failure by category: a count and the first few examples.
    failures: Mutex<BTreeMap<&'static str, (u64, Vec<String>)>>,
    errnos: Mutex<BTreeMap<i32, u64>>,
    /// Reads of growing files: (path, length, digest), checked against the final content.
    grown: Mutex<Vec<(PathBuf, usize, u64)>>,
    /// `header.json` reads whose length differs from `fstat` on the same descriptor.
    pub header_size_mismatch: AtomicU64,
    pub reads_beyond_open_size: AtomicU64,
}

impl Findings {
    pub fn fail(&self, category: &'static str, what: String) {
        let mut failures = self.failures.lock().unwrap();
        let entry = failures.entry(category).or_default();
        entry.0 += 1;
        if entry.1.len() < 3 {
            entry.1.push(what);
        }
    }

    pub fn errno(&self, path: &Path, op: &str, e: &std::io::Error) {
        *self
            .errnos
            .lock()
            .unwrap()
            .entry(e.raw_os_error().unwrap_or(-1))
            .or_default() += 1;
        self.fail("errno", format!("{op} {}: {e}", path.display()));
    }

    pub fn errnos(&self) -> BTreeMap<i32, u64> {
        self.errnos.lock().unwrap().clone()
    }

    pub fn failures(&self) -> BTreeMap<&'static str, (u64, Vec<String>)> {
        self.failures.lock().unwrap().clone()
    }
}

fn is_growing(name: &str) -> bool {
    matches!(name, "transcript.md" | "surface.jsonl" | "index.jsonl")
}

/// One whole read, then a second from the start, through one descriptor.
struct Read2 {
    at_open: u64,
    bytes: Vec<u8>,
    again: Vec<u8>,
}

/// One whole read through one descriptor of a file of `session`, checked as
/// the module doc says.
pub fn checked_read(findings: &Findings, session: &str, path: &Path) {
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => return findings.errno(path, "open", &e),
    };
    let at_open = match file.metadata() {
        Ok(m) => m.len(),
        Err(e) => return findings.errno(path, "fstat", &e),
    };
    let mut bytes = Vec::new();
    if let Err(e) = file.read_to_end(&mut bytes) {
        return findings.errno(path, "read", &e);
    }
    let mut again = Vec::new();
    if let Err(e) = file
        .seek(SeekFrom::Start(0))
        .and_then(|_| file.read_to_end(&mut again))
    {
        return findings.errno(path, "re-read", &e);
    }
    let read = Read2 {
        at_open,
        bytes,
        again,
    };
    let is_event = path
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|p| p == "events");
    if is_event {
        check_event(findings, path, &file_name, &read);
    } else if file_name == "header.json" {
        check_header(findings, session, path, &read);
    } else if is_growing(&file_name) {
        check_growing(findings, path, &file_name, &read, &file);
    }
}

/// An event file: the size fstat gave, unchanged, JSON with the seq of its name.
fn check_event(findings: &Findings, path: &Path, file_name: &str, read: &Read2) {
    let Read2 {
        at_open,
        bytes,
        again,
    } = read;
    let len = bytes.len() as u64;
    if len != *at_open {
        findings.fail(
            "event: size differs from fstat",
            format!(
                "{}: read {len} bytes, fstat on the same descriptor said {at_open}",
                path.display()
            ),
        );
    }
    if again != bytes {
        findings.fail(
            "event: changed under one descriptor",
            format!(
                "{}: an event file changed under one descriptor",
                path.display()
            ),
        );
    }
    let seq = file_name
        .split('-')
        .next()
        .and_then(|d| d.parse::<u64>().ok());
    match serde_json::from_slice::<Value>(bytes) {
        Ok(event) if event["seq"].as_u64() == seq && seq.is_some() => {}
        Ok(event) => findings.fail(
            "event: seq differs from name",
            format!(
                "{}: seq {} does not match the name",
                path.display(),
                event["seq"]
            ),
        ),
        Err(e) => findings.fail(
            "event: not JSON",
            format!(
                "{}: not JSON ({e}); {len} bytes, fstat said {at_open}",
                path.display()
            ),
        ),
    }
}

/// `header.json`: unchanged under one descriptor, JSON naming its session.
fn check_header(findings: &Findings, session: &str, path: &Path, read: &Read2) {
    let Read2 {
        at_open,
        bytes,
        again,
    } = read;
    let len = bytes.len() as u64;
    // Linux sends no file handle with fstat's GETATTR, so when the header is
    // rewritten between open and fstat, fstat shows the new size while the
    // descriptor keeps reading the whole snapshot it opened (checked below).
    if len != *at_open {
        findings
            .header_size_mismatch
            .fetch_add(1, Ordering::Relaxed);
    }
    if again != bytes {
        findings.fail(
            "header.json: changed under one descriptor",
            format!(
                "{}: header.json changed under one descriptor",
                path.display()
            ),
        );
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(header) => {
            let shown = header["id"].as_str().map(sessionfs::fs::mount_name);
            if shown.as_deref() != Some(session) {
                findings.fail(
                    "header.json: wrong id",
                    format!(
                        "{}: id {} is shown as {shown:?}, not {session:?}",
                        path.display(),
                        header["id"]
                    ),
                );
            }
        }
        Err(e) => findings.fail(
            "header.json: not JSON",
            format!(
                "{}: not JSON ({e}); {len} bytes, fstat said {at_open}",
                path.display()
            ),
        ),
    }
}

/// A growing file: at least fstat's size, re-read as an extension, whole
/// JSON lines or UTF-8; kept to compare with the final content.
fn check_growing(
    findings: &Findings,
    path: &Path,
    file_name: &str,
    read: &Read2,
    file: &std::fs::File,
) {
    let Read2 {
        at_open,
        bytes,
        again,
    } = read;
    let len = bytes.len() as u64;
    if len < *at_open {
        findings.fail(
            "growing: shorter than fstat at open",
            format!(
                "{}: read {len} bytes, fewer than fstat said at open ({at_open}); fstat after the read: {}",
                path.display(),
                file.metadata().map(|m| m.len()).unwrap_or(0)
            ),
        );
    }
    if len > *at_open {
        findings
            .reads_beyond_open_size
            .fetch_add(1, Ordering::Relaxed);
    }
    if !again.starts_with(bytes) {
        findings.fail(
            "growing: re-read is not an extension",
            format!(
                "{}: a second read through the same descriptor is not an extension of the first",
                path.display()
            ),
        );
    }
    if file_name.ends_with(".jsonl") {
        if !bytes.is_empty() && !bytes.ends_with(b"\n") {
            findings.fail(
                "growing: JSONL ends inside a line",
                format!(
                    "{}: ends inside a line ({len} bytes, fstat said {at_open})",
                    path.display()
                ),
            );
        }
        for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            if serde_json::from_slice::<Value>(line).is_err() {
                findings.fail(
                    "growing: JSONL line is not JSON",
                    format!(
                        "{}: a line is not JSON ({len} bytes, fstat said {at_open})",
                        path.display()
                    ),
                );
                break;
            }
        }
    } else if std::str::from_utf8(bytes).is_err() {
        findings.fail(
            "growing: not UTF-8",
            format!("{}: not UTF-8", path.display()),
        );
    }
    findings
        .grown
        .lock()
        .unwrap()
        .push((path.to_path_buf(), bytes.len(), digest(bytes)));
}

/// One listing of the mount root names each session once.
pub fn check_root_listing(findings: &Findings, sessions: &[String]) {
    let mut seen = BTreeSet::new();
    let twice: Vec<&String> = sessions.iter().filter(|n| !seen.insert(*n)).collect();
    if !twice.is_empty() {
        findings.fail(
            "readdir: root lists a name twice",
            format!(
                "one listing of the root ({} names) has {twice:?} twice",
                sessions.len()
            ),
        );
    }
}

/// A listing of `events/` names the seqs 0..n, each once.
pub fn check_events_listing(findings: &Findings, session: &str, names: &[String]) {
    let mut seqs: Vec<u64> = names
        .iter()
        .filter_map(|n| n.split('-').next()?.parse().ok())
        .collect();
    seqs.sort();
    if seqs.len() != names.len() || seqs.iter().enumerate().any(|(i, s)| *s != i as u64) {
        findings.fail(
            "readdir: events/ not seqs 0..n",
            format!(
                "{session}/events lists {} names that are not seqs 0..{}",
                names.len(),
                names.len()
            ),
        );
    }
}

/// A listing of a session directory names its header and control files.
pub fn check_session_listing(findings: &Findings, session: &str, names: &[String]) {
    for required in ["header.json", "fork", "flush", "children"] {
        if !names.iter().any(|n| n == required) {
            findings.fail(
                "readdir: session dir misses a file",
                format!("{session} lists no {required}"),
            );
        }
    }
}

// ---- once quiet ---------------------------------------------------------------

/// Waits until every written session lists all its events and shows every
/// appended message in transcript.md.
pub fn everything_written_is_visible(root: &Path, tails: &[Tail]) {
    for tail in tails {
        let dir = session_dir(root, tail.id);
        // Attributes are cached for a second (attr_timeout), so a view may lag that long.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let count = std::fs::read_dir(dir.join("events"))
                .map(|d| d.count() as u64)
                .unwrap_or(0);
            let transcript =
                std::fs::read_to_string(dir.join("transcript.md")).expect("transcript");
            let missing = tail
                .needles
                .iter()
                .filter(|n| !transcript.contains(n.as_str()))
                .count();
            if count == tail.next_seq && missing == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: after 5 s, {count} of {} events listed and {missing} of {} messages missing from transcript.md",
                tail.id,
                tail.next_seq,
                tail.needles.len()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Every read of a growing file is a prefix of that file's final content.
pub fn every_read_is_a_prefix_of_the_final_content(findings: &Findings) {
    let mut finals: HashMap<PathBuf, Vec<u8>> = HashMap::new();
    let mut not_prefix = 0usize;
    let grown = std::mem::take(&mut *findings.grown.lock().unwrap());
    for (path, len, hash) in &grown {
        let content = finals.entry(path.clone()).or_insert_with(|| {
            std::fs::read(path).unwrap_or_else(|e| panic!("final read of {}: {e}", path.display()))
        });
        if content.len() < *len || digest(&content[..*len]) != *hash {
            not_prefix += 1;
            findings.fail(
                "growing: not a prefix of the final content",
                format!(
                    "{}: a {len}-byte read is not a prefix of the final content ({} bytes)",
                    path.display(),
                    content.len()
                ),
            );
        }
    }
    eprintln!(
        "stress: {} reads of growing files checked against the final content; {not_prefix} were not a prefix",
        grown.len()
    );
}

/// Every event file of every session parses and carries the seq of its name.
pub fn every_event_file_carries_its_seq(root: &Path) {
    let mut sessions = 0;
    let mut event_files = 0;
    for entry in std::fs::read_dir(root).expect("root") {
        let entry = entry.expect("entry");
        if entry
            .file_name()
            .to_str()
            .is_some_and(|n| crate::common::ROOT_OWN.contains(&n))
        {
            continue;
        }
        sessions += 1;
        let Ok(events) = std::fs::read_dir(entry.path().join("events")) else {
            continue;
        };
        for event in events {
            let event = event.expect("event");
            let name = event.file_name().into_string().expect("u");
            let value = read_json(&event.path());
            event_files += 1;
            assert_eq!(
                value["seq"].as_u64(),
                name.split('-').next().and_then(|d| d.parse().ok()),
                "{}",
                event.path().display()
            );
        }
    }
    eprintln!(
        "stress: final sweep: {sessions} sessions, {event_files} event files, all parse with the seq of their name"
    );
}

/// Every fork child holds its parent's events through the boundary it was made at.
pub fn every_child_has_its_seed(root: &Path, made: &[(String, u64)]) {
    for (child, boundary) in made {
        let header = read_json(&session_dir(root, child).join("header.json"));
        assert_eq!(header["seedLength"], boundary + 1, "{child}");
    }
}
