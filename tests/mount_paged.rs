//! `transcript.md` through the kernel's page cache: a view dropped from the
//! daemon's cache hands its transcript to the kernel, so a glob that sizes every
//! transcript followed by a read of them all reads each session's log once,
//! however small the daemon's cache.

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};

use common::{Mount, store_copy, with_mapping, within};

/// Bytes the daemon has read through system calls (`rchar`): reading a
/// session's log again shows here, a stat of the store does not.
fn bytes_read(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).expect("/proc/PID/io");
    io.lines()
        .find_map(|line| line.strip_prefix("rchar: "))
        .and_then(|n| n.trim().parse().ok())
        .expect("rchar")
}

/// How many of a file's pages the page cache holds now, asked without reading.
fn resident_pages(path: &Path) -> (usize, usize) {
    with_mapping(path, |mapped| {
        let pages = mapped.len().div_ceil(4096);
        let mut vec = vec![0u8; pages];
        if pages > 0 {
            // SAFETY: mincore only reports the residency of the mapping's pages
            // (it faults nothing in) into a vector of one byte per page.
            let done =
                unsafe { libc::mincore(mapped.as_ptr() as *mut _, mapped.len(), vec.as_mut_ptr()) };
            assert_eq!(done, 0, "mincore: {}", std::io::Error::last_os_error());
        }
        (vec.iter().filter(|v| **v & 1 == 1).count(), pages)
    })
}

fn transcripts(mount: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(mount)
        .expect("ls")
        .map(|e| e.expect("entry").path().join("transcript.md"))
        .filter(|t| t.exists())
        .collect();
    found.sort();
    found
}

fn store_bytes(root: &Path) -> u64 {
    std::fs::read_dir(root)
        .expect("store")
        .map(|e| e.expect("entry"))
        .map(|e| match e.file_type().expect("type").is_dir() {
            true => store_bytes(&e.path()),
            false => e.metadata().expect("stat").len(),
        })
        .sum()
}

#[test]
fn a_glob_then_a_read_of_every_transcript_reads_each_log_once_under_a_tiny_cache() {
    let store = store_copy("jsonl-zstd");
    let roomy = Mount::new(&store.path, &[]);
    let expected: Vec<Vec<u8>> = transcripts(roomy.path())
        .iter()
        .map(|t| std::fs::read(t).expect("read"))
        .collect();
    drop(roomy);

    let mount = Mount::new(&store.path, &["-o", "cache=0"]);
    let paths = transcripts(mount.path());
    assert!(paths.len() >= 5, "{} sessions", paths.len());
    assert_eq!(paths.len(), expected.len());
    // A `cache=0` daemon keeps one view: every other transcript is spilled.
    for path in &paths {
        std::fs::metadata(path).expect("stat");
    }
    let last = paths.len() - 1;
    for path in &paths[..last] {
        within(
            std::time::Duration::from_secs(5),
            "the spilled transcript in the page cache",
            || {
                let (resident, pages) = resident_pages(path);
                resident == pages
            },
        );
    }
    let before = bytes_read(mount.pid());
    for (path, want) in paths.iter().zip(&expected) {
        assert_eq!(
            &std::fs::read(path).expect("read"),
            want,
            "{}",
            path.display()
        );
    }
    let read = bytes_read(mount.pid()) - before;
    let logs = store_bytes(&store.path);
    assert!(
        read < logs / 2,
        "the daemon read {read} bytes to serve the transcripts (the store holds {logs})"
    );
    drop(mount);
}

#[test]
fn a_rewritten_transcript_moves_to_a_new_inode_and_an_open_descriptor_keeps_its_bytes() {
    use std::io::{Read, Seek};
    use std::os::unix::fs::MetadataExt;

    let store = store_copy("jsonl");
    let log = store
        .path
        .join("--workspace-orbit--/orbit-debug-tools/session.jsonl");
    let mount = Mount::new(&store.path, &[]);
    let transcript = mount.path().join("orbit-debug-tools/transcript.md");
    let mut held = File::open(&transcript).expect("open");
    let mut old = Vec::new();
    held.read_to_end(&mut old).expect("read");
    let old_text = "CI says TestSkewWindow fails on main.";
    assert!(String::from_utf8_lossy(&old).contains(old_text));

    // The log is replaced (written aside, renamed over) by one whose first
    // question differs: the transcript no longer extends what was read.
    let new_text = "CI says TestSkewWindow fails on a branch.";
    let replaced = std::fs::read_to_string(&log)
        .expect("log")
        .replacen(old_text, new_text, 1);
    let aside = log.with_extension("new");
    std::fs::write(&aside, replaced).expect("write");
    std::fs::rename(&aside, &log).expect("rename");

    within(
        std::time::Duration::from_secs(3),
        "the new transcript at its path",
        || {
            std::fs::read(&transcript)
                .is_ok_and(|now| String::from_utf8_lossy(&now).contains(new_text))
        },
    );
    let now = std::fs::metadata(&transcript).expect("stat");
    let before = held.metadata().expect("fstat");
    assert_ne!(
        now.ino(),
        before.ino(),
        "a rewritten transcript is a new inode"
    );
    assert_eq!(before.len(), old.len() as u64);
    held.rewind().expect("seek");
    let mut again = Vec::new();
    held.read_to_end(&mut again).expect("read");
    assert_eq!(again, old, "the open descriptor keeps the bytes it read");
    drop(held);
    drop(mount);
}
