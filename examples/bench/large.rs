//! Figure 1: the issue's profile session read cold, and the issue's task
//! (cold mount + `cat surface.jsonl` + `ls events`) end to end and by step.

use std::fs;
use std::path::Path;

use crate::checks::{expect_readable, timed};
use crate::mount::{quote, time_sh};
use crate::table::{MIB, Row, human, info_row, rss_row, secs, time_row};
use crate::write::{Enc, SessionSpec, Store};
use crate::{Bench, harness};

/// Figure 1: the large session, cold, against `zstd -dc` of its artifact; and
/// the issue's task (cold mount + `cat surface.jsonl` + `ls events`) on it and
/// on the 69,030-event session of figure s, against the same floors and the
/// Harness's `inspect()` when `--harness-inspect` is given.
pub fn figure(
    bench: &mut Bench,
    store: &Store,
    steps_store: &Store,
    rows: &mut Vec<Row>,
    notes: &mut Vec<String>,
) {
    let spec = &store.sessions[0];
    let floors = task_floors(bench, store, spec, rows, notes);
    let name = spec.mount_name();
    let events = store.stats_of(&spec.id).events;
    for &enc in &bench.options.encodings.clone() {
        let mut peak = 0;
        let mut cpu_notes = Vec::new();
        let mut sizes = Vec::new();
        // Each with its bound against the floor: issue 24 asks the build
        // itself (surface.jsonl) for at most 1.2×.
        let ops = [
            (
                "cold cat surface.jsonl",
                format!("cat {name}/surface.jsonl > /dev/null"),
                1.2,
            ),
            (
                "cold ls events | wc -l",
                format!("ls {name}/events | wc -l"),
                2.0,
            ),
            (
                "cold cat transcript.md",
                format!("cat {name}/transcript.md > /dev/null"),
                2.0,
            ),
        ];
        for (label, script, bound) in ops {
            let mount = bench.mount(&store.root(enc), "grace=0");
            bench.cold();
            let script = format!("cd {} && {script}", quote(&mount.dir));
            let cpu = mount.cpu_seconds();
            let (seconds, out) = timed(&mount, &name, &script);
            cpu_notes.push(format!("{label}: {}", secs(mount.cpu_seconds() - cpu)));
            if label.contains("events") {
                let count: u64 = out.trim().parse().unwrap_or(0);
                assert_eq!(
                    count, events,
                    "events/ of {name} lists {count} entries, expected {events}"
                );
            }
            expect_readable(&mount, &name);
            if let Some(file) = label.strip_prefix("cold cat ") {
                let size = fs::metadata(mount.path(&name).join(file)).map_or(0, |m| m.len());
                sizes.push(format!("{file} {}", human(size)));
            }
            peak = peak.max(mount.peak_rss());
            mount.finish();
            rows.push(time_row(
                format!("1 {label} [{}]", enc.name()),
                seconds,
                floors.zstd,
                bound,
                None,
            ));
        }
        peak = peak.max(issue_task(bench, store, spec, enc, &floors, rows, notes));
        notes.push(format!(
            "1 [{}]: sessionfs CPU time during each: {}; {}",
            enc.name(),
            cpu_notes.join(", "),
            sizes.join(", ")
        ));
        rows.push(rss_row(
            format!("1 peak RSS of sessionfs [{}]", enc.name()),
            peak,
        ));
    }
    let spec = &steps_store.sessions[0];
    let floors = task_floors(bench, steps_store, spec, rows, notes);
    for &enc in &bench.options.encodings.clone() {
        issue_task(bench, steps_store, spec, enc, &floors, rows, notes);
    }
    if bench.options.harness_inspect.is_none() {
        notes.push(harness::NOT_MEASURED.into());
    }
}

/// What the issue's task on one session is compared with.
struct TaskFloors {
    /// Cold `zstd -dc --no-asyncio` of the session's zstd artifact.
    zstd: f64,
    /// `ls | wc -l` of as many names on tmpfs: ls's own part of `ls events`.
    listing: f64,
}

fn task_floors(
    bench: &mut Bench,
    store: &Store,
    spec: &SessionSpec,
    rows: &mut Vec<Row>,
    notes: &mut Vec<String>,
) -> TaskFloors {
    let zstd = zstd_floor(bench, store, spec);
    let stats = store.stats_of(&spec.id);
    notes.push(format!(
        "1: {}: {} events, {} frames, {:.1} MiB plaintext, {:.1} MiB zstd; floor `zstd -dc --no-asyncio` cold {}",
        spec.id,
        stats.events,
        stats.batches + 1,
        stats.plain as f64 / MIB,
        stats.zstd as f64 / MIB,
        secs(zstd)
    ));
    let listing = ls_cost(&bench.options.dir, stats.events);
    notes.push(format!(
        "1: `ls | wc -l` of a tmpfs directory of {} empty files named like events/ takes {} on its own: the part of `ls events` that is ls's",
        stats.events,
        secs(listing)
    ));
    rows.push(Row {
        figure: format!("1 {}: ls | wc -l of as many names on tmpfs", spec.id),
        value: secs(listing),
        floor: "-".into(),
        ratio: "-".into(),
        target: "(information: ls's own cost)".into(),
        met: "-".into(),
    });
    TaskFloors { zstd, listing }
}

/// The issue's task on one session in one encoding, end to end, then by step
/// on one cold mount: the build (`stat header.json` loads the view and
/// renders only the header), then `ls events` of the built session against
/// ls's own cost on tmpfs; then a cold `ls events` alone, whose names are
/// listed while the session is read, against the two steps in turn; then the
/// Harness's `inspect()` of the same session when given.
/// Returns the peak RSS of sessionfs.
fn issue_task(
    bench: &mut Bench,
    store: &Store,
    spec: &SessionSpec,
    enc: Enc,
    floors: &TaskFloors,
    rows: &mut Vec<Row>,
    notes: &mut Vec<String>,
) -> u64 {
    let name = spec.mount_name();
    let (id, e) = (&spec.id, enc.name());
    let mount = bench.mount(&store.root(enc), "grace=0");
    bench.cold();
    let script = format!(
        "cd {} && cat {name}/surface.jsonl > /dev/null && ls {name}/events | wc -l",
        quote(&mount.dir)
    );
    let cpu = mount.cpu_seconds();
    let (total, _) = timed(&mount, &name, &script);
    let total_cpu = mount.cpu_seconds() - cpu;
    let mut peak = mount.peak_rss();
    mount.finish();
    let mount = bench.mount(&store.root(enc), "grace=0");
    bench.cold();
    let dir = quote(&mount.path(&name));
    let (build, _) = timed(&mount, &name, &format!("stat -c %s {dir}/header.json"));
    let (listed, _) = timed(&mount, &name, &format!("ls {dir}/events | wc -l"));
    peak = peak.max(mount.peak_rss());
    mount.finish();
    let mount = bench.mount(&store.root(enc), "grace=0");
    bench.cold();
    let dir = quote(&mount.path(&name));
    let (streamed, _) = timed(&mount, &name, &format!("ls {dir}/events | wc -l"));
    peak = peak.max(mount.peak_rss());
    mount.finish();
    rows.push(time_row(
        format!("1 {id}: cold cat surface.jsonl + ls events, total [{e}]"),
        total,
        floors.zstd,
        2.0,
        None,
    ));
    rows.push(info_row(
        format!("1 {id}:   step: cold build (stat header.json) [{e}]"),
        build,
        floors.zstd,
        "(information)",
    ));
    rows.push(info_row(
        format!("1 {id}:   step: ls events | wc -l, built [{e}]"),
        listed,
        floors.listing,
        "(information: floor is tmpfs)",
    ));
    rows.push(info_row(
        format!("1 {id}: cold ls events | wc -l, names while read [{e}]"),
        streamed,
        build + listed,
        "(information: floor is the two steps in turn)",
    ));
    let reference = bench
        .options
        .harness_inspect
        .clone()
        .map(|template| harness::measure(bench, &template, &store.root(enc), id, enc));
    match &reference {
        Some(Ok(harness)) => notes.push(format!(
            "1 [{e}]: {id}: Harness `inspect()` command, cold: {} ({} CPU; sessionfs: {} for the total, {} daemon CPU); its last line: {}",
            secs(harness.seconds),
            secs(harness.cpu),
            secs(total),
            secs(total_cpu),
            harness.said
        )),
        Some(Err(why)) => notes.push(format!("1 [{e}]: {id}: Harness reference failed: {why}")),
        None => {}
    }
    rows.push(harness::row(
        format!("1 {id}: the total against Harness inspect() [{e}]"),
        total,
        reference.as_ref(),
        (harness::TARGET, "⅓"),
    ));
    peak
}

/// Cold `zstd -dc --no-asyncio` of the session's zstd artifact: the floor
/// of reading it whole.
pub fn zstd_floor(bench: &mut Bench, store: &Store, spec: &SessionSpec) -> f64 {
    let artifact = spec.artifact(&store.root(Enc::Zstd), Enc::Zstd);
    bench.cold();
    time_sh(&format!(
        "zstd -dc --no-asyncio {} > /dev/null",
        quote(&artifact)
    ))
    .0
}

/// What `ls | wc -l` costs on its own for `count` names: it reads, sorts and
/// prints them all, whatever the filesystem. Timed warm on tmpfs (/dev/shm),
/// or beside the stores when there is no tmpfs there.
pub fn ls_cost(dir: &Path, count: u64) -> f64 {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() { shm } else { dir };
    let names = base.join(format!("sessionfs-bench-names-{}", std::process::id()));
    fs::create_dir_all(&names).expect("names directory");
    for seq in 0..count {
        fs::File::create(names.join(format!("{seq:08}-assistant.chunk.json"))).expect("name");
    }
    let script = format!("ls {} | wc -l", quote(&names));
    time_sh(&script);
    let (seconds, _) = time_sh(&script);
    fs::remove_dir_all(&names).expect("remove names");
    seconds
}
