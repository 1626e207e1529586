//! Figure 3: cold `grep -rl` over every transcript of a ~1 GiB store, against
//! `zstd -dc` of every artifact piped to grep; then the same with the
//! persistent index: a first mount that saves it, a second pass on that
//! mount (against grep over the same transcripts copied to tmpfs), and a
//! remount that reads it (issue 24).

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use crate::Bench;
use crate::checks::expect_readable;
use crate::mount::{quote, time_sh};
use crate::stores::NEEDLE;
use crate::table::{MIB, Row, rss_row, secs, time_row};
use crate::write::{Enc, SessionSpec, Store};

/// Figure 3: `grep -rl` over every transcript of a 1 GiB store.
pub fn figure(bench: &mut Bench, store: &Store, rows: &mut Vec<Row>, notes: &mut Vec<String>) {
    let root = store.root(Enc::Zstd);
    bench.cold();
    let (floor, count) = time_sh(&format!(
        "find {} -name session.jsonl.zstd -print0 | xargs -0 zstd -dc --no-asyncio | grep -c {NEEDLE}",
        quote(&root)
    ));
    let expected: BTreeSet<String> = store
        .sessions
        .iter()
        .filter(|s| s.needle.is_some())
        .map(SessionSpec::mount_name)
        .collect();
    assert!(
        count.trim().parse::<usize>().unwrap_or(0) >= expected.len(),
        "the needle is in the artifacts"
    );
    let t = store.total();
    notes.push(format!(
        "3: {} sessions, {:.0} MiB plaintext, {:.0} MiB zstd; needle in {} sessions; floor `zstd -dc --no-asyncio | grep -c` cold {}",
        store.sessions.len(),
        t.plain as f64 / MIB,
        t.zstd as f64 / MIB,
        expected.len(),
        secs(floor)
    ));
    for &enc in &bench.options.encodings.clone() {
        let mount = bench.mount(&store.root(enc), "grace=0");
        bench.cold();
        let cpu = mount.cpu_seconds();
        let (_, read_before) = mount.io();
        let (seconds, found) = grep_needle(&mount.dir);
        let cpu = mount.cpu_seconds() - cpu;
        let read = mount.io().1 - read_before;
        let peak = mount.peak_rss();
        let (_, listed) = time_sh(&format!(
            "cd {} && ls -d */transcript.md | wc -l",
            quote(&mount.dir)
        ));
        if listed.trim().parse::<usize>().unwrap_or(0) != store.sessions.len() {
            for spec in &store.sessions {
                expect_readable(&mount, &spec.mount_name());
            }
        }
        mount.finish();
        assert_eq!(
            found, expected,
            "grep -rl found the needle in the wrong sessions"
        );
        rows.push(time_row(
            format!("3 cold grep -rl over */transcript.md [{}]", enc.name()),
            seconds,
            floor,
            2.0,
            None,
        ));
        indexed(bench, store, enc, floor, &expected, rows, notes);
        rows.push(rss_row(
            format!("3 peak RSS of sessionfs, default cache [{}]", enc.name()),
            peak,
        ));
        let stored = tree_bytes(&store.root(enc));
        notes.push(format!(
            "3 [{}]: sessionfs used {} CPU; its peak RSS was {:.0} MiB; it read {:.0} MiB through system calls, {:.2}× the {:.0} MiB store (each session built once reads the store about once)",
            enc.name(),
            secs(cpu),
            peak as f64 / MIB,
            read as f64 / MIB,
            read as f64 / stored.max(1) as f64,
            stored as f64 / MIB
        ));
    }
}

/// `grep -rl` over every transcript with the persistent index: on a first
/// mount that saves it, a second time on that mount, and after a remount.
fn indexed(
    bench: &mut Bench,
    store: &Store,
    enc: Enc,
    floor: f64,
    expected: &BTreeSet<String>,
    rows: &mut Vec<Row>,
    notes: &mut Vec<String>,
) {
    let e = enc.name();
    let index = bench.options.dir.join("search-index");
    let _ = fs::remove_dir_all(&index);
    let options = format!("grace=0,index={}", index.display());
    let grep = |dir: &Path| {
        let (seconds, found) = grep_needle(dir);
        assert_eq!(
            &found, expected,
            "grep -rl found the needle in the wrong sessions"
        );
        seconds
    };
    let mount = bench.mount(&store.root(enc), &options);
    bench.cold();
    let first = grep(&mount.dir);
    let second = grep(&mount.dir);
    let mut peak = mount.peak_rss();
    // The same transcripts on tmpfs: what a second pass is compared with.
    let shm = Path::new("/dev/shm").join(format!(
        "sessionfs-bench-transcripts-{}",
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&shm);
    time_sh(&format!(
        "cd {} && for d in */; do [ -f \"$d/transcript.md\" ] && mkdir -p {shm}/\"$d\" && cp \"$d/transcript.md\" {shm}/\"$d\"; done; true",
        quote(&mount.dir),
        shm = quote(&shm)
    ));
    mount.finish();
    let written_bytes = tree_bytes(&index);
    grep(&shm);
    let tmpfs = grep(&shm);
    let _ = fs::remove_dir_all(&shm);
    let mount = bench.mount(&store.root(enc), &options);
    bench.cold();
    let remount = grep(&mount.dir);
    // Files written fast are compacted once the mount is quiet (files read
    // by this remount too).
    let (compacted_bytes, compacting) = wait_compacted(&index);
    peak = peak.max(mount.peak_rss());
    mount.finish();
    let _ = fs::remove_dir_all(&index);
    rows.push(time_row(
        format!("3 with an index: first mount, cold grep -rl (saves it) [{e}]"),
        first,
        floor,
        1.5,
        None,
    ));
    rows.push(time_row(
        format!("3 with an index: a second pass, floor grep on tmpfs [{e}]"),
        second,
        tmpfs,
        2.0,
        None,
    ));
    rows.push(time_row(
        format!("3 with an index: remount, cold grep -rl [{e}]"),
        remount,
        floor,
        1.2,
        None,
    ));
    rows.push(rss_row(
        format!("3 with an index: peak RSS of sessionfs [{e}]"),
        peak,
    ));
    notes.push(format!(
        "3 [{e}]: the index of the search store takes {:.1} MiB as the first mount wrote it, \
         {:.1} MiB once compacted (in about {compacting:.0} s after the remount's grep)",
        written_bytes as f64 / MIB,
        compacted_bytes as f64 / MIB
    ));
}

/// Times `grep -rl NEEDLE */transcript.md` in `dir`; returns the seconds
/// and the sessions it named.
fn grep_needle(dir: &Path) -> (f64, BTreeSet<String>) {
    let (seconds, out) = time_sh(&format!(
        "cd {} && grep -rl {NEEDLE} */transcript.md; true",
        quote(dir)
    ));
    let found = out
        .lines()
        .filter_map(|l| l.strip_suffix("/transcript.md"))
        .map(String::from)
        .collect();
    (seconds, found)
}

/// Waits, while a mount is up, until its index directory stops changing
/// (what it wrote fast is compacted once the mount is quiet); returns its
/// bytes then and about how many seconds it kept changing.
pub fn wait_compacted(index: &Path) -> (u64, f64) {
    let started = std::time::Instant::now();
    let mut bytes = tree_bytes(index);
    let mut unchanged = 0;
    while unchanged < 5 && started.elapsed().as_secs() < 300 {
        std::thread::sleep(std::time::Duration::from_secs(1));
        let now = tree_bytes(index);
        unchanged = if now == bytes { unchanged + 1 } else { 0 };
        bytes = now;
    }
    (
        bytes,
        started.elapsed().as_secs_f64() - f64::from(unchanged),
    )
}

/// The bytes of a file, or of every file under a directory.
pub fn tree_bytes(path: &Path) -> u64 {
    match fs::metadata(path) {
        Ok(meta) if meta.is_dir() => fs::read_dir(path)
            .map(|entries| entries.flatten().map(|e| tree_bytes(&e.path())).sum())
            .unwrap_or(0),
        Ok(meta) => meta.len(),
        Err(_) => 0,
    }
}
