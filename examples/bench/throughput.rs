//! Figure 4: warm sequential read of a ~100 MiB transcript.md, against the
//! same bytes read from tmpfs.

use std::fs;
use std::path::{Path, PathBuf};

use crate::Bench;
use crate::mount::read_file;
use crate::table::{MIB, Row, secs, yes};
use crate::write::Store;

/// The best of `n` warm sequential reads of `path`, in MiB/s. Best-of rather
/// than a mean, so that other work on the machine disturbs the figure less.
fn best_rate(path: &Path, n: usize) -> f64 {
    (0..n)
        .map(|_| read_file(path))
        .map(|(s, bytes)| bytes as f64 / MIB / s)
        .fold(0.0, f64::max)
}

/// Figure 4: warm sequential read of a ~100 MiB generated file (reads of its
/// st_blksize, as `cat` does) against the same bytes in a tmpfs file, measured right after.
pub fn figure(bench: &mut Bench, store: &Store, rows: &mut Vec<Row>, notes: &mut Vec<String>) {
    let name = store.sessions[2].mount_name();
    let shm = PathBuf::from(format!(
        "/dev/shm/sessionfs-bench-{}.md",
        std::process::id()
    ));
    for &enc in &bench.options.encodings.clone() {
        let mount = bench.mount(&store.root(enc), "grace=0");
        let file = mount.path(&name).join("transcript.md");
        let (first, size) = read_file(&file);
        let value = best_rate(&file, 5);
        if !shm.exists() {
            fs::copy(&file, &shm).expect("copy to tmpfs");
        }
        read_file(&shm);
        let floor = best_rate(&shm, 5);
        mount.finish();
        notes.push(format!(
            "4 [{}]: {name}/transcript.md is {:.1} MiB; its first (building) read took {}",
            enc.name(),
            size as f64 / MIB,
            secs(first)
        ));
        rows.push(Row {
            figure: format!("4 warm sequential read of transcript.md [{}]", enc.name()),
            value: format!("{value:.0} MiB/s"),
            floor: format!("{floor:.0} MiB/s"),
            ratio: format!("{:.2}×", value / floor),
            target: "≥ 0.5× floor".into(),
            met: yes(value >= 0.5 * floor),
        });
    }
    let _ = fs::remove_file(&shm);
}
