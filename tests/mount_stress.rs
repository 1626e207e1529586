//! Issue #8, load: sixteen readers `stat`, `read` and `readdir` a mounted
//! zstd store for a bounded time while a writer appends turns to several
//! sessions (one zstd frame per batch, as the Harness writes) and a forker makes
//! children through `fork` files. Every read is checked against what the same
//! open file descriptor reported, every event file against its name, and the
//! sessionfs process's memory is watched. The harness is in `stress/`:
//! invariants (what "consistent" means), workers, the scenario, and the
//! Harness's side of the store. The other tests here hold one descriptor or one
//! listing across a single change.

mod common;
mod stress;

use std::collections::BTreeSet;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{Mount, session_dir, store_copy};
use serde_json::{Value, json};
use stress::scenario::Scenario;
use stress::session_log::{append_frame, retitle, tail_of};

#[test]
fn sixteen_readers_a_writer_and_forks_stay_consistent() {
    Scenario {
        readers: 16,
        run: Duration::from_secs(10),
        written: &[
            "ledger-chat",
            "release-notes",
            "gateway-resume",
            "turn-outcomes",
            "orbit-debug-tools",
        ],
        forked: &["release-notes", "ledger-chat", "schema-truncation"],
        rss_limit_kib: 300 << 10,
    }
    .run();
}

/// The names of a directory read with `getdents64` and a small buffer, calling
/// `between` after the first batch (so the listing spans several requests).
fn getdents_names(dir: &Path, between: impl FnOnce()) -> Vec<String> {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    assert!(
        fd >= 0,
        "open {}: {}",
        dir.display(),
        std::io::Error::last_os_error()
    );
    let mut names = Vec::new();
    let mut between = Some(between);
    let mut buffer = vec![0u8; 256];
    loop {
        // SAFETY: the buffer is valid for its length; fd is an open directory.
        let n =
            unsafe { libc::syscall(libc::SYS_getdents64, fd, buffer.as_mut_ptr(), buffer.len()) };
        assert!(n >= 0, "getdents64: {}", std::io::Error::last_os_error());
        if n == 0 {
            break;
        }
        let mut at = 0usize;
        while at < n as usize {
            let reclen = u16::from_ne_bytes([buffer[at + 16], buffer[at + 17]]) as usize;
            let name = &buffer[at + 19..at + reclen];
            let end = name.iter().position(|b| *b == 0).unwrap_or(name.len());
            names.push(String::from_utf8_lossy(&name[..end]).into_owned());
            at += reclen;
        }
        if let Some(f) = between.take() {
            f();
        }
    }
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
    names
}

#[test]
fn a_root_listing_returns_each_name_once_while_a_session_appears() {
    let copy = store_copy("jsonl-zstd");
    let mount = Mount::new(&copy.path, &["-o", "grace=600"]);
    let root = mount.path().to_path_buf();
    let before = getdents_names(&root, || {});
    let boundary = tail_of(&root, "release-notes").next_seq - 1;
    // "0early" sorts before every fixture session, so it shifts every position.
    let listed = getdents_names(&root, || {
        std::fs::write(
            session_dir(&root, "release-notes").join("fork"),
            format!("{boundary} 0early\n"),
        )
        .expect("fork");
    });
    let mut seen = BTreeSet::new();
    let twice: Vec<&String> = listed.iter().filter(|n| !seen.insert(*n)).collect();
    let missing: Vec<&String> = before.iter().filter(|n| !listed.contains(n)).collect();
    eprintln!(
        "root listing: {} names before, {} while a session appeared; twice: {twice:?}; missing: {missing:?}",
        before.len(),
        listed.len()
    );
    assert!(
        twice.is_empty(),
        "a name listed twice in one pass: {twice:?}"
    );
    assert!(
        missing.is_empty(),
        "names that existed throughout but were not listed: {missing:?}"
    );
}

fn wait_for_title(path: &Path, title: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .is_none_or(|h| h["title"]["title"] != title)
    {
        assert!(
            Instant::now() < deadline,
            "the title {title:?} never showed in {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Reads a whole file through a descriptor opened earlier; returns (fstat at
/// open, bytes, fstat after the read).
fn read_held(file: &mut std::fs::File, at_open: u64) -> (u64, Vec<u8>, u64) {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).expect("read");
    (at_open, bytes, file.metadata().expect("fstat").len())
}

#[test]
fn header_json_through_a_held_descriptor_is_whole_json_of_its_size() {
    let copy = store_copy("jsonl-zstd");
    let mount = Mount::new(&copy.path, &["-o", "grace=600"]);
    let root = mount.path().to_path_buf();
    let mut tail = tail_of(&root, "release-notes");
    let header = session_dir(&root, "release-notes").join("header.json");
    let long = "a long title that will shortly be replaced by a much shorter one ".repeat(3);
    let mut problems = Vec::new();
    for (from, to) in [(long.as_str(), "short"), ("short", long.as_str())] {
        retitle(&copy.path, &mut tail, from);
        wait_for_title(&header, from);
        let mut held = std::fs::File::open(&header).expect("open");
        let at_open = held.metadata().expect("fstat").len();
        retitle(&copy.path, &mut tail, to);
        // Wait with stat only, so no read fills the page cache with the new bytes:
        // the held descriptor's read then goes to sessionfs with its own handle.
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::metadata(&header).expect("stat").len() == at_open {
            assert!(Instant::now() < deadline, "header.json never changed size");
            std::thread::sleep(Duration::from_millis(50));
        }
        let (at_open, bytes, after) = read_held(&mut held, at_open);
        let parsed = serde_json::from_slice::<Value>(&bytes);
        let title = parsed.as_ref().ok().map(|h| h["title"]["title"].clone());
        eprintln!(
            "header.json held across {:?} -> {:?}: fstat at open {at_open}, read {} bytes, fstat after {after}, parses: {}, title: {title:?}",
            &from[..5.min(from.len())],
            &to[..5.min(to.len())],
            bytes.len(),
            parsed.is_ok()
        );
        if parsed.is_err() {
            problems.push(format!(
                "title {:?} -> {:?}: the read is not JSON ({} bytes; fstat said {at_open})",
                &from[..5],
                &to[..5],
                bytes.len()
            ));
        }
        if bytes.len() as u64 != at_open {
            problems.push(format!(
                "title {:?} -> {:?}: read {} bytes, fstat at open said {at_open}",
                &from[..5],
                &to[..5],
                bytes.len()
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn index_jsonl_through_a_held_descriptor_is_whole_lines_of_its_size() {
    let copy = store_copy("jsonl-zstd");
    let mount = Mount::new(&copy.path, &["-o", "grace=1"]);
    let root = mount.path().to_path_buf();
    let mut tail = tail_of(&root, "release-notes");
    let dir = session_dir(&root, "release-notes");
    let (s, turn) = (tail.next_seq, tail.next_turn);
    append_frame(
        &copy.path,
        tail.id,
        &[
            json!({"type": "turn/start", "seq": s, "time": 1_790_000_000_000i64, "data": {"turn": turn}}),
            json!({"type": "step/start", "seq": s + 1, "time": 1_790_000_000_001i64, "data": {"turn": turn, "step": 1}}),
            json!({"type": "user/message", "seq": s + 2, "time": 1_790_000_000_002i64, "data": {"content": [{"type": "text", "text": "held"}], "source": {"kind": "user"}, "role": "user", "id": "u-held"}, "surfaceOp": "append"}),
        ],
    );
    tail.next_seq += 3;
    // Quiet for the grace period: the open turn is shown closed by synthetic events.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !std::fs::read_dir(dir.join("events"))
        .expect("events")
        .any(|e| {
            e.expect("e")
                .file_name()
                .to_string_lossy()
                .contains("synthetic")
        })
    {
        assert!(
            Instant::now() < deadline,
            "no synthetic closers after the grace period"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1100));
    let mut held = std::fs::File::open(dir.join("index.jsonl")).expect("open");
    let at_open = held.metadata().expect("fstat").len();
    append_frame(
        &copy.path,
        tail.id,
        &[
            json!({"type": "step/end", "seq": s + 3, "time": 1_790_000_000_003i64, "data": {"turn": turn, "step": 1}}),
            json!({"type": "turn/end", "seq": s + 4, "time": 1_790_000_000_004i64, "data": {"turn": turn, "reason": {"kind": "completed"}}}),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::metadata(dir.join("index.jsonl"))
        .expect("stat")
        .len()
        == at_open
    {
        assert!(Instant::now() < deadline, "index.jsonl never changed size");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (at_open, bytes, after) = read_held(&mut held, at_open);
    let whole_lines = bytes.ends_with(b"\n")
        && bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .all(|l| serde_json::from_slice::<Value>(l).is_ok());
    let tail_text = String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(80)..]).into_owned();
    eprintln!(
        "index.jsonl held across the closers' removal: fstat at open {at_open}, read {} bytes, fstat after {after}, whole JSON lines: {whole_lines}; ends with {tail_text:?}",
        bytes.len()
    );
    assert!(whole_lines, "the held descriptor read a cut line");
    assert_eq!(
        bytes.len() as u64,
        at_open,
        "the held descriptor read a size other than its fstat at open"
    );
}
