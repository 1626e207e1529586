//! sessionfs benchmark (issues #7 and #5).
//!
//! `cargo run --release --example bench [-- OPTIONS]` generates, from a fixed
//! seed, stores shaped like real DeepSeek Harness sessions (streamed chunks
//! packed per write-behind batch, turns, tool calls, compactions) in all three
//! encodings (zstd JSONL, raw JSONL, SQLite schema 17), mounts them with the
//! release `sessionfs` binary and prints one table: each figure next to the
//! floor it is compared to, measured in the same run.
//!
//! `--follow` instead measures the CPU sessionfs spends following a session
//! that grows by 1,000 events per second, for a small and a large existing log.
//!
//! Figures (targets from the issue):
//! - 1: the profile session (1,307,073 events, ~370,000 frames): cold `cat
//!   surface.jsonl`, cold `ls events | wc -l`, cold `cat transcript.md`, each
//!   ≤ 2× `zstd -dc --no-asyncio` of its artifact; peak RSS < 256 MiB. Then the
//!   issue's task (cold mount + `cat surface.jsonl` + `ls events`) on it and on
//!   the 69,030-event session of figure s: ≤ 2× that floor, by step, and ≤ ⅓
//!   of the Harness's own `inspect()` of the same session. The Harness is not
//!   part of this project: `--harness-inspect 'CMD'` names a command that runs
//!   it (`bench/harness.rs` says what the bench passes it); without it that
//!   reference is reported as not measured;
//! - c: a small session read while that session builds cold: < 500 ms, and done
//!   before the build is;
//! - 2: cold `ls -l` of the root of a 10,000-session store: < 1 s and ≤ 2× reading
//!   only the first frame of every artifact (the faster of 1 and 16 readers);
//!   plus the bytes sessionfs read for it (`/proc/<pid>/io`);
//! - 3: cold `grep -rl NEEDLE */transcript.md` over ~1 GiB of plaintext: ≤ 2×
//!   `zstd -dc --no-asyncio` of every artifact piped to grep;
//! - 4: warm sequential read of a ~100 MiB transcript.md: ≥ half of reading the
//!   same bytes from tmpfs;
//! - s: `steps/` of a 69,030-event session: `ls steps/` after the first build
//!   costs ≤ that build; a call's `messages.jsonl` cold ≤ 2× `surface.jsonl` cold.
//!
//! Every encoding is compared with the floor measured on the zstd artifacts of
//! the same sessions (the Harness's default encoding).
//!
//! Generated stores are cached under `--dir` (default /tmp/sessionfs-bench),
//! keyed by their parameters. Cold figures drop the page cache and remount, so
//! sessionfs's own caches are cold too; that needs root. The sessionfs binary
//! is copied before the run, so a concurrent rebuild of target/ cannot change
//! what is measured halfway.

#[path = "bench/follow.rs"]
mod follow;
#[path = "bench/harness.rs"]
mod harness;
#[path = "bench/mount.rs"]
mod mount;
#[path = "bench/steps.rs"]
mod steps;
#[path = "bench/synth.rs"]
mod synth;
#[path = "bench/write.rs"]
mod write;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use mount::{Mount, drop_caches, quote, read_file, time_sh};
use synth::{Profile, Rng};
use write::{Enc, SessionSpec, Store};

const USAGE: &str = "\
Usage: cargo run --release --example bench -- [OPTIONS]

Options:
  --scale F          scale every generated size by F (default 1; e.g. 0.1 for a quick run)
  --dir PATH         where stores are generated and cached (default /tmp/sessionfs-bench)
  --seed N           generator seed (default 20260314)
  --encodings LIST   comma-separated subset of zstd,raw,sqlite (default all)
  --figures LIST     comma-separated subset of 1,c,2,3,4,s (default all; c = concurrency, s = steps/)
  --regenerate       rebuild cached stores
  --gen-only         generate the stores, print their shape and stop
  --no-build         do not run `cargo build --release --bin sessionfs` first
  --mount-options O  more -o options for every mount (e.g. cache=256M)
  --harness-inspect CMD
                     figure 1's reference: a shell command that runs the Harness's
                     inspect() on one session; {store}, {id} and {encoding} are
                     replaced (quoted) by the store (JSONL root or SQLite file), the
                     session id and zstd|raw|sqlite. Not given: not measured
  --follow           measure following a growing session instead (issue #5)
  --duration SECS    how long --follow appends (default 60)
  --rate N           events per second appended by --follow (default 1000)
  -h, --help         print this help
";

struct Options {
    scale: f64,
    dir: PathBuf,
    seed: u64,
    encodings: Vec<Enc>,
    figures: Vec<String>,
    regenerate: bool,
    gen_only: bool,
    build: bool,
    /// Appended to every mount's options.
    mount_options: Option<String>,
    /// Figure 1's Harness `inspect()` command template (see `harness.rs`).
    harness_inspect: Option<String>,
    follow: bool,
    duration: f64,
    rate: u64,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        scale: 1.0,
        dir: PathBuf::from("/tmp/sessionfs-bench"),
        seed: 20_260_314,
        encodings: Enc::ALL.to_vec(),
        figures: ["1", "c", "2", "3", "4", "s"].map(String::from).to_vec(),
        regenerate: false,
        gen_only: false,
        build: true,
        mount_options: None,
        harness_inspect: None,
        follow: false,
        duration: 60.0,
        rate: 1000,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--scale" => {
                options.scale = value("--scale")?
                    .parse()
                    .map_err(|_| "--scale takes a number")?
            }
            "--dir" => options.dir = PathBuf::from(value("--dir")?),
            "--seed" => {
                options.seed = value("--seed")?
                    .parse()
                    .map_err(|_| "--seed takes a whole number")?
            }
            "--encodings" => {
                options.encodings = value("--encodings")?
                    .split(',')
                    .map(|e| Enc::parse(e).ok_or(format!("unknown encoding {e:?}")))
                    .collect::<Result<_, _>>()?
            }
            "--figures" => {
                options.figures = value("--figures")?.split(',').map(String::from).collect()
            }
            "--regenerate" => options.regenerate = true,
            "--gen-only" => options.gen_only = true,
            "--no-build" => options.build = false,
            "--mount-options" => options.mount_options = Some(value("--mount-options")?),
            "--harness-inspect" => options.harness_inspect = Some(value("--harness-inspect")?),
            "--follow" => options.follow = true,
            "--duration" => {
                options.duration = value("--duration")?
                    .parse()
                    .map_err(|_| "--duration takes seconds")?
            }
            "--rate" => {
                options.rate = value("--rate")?
                    .parse()
                    .map_err(|_| "--rate takes a whole number")?
            }
            "-h" | "--help" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    if options.scale.is_nan() || options.scale <= 0.0 {
        return Err("--scale must be positive".into());
    }
    Ok(options)
}

// ---- the stores ---------------------------------------------------------------

const MIB: f64 = 1024.0 * 1024.0;
const CREATED: i64 = 1_773_000_000_000;
const LARGE: &str = "bench-large";
const SMALL: &str = "bench-small";
const BULK: &str = "bench-bulk";
const NEEDLE: &str = "quokka-needle-5e1d";
/// How long figure 2 watches an idle mount.
const IDLE: Duration = Duration::from_secs(5);
/// Readers used by the parallel variant of figure 2's floor.
const FLOOR_THREADS: usize = 16;

fn scaled(n: f64, scale: f64) -> u64 {
    (n * scale).round().max(1.0) as u64
}

/// The large store: the issue's profile session (1,307,073 events), a small
/// session, and a session whose transcript is about 100 MiB.
fn large_specs(seed: u64, scale: f64) -> Vec<SessionSpec> {
    let spec = |n: u64, id: &str, profile: Profile, events: u64, bytes: u64| SessionSpec {
        id: id.into(),
        cwd: Some("/home/ana/src/harness".into()),
        created_at: CREATED + n as i64,
        seed: Rng::derive(seed, n).next_u64(),
        profile,
        stop_events: events,
        stop_bytes: bytes,
        needle: None,
    };
    vec![
        spec(
            1,
            LARGE,
            Profile::streaming(),
            scaled(1_307_073.0, scale),
            u64::MAX,
        ),
        spec(2, SMALL, Profile::streaming(), 2_000, u64::MAX),
        spec(
            3,
            BULK,
            Profile::bulk(),
            u64::MAX,
            scaled(100.0 * MIB, scale),
        ),
    ]
}

fn many_specs(seed: u64, scale: f64) -> Vec<SessionSpec> {
    (0..scaled(10_000.0, scale).max(50))
        .map(|i| {
            let mut rng = Rng::derive(seed ^ 0x6d61_6e79, i);
            SessionSpec {
                id: format!("many-{i:05}"),
                cwd: Some(format!("/home/ana/proj-{}", i % 25)),
                created_at: CREATED + i as i64 * 60_000,
                seed: rng.next_u64(),
                profile: Profile::short(),
                stop_events: rng.range((20, 200)),
                stop_bytes: u64::MAX,
                needle: None,
            }
        })
        .collect()
}

fn search_specs(seed: u64, scale: f64) -> Vec<SessionSpec> {
    (0..scaled(200.0, scale).max(4))
        .map(|i| SessionSpec {
            id: format!("search-{i:03}"),
            cwd: Some(format!("/srv/work/repo-{}", i % 7)),
            created_at: CREATED + i as i64 * 3_600_000,
            seed: Rng::derive(seed ^ 0x7365_6172, i).next_u64(),
            profile: Profile::working(),
            stop_events: u64::MAX,
            stop_bytes: 1024 * 1024 * 1024 / 200,
            needle: (i % 40 == 7).then(|| NEEDLE.to_string()),
        })
        .collect()
}

fn describe(name: &str, store: &Store, seconds: f64) {
    let t = store.total();
    let sqlite = fs::metadata(store.root(Enc::Sqlite)).map_or(0, |m| m.len());
    let when = if seconds > 0.0 {
        format!("generated in {seconds:.1} s")
    } else {
        "cached".into()
    };
    println!(
        "  {name:<7} {:>6} sessions  {:>10} events  {:>8} frames  plaintext {:>7.1} MiB  zstd {:>6.1} MiB  sqlite {:>6.1} MiB  ({when}; {})",
        store.stats.len(),
        t.events,
        t.batches + store.stats.len() as u64,
        t.plain as f64 / MIB,
        t.zstd as f64 / MIB,
        sqlite as f64 / MIB,
        store.dir.display()
    );
}

// ---- the table ----------------------------------------------------------------

struct Row {
    figure: String,
    value: String,
    floor: String,
    ratio: String,
    target: String,
    met: String,
}

fn secs(s: f64) -> String {
    if s < 1.0 {
        format!("{:.0} ms", s * 1000.0)
    } else {
        format!("{s:.2} s")
    }
}

/// A size in KiB below 1 MiB, else in MiB.
fn human(bytes: u64) -> String {
    if (bytes as f64) < MIB {
        format!("{:.0} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", bytes as f64 / MIB)
    }
}

fn yes(ok: bool) -> String {
    if ok { "yes".into() } else { "NO".into() }
}

/// A cold time compared with its floor: ≤ `max_ratio`× the floor (and under
/// `abs_max` seconds when given).
fn time_row(figure: String, value: f64, floor: f64, max_ratio: f64, abs_max: Option<f64>) -> Row {
    let ratio = value / floor;
    let mut target = format!("≤ {max_ratio}× floor");
    let mut ok = ratio <= max_ratio;
    if let Some(max) = abs_max {
        target = format!("< {} and {target}", secs(max));
        ok &= value < max;
    }
    Row {
        figure,
        value: secs(value),
        floor: secs(floor),
        ratio: format!("{ratio:.2}×"),
        target,
        met: yes(ok),
    }
}

/// A timed row with no target of its own.
fn info_row(figure: String, value: f64, floor: f64, target: &str) -> Row {
    Row {
        figure,
        value: secs(value),
        floor: secs(floor),
        ratio: format!("{:.2}×", value / floor),
        target: target.into(),
        met: "-".into(),
    }
}

fn print_table(rows: &[Row]) {
    let header = ["figure", "value", "floor", "ratio", "target", "met?"];
    let cells: Vec<[&str; 6]> = rows
        .iter()
        .map(|r| {
            [
                &*r.figure, &*r.value, &*r.floor, &*r.ratio, &*r.target, &*r.met,
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |row: [&str; 6]| {
        let padded: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        println!("| {} |", padded.join(" | "));
    };
    line(header);
    println!("|{}|", widths.map(|w| "-".repeat(w + 2)).join("|"));
    for row in cells {
        line(row);
    }
}

// ---- helpers ----------------------------------------------------------------

struct Bench {
    options: Options,
    binary: PathBuf,
    log: PathBuf,
    mounts: u32,
    cold: bool,
}

impl Bench {
    fn mount(&mut self, store: &Path, options: &str) -> Mount {
        self.mounts += 1;
        let dir = self.options.dir.join(format!("mnt-{}", self.mounts % 4));
        let options = match &self.options.mount_options {
            Some(more) => format!("{options},{more}"),
            None => options.to_string(),
        };
        Mount::new(&self.binary, store, &dir, &options, &self.log)
    }

    /// Drops the page cache (a warning once if that is not permitted).
    fn cold(&mut self) {
        if !drop_caches() && self.cold {
            eprintln!("warning: cannot drop the page cache (not root?): \"cold\" figures are warm");
            self.cold = false;
        }
    }
}

/// Fails loudly when a session is shown unreadable (an `error` file instead of views).
fn expect_readable(mount: &Mount, name: &str) {
    let error = mount.path(name).join("error");
    if let Ok(text) = fs::read_to_string(&error) {
        panic!(
            "generated session {name} is unreadable in the mount: {}",
            text.trim()
        );
    }
    for file in ["transcript.md", "surface.jsonl"] {
        let path = mount.path(name).join(file);
        assert!(
            path.is_file(),
            "generated session {name} has no {file} in the mount"
        );
    }
}

/// Runs a timed shell command over the mount; on failure, says why the session
/// is unreadable when it is.
fn timed(mount: &Mount, name: &str, script: &str) -> (f64, String) {
    let outcome = std::panic::catch_unwind(|| time_sh(script));
    match outcome {
        Ok(result) => result,
        Err(panic) => {
            expect_readable(mount, name);
            std::panic::resume_unwind(panic)
        }
    }
}

/// Builds the release binary (unless `--no-build`) and copies it into `dir`, so
/// the whole run measures one binary even if target/ is rebuilt meanwhile.
fn find_binary(build: bool, dir: &Path) -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| manifest.join("target"), PathBuf::from);
    let binary = target.join("release/sessionfs");
    if build {
        let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .args(["build", "--release", "--quiet", "--bin", "sessionfs"])
            .current_dir(manifest)
            .status();
        if !status.is_ok_and(|s| s.success()) {
            assert!(
                binary.exists(),
                "cannot build {} and there is no binary to use",
                binary.display()
            );
            eprintln!(
                "warning: `cargo build --release --bin sessionfs` failed; using the existing {}",
                binary.display()
            );
        }
    }
    assert!(
        binary.exists(),
        "{} is missing: run `cargo build --release` (or drop --no-build)",
        binary.display()
    );
    let snapshot = dir.join("sessionfs-under-test");
    let _ = fs::remove_file(&snapshot);
    fs::copy(&binary, &snapshot).expect("copy the sessionfs binary");
    let built = fs::metadata(&binary).and_then(|m| m.modified()).ok();
    let age = built
        .and_then(|t| t.elapsed().ok())
        .map_or("?".into(), |a| format!("{:.0} min", a.as_secs_f64() / 60.0));
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--", "src"])
        .current_dir(manifest)
        .output()
        .map_or(0, |o| {
            o.stdout
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .count()
        });
    let head = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(manifest)
        .output()
        .map_or_else(
            |_| "?".into(),
            |o| String::from_utf8_lossy(&o.stdout).trim().to_string(),
        );
    println!(
        "binary under test: {} (built {age} ago from {head} with {dirty} uncommitted change(s) under src/; copied to {})",
        binary.display(),
        snapshot.display()
    );
    snapshot
}

// ---- figures ----------------------------------------------------------------

/// Figure 1: the large session, cold, against `zstd -dc` of its artifact; and
/// the issue's task (cold mount + `cat surface.jsonl` + `ls events`) on it and
/// on the 69,030-event session of figure s, against the same floors and the
/// Harness's `inspect()` when `--harness-inspect` is given.
fn figure_large(
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
        let ops = [
            (
                "cold cat surface.jsonl",
                format!("cat {name}/surface.jsonl > /dev/null"),
            ),
            (
                "cold ls events | wc -l",
                format!("ls {name}/events | wc -l"),
            ),
            (
                "cold cat transcript.md",
                format!("cat {name}/transcript.md > /dev/null"),
            ),
        ];
        for (label, script) in ops {
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
                2.0,
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
        rows.push(Row {
            figure: format!("1 peak RSS of sessionfs [{}]", enc.name()),
            value: format!("{:.0} MiB", peak as f64 / MIB),
            floor: "-".into(),
            ratio: "-".into(),
            target: "< 256 MiB".into(),
            met: yes((peak as f64) < 256.0 * MIB),
        });
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
    let artifact = spec.artifact(&store.root(Enc::Zstd), Enc::Zstd);
    bench.cold();
    let (zstd, _) = time_sh(&format!(
        "zstd -dc --no-asyncio {} > /dev/null",
        quote(&artifact)
    ));
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
    ));
    peak
}

/// What `ls | wc -l` costs on its own for `count` names: it reads, sorts and
/// prints them all, whatever the filesystem. Timed warm on tmpfs (/dev/shm),
/// or beside the stores when there is no tmpfs there.
fn ls_cost(dir: &Path, count: u64) -> f64 {
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

/// Concurrency: a small read while the large session builds cold.
fn figure_concurrency(
    bench: &mut Bench,
    store: &Store,
    rows: &mut Vec<Row>,
    notes: &mut Vec<String>,
) {
    let large = store.sessions[0].mount_name();
    let small = store.sessions[1].mount_name();
    for &enc in &bench.options.encodings.clone() {
        // The same small read on an idle, cold mount.
        let mount = bench.mount(&store.root(enc), "grace=0");
        bench.cold();
        let (idle, _) = timed(
            &mount,
            &small,
            &format!(
                "cat {}/transcript.md > /dev/null",
                quote(&mount.path(&small))
            ),
        );
        mount.finish();

        let mount = bench.mount(&store.root(enc), "grace=0");
        bench.cold();
        let big = mount.path(&large).join("transcript.md");
        let started = Instant::now();
        let builder =
            std::thread::spawn(move || time_sh(&format!("cat {} > /dev/null", quote(&big))).0);
        std::thread::sleep(Duration::from_millis(300));
        let (busy, _) = timed(
            &mount,
            &small,
            &format!(
                "cat {}/transcript.md > /dev/null",
                quote(&mount.path(&small))
            ),
        );
        let small_done = started.elapsed().as_secs_f64();
        let (listing, _) = time_sh(&format!("ls -l {} > /dev/null", quote(&mount.dir)));
        let list_done = started.elapsed().as_secs_f64();
        let build = builder.join().expect("large read");
        mount.finish();
        let before_end = small_done < build && list_done < build;
        rows.push(Row {
            figure: format!(
                "c cat small transcript.md while {large} builds [{}]",
                enc.name()
            ),
            value: secs(busy),
            floor: secs(idle),
            ratio: format!("{:.2}×", busy / idle),
            target: "< 500 ms, done before the build".into(),
            met: yes(busy < 0.5 && before_end),
        });
        notes.push(format!(
            "c [{}]: large cold cat took {} (started at 0); small cat done at {}, `ls -l` of the root ({}) done at {}",
            enc.name(),
            secs(build),
            secs(small_done),
            secs(listing),
            secs(list_done)
        ));
    }
}

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
fn figure_many(bench: &mut Bench, store: &Store, rows: &mut Vec<Row>, notes: &mut Vec<String>) {
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
            n + 1,
            "the root lists every session and flush"
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

/// Figure 3: `grep -rl` over every transcript of a 1 GiB store.
fn figure_search(bench: &mut Bench, store: &Store, rows: &mut Vec<Row>, notes: &mut Vec<String>) {
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
        let (seconds, out) = time_sh(&format!(
            "cd {} && grep -rl {NEEDLE} */transcript.md; true",
            quote(&mount.dir)
        ));
        let cpu = mount.cpu_seconds() - cpu;
        let read = mount.io().1 - read_before;
        let found: BTreeSet<String> = out
            .lines()
            .filter_map(|l| l.strip_suffix("/transcript.md"))
            .map(String::from)
            .collect();
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
        rows.push(Row {
            figure: format!("3 peak RSS of sessionfs, default cache [{}]", enc.name()),
            value: format!("{:.0} MiB", peak as f64 / MIB),
            floor: "-".into(),
            ratio: "-".into(),
            target: "≤ 256 MiB".into(),
            met: yes(peak <= 256 << 20),
        });
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

/// The bytes of a file, or of every file under a directory.
fn tree_bytes(path: &Path) -> u64 {
    match fs::metadata(path) {
        Ok(meta) if meta.is_dir() => fs::read_dir(path)
            .map(|entries| entries.flatten().map(|e| tree_bytes(&e.path())).sum())
            .unwrap_or(0),
        Ok(meta) => meta.len(),
        Err(_) => 0,
    }
}

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
fn figure_throughput(
    bench: &mut Bench,
    store: &Store,
    rows: &mut Vec<Row>,
    notes: &mut Vec<String>,
) {
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

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib / 1024 / 1024);
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cpus} CPUs, {memory} GiB RAM, Linux {}, load average {}",
        kernel.trim(),
        load_average()
    )
}

/// The 1-minute load average: other work on the machine makes every figure noisy.
fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next().map(String::from))
        .unwrap_or_default()
}

fn main() {
    let options = match parse_options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("bench: {message}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    fs::create_dir_all(&options.dir).expect("create --dir");
    println!(
        "sessionfs bench: {}; scale {}; seed {}; stores in {}",
        machine(),
        options.scale,
        options.seed,
        options.dir.display()
    );
    let binary = if options.gen_only {
        PathBuf::new()
    } else {
        find_binary(options.build, &options.dir)
    };
    let log = options.dir.join("sessionfs.log");
    let mut bench = Bench {
        options,
        binary,
        log,
        mounts: 0,
        cold: true,
    };
    if bench.options.follow {
        follow::run(&mut bench);
        return;
    }
    let (seed, scale) = (bench.options.seed, bench.options.scale);
    let encodings = bench.options.encodings.clone();
    let figures = bench.options.figures.clone();
    let wants = |f: &str| figures.iter().any(|x| x == f);
    let (large_wanted, many_wanted, search_wanted) = (
        wants("1") || wants("c") || wants("4"),
        wants("2"),
        wants("3"),
    );
    let regenerate = bench.options.regenerate;
    println!("generating stores (cached across runs):");
    let generated = |name: &str, wanted: bool, specs: Vec<SessionSpec>| {
        wanted.then(|| {
            let (store, seconds) =
                write::build(&bench.options.dir, name, specs, &Enc::ALL, regenerate);
            describe(name, &store, seconds);
            store
        })
    };
    let large = generated("large", large_wanted, large_specs(seed, scale));
    let many = generated("many", many_wanted, many_specs(seed, scale));
    let search = generated("search", search_wanted, search_specs(seed, scale));
    let steps_store = generated("steps", wants("s") || wants("1"), steps::specs(seed, scale));
    if bench.options.gen_only {
        return;
    }
    println!(
        "measuring encodings {:?} (sessionfs log: {})",
        encodings.iter().map(|e| e.name()).collect::<Vec<_>>(),
        bench.log.display()
    );
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let started = Instant::now();
    if let Some(store) = &large {
        if let (true, Some(steps_store)) = (wants("1"), &steps_store) {
            figure_large(&mut bench, store, steps_store, &mut rows, &mut notes);
        }
        if wants("c") {
            figure_concurrency(&mut bench, store, &mut rows, &mut notes);
        }
    }
    if let Some(store) = &many {
        figure_many(&mut bench, store, &mut rows, &mut notes);
    }
    if let Some(store) = &search {
        figure_search(&mut bench, store, &mut rows, &mut notes);
    }
    if let (Some(store), true) = (&large, wants("4")) {
        figure_throughput(&mut bench, store, &mut rows, &mut notes);
    }
    if let (true, Some(store)) = (wants("s"), &steps_store) {
        steps::figure(&mut bench, store, &mut rows, &mut notes);
    }
    println!(
        "measured in {:.0} s; load average now {}{}\n",
        started.elapsed().as_secs_f64(),
        load_average(),
        if bench.cold {
            ""
        } else {
            " (page cache NOT dropped)"
        }
    );
    print_table(&rows);
    println!();
    for note in notes {
        println!("  {note}");
    }
}
