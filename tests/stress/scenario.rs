//! How one run is put together and judged: a mount of the zstd fixture store
//! loaded by readers, a writer and a forker for a bounded time (see
//! [`workers`](super::workers)), its figures printed, then every invariant
//! checked once the mount is quiet (see [`invariants`](super::invariants)).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::invariants::{
    every_child_has_its_seed, every_event_file_carries_its_seq,
    every_read_is_a_prefix_of_the_final_content, everything_written_is_visible,
};
use super::session_log::{Tail, tail_of};
use super::workers::{
    Forked, Op, Shared, Written, forker, memory_watcher, reader, vm_rss_kib, writer,
};
use crate::common::{Mount, Rng, store_copy};

/// One stress run's load and limits.
pub struct Scenario {
    pub readers: usize,
    /// How long the writer writes (the other workers stop when it is done).
    pub run: Duration,
    /// Sessions the writer appends to; each must end with a closed turn in the fixture.
    pub written: &'static [&'static str],
    /// Sessions the forker forks from, at their last fixture turn end.
    pub forked: &'static [&'static str],
    /// The most resident memory the sessionfs process may reach.
    pub rss_limit_kib: u64,
}

impl Scenario {
    /// Mounts a copy of the `jsonl-zstd` fixture, loads it, and panics with
    /// every inconsistency found.
    pub fn run(&self) {
        let copy = store_copy("jsonl-zstd");
        let store = copy.path.clone();
        // A grace period longer than the run: no crash closers, so views only grow.
        let mount = Mount::new(&store, &["-o", "grace=600,window=100"]);
        let pid = mount.pid();
        let root = mount.path().to_path_buf();
        let mut names: Vec<String> = std::fs::read_dir(&root)
            .expect("root")
            .map(|e| e.expect("e").file_name().into_string().expect("u"))
            .filter(|n| !crate::common::ROOT_OWN.contains(&n.as_str()))
            .collect();
        names.sort();
        let mut tails: Vec<Tail> = self.written.iter().map(|id| tail_of(&root, id)).collect();
        let boundaries: Vec<(&str, u64)> = self
            .forked
            .iter()
            .map(|id| (*id, tail_of(&root, id).next_seq - 1))
            .collect();
        let rss_start = vm_rss_kib(pid).unwrap_or(0);
        let shared = Arc::new(Shared::new(&root, names));
        let mut rng = Rng::seeded("stress");
        eprintln!("stress: {} readers for {:?}", self.readers, self.run);

        let readers: Vec<_> = (0..self.readers)
            .map(|_| {
                let (shared, rng) = (shared.clone(), Rng(rng.next()));
                std::thread::spawn(move || reader(shared, rng))
            })
            .collect();
        let watcher = {
            let shared = shared.clone();
            std::thread::spawn(move || memory_watcher(shared, pid))
        };
        let forker = {
            let (shared, rng) = (shared.clone(), Rng(rng.next()));
            std::thread::spawn(move || forker(shared, boundaries, rng))
        };
        let start = Instant::now();
        let written = writer(&store, &mut tails, Rng(rng.next()), self.run);
        shared.stop();
        let elapsed = start.elapsed();
        let mut latencies: BTreeMap<Op, Vec<u32>> = BTreeMap::new();
        for reader in readers {
            for (op, micros) in reader.join().expect("reader") {
                latencies.entry(op).or_default().push(micros);
            }
        }
        let forked = forker.join().expect("forker");
        let rss_during = watcher.join().expect("watcher");
        report_load(&shared, elapsed, &mut latencies, &written, &forked);

        // Quiet: everything written is visible, and every view's final content
        // is an extension of everything any reader read.
        std::fs::write(root.join("flush"), b"\n").expect("final flush");
        everything_written_is_visible(&root, &tails);
        std::thread::sleep(Duration::from_millis(600));
        every_read_is_a_prefix_of_the_final_content(&shared.findings);
        every_event_file_carries_its_seq(&root);
        every_child_has_its_seed(&root, &forked.made);

        let rss_end = vm_rss_kib(pid).unwrap_or(0);
        let rss_peak = rss_during.max(rss_end);
        eprintln!(
            "stress: sessionfs VmRSS: {rss_start} KiB at start, {rss_peak} KiB peak, {rss_end} KiB at end"
        );
        let status = mount.unmount();
        assert!(status.success(), "sessionfs exited with {status}");
        self.judge(&shared, &forked, rss_peak);
    }

    /// Prints what the workers met and fails on anything wrong.
    fn judge(&self, shared: &Shared, forked: &Forked, rss_peak: u64) {
        let errnos = shared.findings.errnos();
        let failures = shared.findings.failures();
        eprintln!("stress: errnos seen: {errnos:?}");
        for (category, (count, examples)) in &failures {
            eprintln!("stress: {count} x {category}");
            for example in examples {
                eprintln!("stress:     e.g. {example}");
            }
        }
        assert!(
            forked.errors.is_empty(),
            "fork/flush errors: {:?}",
            forked.errors
        );
        assert!(
            forked.made.len() >= 10,
            "the forker made only {} children",
            forked.made.len()
        );
        assert!(
            errnos.is_empty(),
            "errnos during the run (none is legitimate: no name vanishes): {errnos:?}"
        );
        assert!(failures.is_empty(), "inconsistencies: {failures:?}");
        assert!(
            rss_peak < self.rss_limit_kib,
            "sessionfs grew to {rss_peak} KiB"
        );
    }
}

/// Prints throughput and latency per operation, and what the writer and the
/// forker did.
fn report_load(
    shared: &Shared,
    elapsed: Duration,
    latencies: &mut BTreeMap<Op, Vec<u32>>,
    written: &Written,
    forked: &Forked,
) {
    let total: usize = latencies.values().map(Vec::len).sum();
    eprintln!(
        "stress: {total} operations in {elapsed:.1?}: {:.0} ops/s",
        total as f64 / elapsed.as_secs_f64()
    );
    for (op, list) in latencies {
        list.sort_unstable();
        eprintln!(
            "stress: {op:?}: {} ops ({:.0}/s), p50 {} us, p99 {} us, max {} us",
            list.len(),
            list.len() as f64 / elapsed.as_secs_f64(),
            percentile(list, 0.5),
            percentile(list, 0.99),
            list.last().copied().unwrap_or(0)
        );
    }
    eprintln!(
        "stress: writer appended {} turns in {} zstd frames; forker made {} children ({} errors), {} flushes",
        written.turns,
        written.batches,
        forked.made.len(),
        forked.errors.len(),
        forked.flushes
    );
    let findings = &shared.findings;
    eprintln!(
        "stress: reads that followed a file past its size at open: {}; header.json rewritten between open and fstat: {}",
        findings.reads_beyond_open_size.load(Ordering::Relaxed),
        findings.header_size_mismatch.load(Ordering::Relaxed)
    );
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}
