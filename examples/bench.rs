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

#[path = "bench/checks.rs"]
mod checks;
#[path = "bench/concurrency.rs"]
mod concurrency;
#[path = "bench/follow.rs"]
mod follow;
#[path = "bench/harness.rs"]
mod harness;
#[path = "bench/index.rs"]
mod index;
#[path = "bench/large.rs"]
mod large;
#[path = "bench/many.rs"]
mod many;
#[path = "bench/mount.rs"]
mod mount;
#[path = "bench/options.rs"]
mod options;
#[path = "bench/prose.rs"]
mod prose;
#[path = "bench/search.rs"]
mod search;
#[path = "bench/steps.rs"]
mod steps;
#[path = "bench/stores.rs"]
mod stores;
#[path = "bench/synth.rs"]
mod synth;
#[path = "bench/table.rs"]
mod table;
#[path = "bench/throughput.rs"]
mod throughput;
#[path = "bench/write.rs"]
mod write;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use mount::{Mount, drop_caches};
use options::{Options, USAGE};
use table::print_table;
use write::{Enc, SessionSpec};

/// One run: its options, the binary under test, and the mounts it makes.
struct Bench {
    options: Options,
    binary: PathBuf,
    log: PathBuf,
    mounts: u32,
    cold: bool,
}

impl Bench {
    /// Mounts `store` with `-o options`: without the persistent index unless
    /// they name one, so every figure but figure i measures a first mount.
    fn mount(&mut self, store: &Path, options: &str) -> Mount {
        self.mounts += 1;
        let dir = self.options.dir.join(format!("mnt-{}", self.mounts % 4));
        let options = match options.contains("index=") {
            true => options.to_string(),
            false => format!("noindex,{options}"),
        };
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
    let options = match options::parse() {
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
        wants("1") || wants("c") || wants("4") || wants("i"),
        wants("2"),
        wants("3"),
    );
    let regenerate = bench.options.regenerate;
    println!("generating stores (cached across runs):");
    let generated = |name: &str, wanted: bool, specs: Vec<SessionSpec>| {
        wanted.then(|| {
            let (store, seconds) =
                write::build(&bench.options.dir, name, specs, &Enc::ALL, regenerate);
            stores::describe(name, &store, seconds);
            store
        })
    };
    let large = generated("large", large_wanted, stores::large_specs(seed, scale));
    let many = generated("many", many_wanted, stores::many_specs(seed, scale));
    let search = generated("search", search_wanted, stores::search_specs(seed, scale));
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
            large::figure(&mut bench, store, steps_store, &mut rows, &mut notes);
        }
        if wants("c") {
            concurrency::figure(&mut bench, store, &mut rows, &mut notes);
        }
    }
    if let Some(store) = &many {
        many::figure(&mut bench, store, &mut rows, &mut notes);
    }
    if let Some(store) = &search {
        search::figure(&mut bench, store, &mut rows, &mut notes);
    }
    if let (Some(store), true) = (&large, wants("i")) {
        index::figure(&mut bench, store, &mut rows, &mut notes);
    }
    if let (Some(store), true) = (&large, wants("4")) {
        throughput::figure(&mut bench, store, &mut rows, &mut notes);
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
