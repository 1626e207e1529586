//! Figure 2: cold `ls -l` of the root of a 10,000-session store, against
//! reading only the first frame of every artifact, and what an idle mount costs.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::Bench;
use crate::checks::expect_readable;
use crate::mount::{quote, time_sh};
use crate::table::{MIB, Row, secs, time_row};
use crate::write::{Enc, Store};

/// The root's own entries listed beside its sessions: `flush`,
/// `sessions.jsonl`, `latest`, `by-project` and `by-date`.
const ROOT_OWN: usize = 5;

/// How long figure 2 watches an idle mount.
const IDLE: Duration = Duration::from_secs(5);
/// Readers used by the parallel variant of figure 2's floor.
const FLOOR_THREADS: usize = 16;

/// Reads the first zstd frame of one artifact; returns the bytes read.
fn first_frame(path: &Path) -> u64 {
    use sessionfs::store::zstd_frames::{FrameScan, decode_frame, scan_frame};
    use std::io::Read;
    let mut file =
        fs::File::open(path).unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = file.read(&mut chunk).expect("read artifact");
        buffer.extend_from_slice(&chunk[..n]);
        match scan_frame(&buffer) {
            FrameScan::Complete(end) => {
                let header = decode_frame(&buffer[..end]).expect("first frame");
                assert!(
                    header.ends_with(b"\n"),
                    "{}: the first frame is one header line",
                    path.display()
                );
                return buffer.len() as u64;
            }
            _ if n == 0 => panic!("{}: no complete first frame", path.display()),
            _ => {}
        }
    }
}

/// The floor of figure 2: list the store as the Harness does (project
/// directories, session directories) and read only the first zstd frame of
/// every artifact, on `threads` threads. Returns (artifacts, bytes read).
fn first_frames(root: &Path, threads: usize) -> (usize, u64) {
    let mut artifacts = Vec::new();
    for project in fs::read_dir(root).expect("store root").flatten() {
        for entry in fs::read_dir(project.path()).expect("project").flatten() {
            artifacts.push(entry.path().join("session.jsonl.zstd"));
        }
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let bytes = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                while let Some(path) =
                    artifacts.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                {
                    bytes.fetch_add(first_frame(path), std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
    });
    (artifacts.len(), bytes.into_inner())
}

/// Figure 2: `ls -l` of the root of a store of many sessions.
pub fn figure(bench: &mut Bench, store: &Store, rows: &mut Vec<Row>, notes: &mut Vec<String>) {
    let n = store.sessions.len();
    // The floor: one reader, and FLOOR_THREADS readers (a disk serves parallel
    // reads faster); the faster of the two is the floor.
    let mut floors = Vec::new();
    for threads in [1, FLOOR_THREADS] {
        bench.cold();
        let started = Instant::now();
        let (found, bytes) = first_frames(&store.root(Enc::Zstd), threads);
        floors.push((started.elapsed().as_secs_f64(), threads, bytes));
        assert_eq!(found, n);
    }
    let (floor, threads, floor_bytes) = floors
        .iter()
        .copied()
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .expect("two floors");
    notes.push(format!(
        "2: floor reads the first frame of {n} zstd artifacts ({:.1} MiB): {} on 1 thread, {} on {FLOOR_THREADS} threads; floor = {threads} thread(s)",
        floor_bytes as f64 / MIB,
        secs(floors[0].0),
        secs(floors[1].0)
    ));
    for &enc in &bench.options.encodings.clone() {
        let mount = bench.mount(&store.root(enc), "grace=0");
        bench.cold();
        let before = mount.io();
        let (seconds, _) = time_sh(&format!("ls -l {} > /dev/null", quote(&mount.dir)));
        let after = mount.io();
        // What an idle mount costs: nobody touches it for IDLE seconds.
        let (idle_io, idle_cpu) = (mount.io(), mount.cpu_seconds());
        std::thread::sleep(IDLE);
        let (idle_io_after, idle_cpu_after) = (mount.io(), mount.cpu_seconds());
        notes.push(format!(
            "2 [{}]: idle mount afterwards: sessionfs read {:.1} MiB (rchar) and used {} CPU in {} s with nobody using it",
            enc.name(),
            (idle_io_after.1 - idle_io.1) as f64 / MIB,
            secs(idle_cpu_after - idle_cpu),
            IDLE.as_secs()
        ));
        let (_, listing) = time_sh(&format!("ls {} | wc -l", quote(&mount.dir)));
        assert_eq!(
            listing.trim().parse::<usize>().unwrap_or(0),
            n + ROOT_OWN,
            "the root lists every session and its own entries"
        );
        let step = (n / 10).max(1);
        for spec in store.sessions.iter().step_by(step) {
            expect_readable(&mount, &spec.mount_name());
        }
        mount.finish();
        rows.push(time_row(
            format!("2 cold ls -l of the root, {n} sessions [{}]", enc.name()),
            seconds,
            floor,
            2.0,
            Some(1.0),
        ));
        rows.push(Row {
            figure: format!("2 bytes sessionfs read for that ls -l [{}]", enc.name()),
            value: format!(
                "{:.1} MiB disk / {:.1} MiB rchar",
                (after.0 - before.0) as f64 / MIB,
                (after.1 - before.1) as f64 / MIB
            ),
            floor: format!("{:.1} MiB", floor_bytes as f64 / MIB),
            ratio: format!("{:.2}×", (after.1 - before.1) as f64 / floor_bytes as f64),
            target: "(information)".into(),
            met: "-".into(),
        });
    }
}
