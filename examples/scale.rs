//! sessionfs at store scale (issues #13 and #12): what a listing, a lookup, a
//! read and an idle second cost in stores of 1,000, 10,000 and 100,000 small
//! sessions, each figure next to a reference measured in the same run.
//!
//! `cargo run --release --example scale [-- OPTIONS]` generates raw JSONL
//! stores of small sessions (one short turn each) spread over 50 project
//! directories on tmpfs (`/dev/shm`), mounts each with the release binary and
//! prints, per store size:
//! - cold `ls -l` of the root (a fresh mount), against the first-line floor:
//!   reading the first line of every log with `head` on 2 processes; beside
//!   it, for information, `ls -l` of as many names on tmpfs (ls's own cost,
//!   which the first-line floor does not hold);
//! - cold `ls -l` of the root after a remount with the persistent index the
//!   first mount saved, against the stat-only floor (`find -printf` of every
//!   log's size and time);
//! - warm `ls` of the root, against `ls` of as many names on tmpfs;
//! - 1,000 warm `cat`s of `index.jsonl`, the per-operation cost, which must not
//!   grow with the store;
//! - peak RSS of sessionfs after the listing, and per session;
//! - warm `ls by-project/*` against warm `ls` of the root (the same links,
//!   grouped), and `cat sessions.jsonl` with the peak RSS after it;
//! - (largest store) idle CPU over 20 s after 10,000 sessions were read;
//! - (stores of 10,000 and more) the same with `-o poll`, as on a network or
//!   FUSE store, after 1,000 sessions were read: polling costs what the
//!   sessions in use cost, so it must not grow with the store.
//!
//! Must run as root (it mounts). Stores are cached under `--dir`. With
//! `--drop-caches` every floor and every cold `ls -l` starts with the page
//! cache dropped: with `--dir` on a disk, that is a mount at login.

// Shared with the bench example, which uses more of it.
#[allow(dead_code)]
#[path = "bench/mount.rs"]
mod mount;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mount::{Mount, drop_caches, quote, time_sh};
use sessionfs::model::ids::{encode_segment, project_dir};

const USAGE: &str = "\
Usage: cargo run --release --example scale -- [OPTIONS]

Options:
  --sizes LIST     comma-separated store sizes (default 1000,10000,100000)
  --dir PATH       where stores are generated (default /dev/shm/sessionfs-scale)
  --idle SECS      how long the idle CPU is measured (default 20)
  --drop-caches    drop the page cache before each floor and cold `ls -l`
                   (with --dir on a disk: cold reads from the disk)
  --no-build       do not run `cargo build --release --bin sessionfs` first
  -h, --help       print this help
";

const PROJECTS: usize = 50;
const CATS: usize = 1000;

struct Options {
    sizes: Vec<usize>,
    dir: PathBuf,
    idle: f64,
    build: bool,
    drop_caches: bool,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        sizes: vec![1000, 10_000, 100_000],
        dir: PathBuf::from("/dev/shm/sessionfs-scale"),
        idle: 20.0,
        build: true,
        drop_caches: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--sizes" => {
                options.sizes = value("--sizes")?
                    .split(',')
                    .map(|s| s.parse().map_err(|_| format!("bad size {s:?}")))
                    .collect::<Result<_, _>>()?
            }
            "--dir" => options.dir = PathBuf::from(value("--dir")?),
            "--idle" => {
                options.idle = value("--idle")?
                    .parse()
                    .map_err(|_| "--idle takes a number")?
            }
            "--no-build" => options.build = false,
            "--drop-caches" => options.drop_caches = true,
            "-h" | "--help" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown option {other:?}\n{USAGE}")),
        }
    }
    Ok(options)
}

fn session_id(n: usize) -> String {
    format!("session-{n:07}")
}

/// One short turn: the shape of a small subagent session.
fn session_log(id: &str, cwd: &str, n: usize) -> String {
    let t = 1_780_000_000_000u64 + n as u64 * 1000;
    let lines = [
        format!(
            r#"{{"type":"session","version":0,"id":"{id}","createdAt":{t},"cwd":"{cwd}","delegationDepth":1,"origin":"subagent"}}"#
        ),
        format!(r#"{{"type":"turn/start","seq":0,"time":{t},"data":{{"turn":1}}}}"#),
        format!(r#"{{"type":"step/start","seq":1,"time":{t},"data":{{"turn":1,"step":1}}}}"#),
        format!(
            r#"{{"type":"user/message","seq":2,"time":{t},"data":{{"content":[{{"type":"text","text":"Check the retry policy of worker {n} and report what you find."}}],"source":{{"kind":"user"}},"role":"user","id":"u-{n}"}},"surfaceOp":"append"}}"#
        ),
        format!(
            r#"{{"type":"assistant/message","seq":3,"time":{},"data":{{"turn":1,"step":1,"message":{{"role":"assistant","content":[{{"type":"text","text":"Worker {n} retries three times with exponential backoff; the cap is 30 s."}}],"source":{{"kind":"model","provider":"deepseek","model":"deepseek-v4-flash"}},"id":"a-{n}"}}}},"sourceEventSeqs":[],"surfaceOp":"append"}}"#,
            t + 500
        ),
        format!(
            r#"{{"type":"step/end","seq":4,"time":{},"data":{{"turn":1,"step":1}}}}"#,
            t + 501
        ),
        format!(
            r#"{{"type":"turn/end","seq":5,"time":{},"data":{{"turn":1,"reason":{{"kind":"completed"}}}}}}"#,
            t + 502
        ),
    ];
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// A store of `size` sessions (cached: made once per size).
fn generate(dir: &Path, size: usize) -> PathBuf {
    let root = dir.join(format!("store-{size}"));
    let done = root.join(".complete");
    if done.exists() {
        return root;
    }
    let _ = fs::remove_dir_all(&root);
    let started = std::time::Instant::now();
    for n in 0..size {
        let cwd = format!("/srv/agents/project-{:02}", n % PROJECTS);
        let id = session_id(n);
        let session_dir = root
            .join(project_dir(Some(&cwd)))
            .join(encode_segment(&id).expect("id"));
        fs::create_dir_all(&session_dir).expect("mkdir");
        let mut file = fs::File::create(session_dir.join("session.jsonl")).expect("create");
        file.write_all(session_log(&id, &cwd, n).as_bytes())
            .expect("write");
    }
    fs::write(&done, "").expect("mark");
    eprintln!(
        "generated {size} sessions in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    root
}

/// Every log path of a store, for the floor and for picking sessions to read.
fn logs(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for project in fs::read_dir(root).expect("store").flatten() {
        if !project.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        for session in fs::read_dir(project.path()).expect("project").flatten() {
            out.push(session.path().join("session.jsonl"));
        }
    }
    out.sort();
    out
}

/// A directory of `size` empty subdirectories on tmpfs, for the `ls` reference.
fn names_dir(dir: &Path, size: usize) -> PathBuf {
    let path = dir.join(format!("names-{size}"));
    if !path.join(".complete").exists() {
        let _ = fs::remove_dir_all(&path);
        for n in 0..size {
            fs::create_dir_all(path.join(session_id(n))).expect("mkdir");
        }
        fs::write(path.join(".complete"), "").expect("mark");
    }
    path
}

/// A shell command that `cat`s the `index.jsonl` of `count` sessions spread
/// evenly over a store of `size`, their paths listed in a file under `dir`.
fn cat_script(dir: &Path, mnt: &Path, size: usize, count: usize, label: &str) -> String {
    let paths: Vec<String> = (0..size)
        .step_by((size / count).max(1))
        .take(count)
        .map(|n| {
            mnt.join(sessionfs::fs::mount_name(&session_id(n)))
                .join("index.jsonl")
                .display()
                .to_string()
        })
        .collect();
    let list = dir.join(format!("{label}-{size}.txt"));
    fs::write(&list, paths.join("\n")).expect("path list");
    format!("xargs cat < {} > /dev/null", quote(&list))
}

struct Row {
    size: usize,
    floor: f64,
    cold_ls: f64,
    stat_floor: f64,
    remount_ls: f64,
    tmpfs_ls: f64,
    tmpfs_ls_l: f64,
    warm_ls: f64,
    cats: f64,
    rss_bytes: u64,
    by_project: f64,
    catalog: f64,
    catalog_bytes: u64,
    catalog_rss: u64,
    idle: Option<(f64, f64)>,
    poll_idle: Option<(f64, f64)>,
}

/// The fastest of three runs of a shell script.
fn best_of_3(script: &str) -> f64 {
    (0..3)
        .map(|_| time_sh(script).0)
        .fold(f64::INFINITY, f64::min)
}

/// The best of 3 runs of `script`, each after the page cache is dropped when
/// `cold`.
fn best_of_3_cold(script: &str, cold: bool) -> f64 {
    (0..3)
        .map(|_| {
            if cold {
                drop_caches();
            }
            time_sh(script).0
        })
        .fold(f64::INFINITY, f64::min)
}

fn measure(options: &Options, binary: &Path, size: usize) -> Row {
    let root = generate(&options.dir, size);
    let all = logs(&root);
    assert_eq!(all.len(), size);
    let list_file = options.dir.join(format!("logs-{size}.txt"));
    fs::write(
        &list_file,
        all.iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .expect("list");
    let cold = options.drop_caches;
    let floor = best_of_3_cold(
        &format!(
            "xargs -P2 -n 2000 head -qn1 < {} > /dev/null",
            quote(&list_file)
        ),
        cold,
    );
    let names = names_dir(&options.dir, size);
    let tmpfs_ls = best_of_3(&format!("ls {} | wc -l", quote(&names)));
    let tmpfs_ls_l = best_of_3(&format!("ls -l {} | wc -l", quote(&names)));
    let stat_floor = best_of_3_cold(
        &format!(
            "find {} -name 'session.jsonl*' -printf '%s %T@\\n' > /dev/null",
            quote(&root)
        ),
        cold,
    );

    let mnt = options.dir.join("mnt");
    let log = options.dir.join("sessionfs.log");
    let index = options.dir.join(format!("index-{size}"));
    let _ = fs::remove_dir_all(&index);
    let index_option = format!("index={}", index.display());
    let mount = Mount::new(binary, &root, &mnt, &index_option, &log);
    if cold {
        drop_caches();
    }
    let (cold_ls, out) = time_sh(&format!("ls -l {} | wc -l", quote(&mnt)));
    let listed: usize = out.trim().parse().unwrap_or(0);
    // `total` line, then `flush`, every session, and `sessions.jsonl`,
    // `latest`, `by-project`, `by-date`.
    assert_eq!(listed, size + 6, "ls -l listed {listed} lines");
    let rss_bytes = mount.peak_rss();
    let warm_ls = best_of_3(&format!("ls {} | wc -l", quote(&mnt)));

    // The root's lists: `ls by-project/*` lists every session once more.
    let by_project_ls = format!("ls {}/by-project/* | wc -l", quote(&mnt));
    let (_, out) = time_sh(&by_project_ls);
    let linked: usize = out.trim().parse().unwrap_or(0);
    // Each project's name line and the blank line between, then its `latest`
    // and its links.
    assert_eq!(
        linked,
        size + 3 * PROJECTS - 1,
        "ls by-project/* listed {linked} lines"
    );
    let by_project = best_of_3(&by_project_ls);
    let catalog_path = mnt.join("sessions.jsonl");
    let (catalog, _) = time_sh(&format!("cat {} > /dev/null", quote(&catalog_path)));
    let catalog_bytes = fs::metadata(&catalog_path).map_or(0, |m| m.len());
    let catalog_rss = mount.peak_rss();

    // The same 1,000 sessions (evenly spread), read once to warm, then timed.
    let cat = cat_script(&options.dir, &mnt, size, CATS, "cats");
    time_sh(&cat);
    let cats = best_of_3(&cat);

    let idle = (size >= 10_000).then(|| {
        time_sh(&cat_script(&options.dir, &mnt, size, 10_000, "read"));
        idle_cpu(&mount, options.idle)
    });
    mount.finish();
    let poll_idle = (size >= 10_000).then(|| {
        let mount = Mount::new(binary, &root, &mnt, "poll,noindex", &log);
        time_sh(&cat_script(&options.dir, &mnt, size, CATS, "polled"));
        idle_cpu(&mount, options.idle)
    });
    // The first mount saved the headers it read as it ended.
    let mount = Mount::new(binary, &root, &mnt, &index_option, &log);
    if cold {
        drop_caches();
    }
    let (remount_ls, out) = time_sh(&format!("ls -l {} | wc -l", quote(&mnt)));
    assert_eq!(out.trim(), (size + 6).to_string(), "ls -l after a remount");
    mount.finish();
    let _ = fs::remove_dir_all(&index);
    Row {
        size,
        floor,
        cold_ls,
        stat_floor,
        remount_ls,
        tmpfs_ls,
        tmpfs_ls_l,
        warm_ls,
        cats,
        rss_bytes,
        by_project,
        catalog,
        catalog_bytes,
        catalog_rss,
        idle,
        poll_idle,
    }
}

/// The CPU `mount` uses over `seconds` of quiet, after a second to settle:
/// the seconds and the percentage of one core.
fn idle_cpu(mount: &Mount, seconds: f64) -> (f64, f64) {
    std::thread::sleep(Duration::from_secs(1));
    let before = mount.cpu_seconds();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let used = mount.cpu_seconds() - before;
    (used, used / seconds * 100.0)
}

fn main() {
    let options = match parse_options() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    if options.build {
        let status = std::process::Command::new("cargo")
            .args(["build", "--release", "--bin", "sessionfs"])
            .status()
            .expect("cargo build");
        assert!(status.success(), "build failed");
    }
    fs::create_dir_all(&options.dir).expect("bench dir");
    // A private copy, so a rebuild during the run cannot change what is measured.
    let binary = options.dir.join("sessionfs");
    fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/sessionfs"),
        &binary,
    )
    .expect("copy the release binary");
    let rows: Vec<Row> = options
        .sizes
        .iter()
        .map(|&size| measure(&options, &binary, size))
        .collect();
    let base_cats = rows.first().map_or(1.0, |r| r.cats);
    println!();
    println!(
        "| sessions | cold `ls -l` | first-line floor | ratio (≤ 2×) | tmpfs `ls -l` | warm `ls` | tmpfs `ls` | ratio (≤ 10×) | 1,000 warm `cat`s | vs smallest (≤ 1.5×) | peak RSS | per session |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {:.2} s | {:.2} s | {:.2}× | {:.2} s | {:.3} s | {:.3} s | {:.1}× | {:.2} s | {:.2}× | {:.0} MiB | {:.2} KiB |",
            r.size,
            r.cold_ls,
            r.floor,
            r.cold_ls / r.floor,
            r.tmpfs_ls_l,
            r.warm_ls,
            r.tmpfs_ls,
            r.warm_ls / r.tmpfs_ls,
            r.cats,
            r.cats / base_cats,
            r.rss_bytes as f64 / (1024.0 * 1024.0),
            r.rss_bytes as f64 / 1024.0 / r.size as f64,
        );
    }
    println!();
    println!(
        "| sessions | remount with the index: cold `ls -l` | stat-only floor | ratio (≤ 1.5×) |"
    );
    println!("|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {:.2} s | {:.2} s | {:.2}× |",
            r.size,
            r.remount_ls,
            r.stat_floor,
            r.remount_ls / r.stat_floor
        );
    }
    println!();
    println!(
        "| sessions | warm `ls by-project/*` | vs warm `ls` (≤ 1.5×) | `cat sessions.jsonl` | its size | peak RSS after it |"
    );
    println!("|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {:.3} s | {:.2}× | {:.3} s | {:.1} MiB | {:.0} MiB |",
            r.size,
            r.by_project,
            r.by_project / r.warm_ls,
            r.catalog,
            r.catalog_bytes as f64 / (1024.0 * 1024.0),
            r.catalog_rss as f64 / (1024.0 * 1024.0),
        );
    }
    for r in &rows {
        if let Some((seconds, percent)) = r.idle {
            println!(
                "idle CPU, {} sessions, after 10,000 were read: {seconds:.3} s over {:.0} s = {percent:.2}% of a core (target ≤ 0.5%)",
                r.size, options.idle
            );
        }
    }
    for r in &rows {
        if let Some((seconds, percent)) = r.poll_idle {
            println!(
                "idle CPU with -o poll, {} sessions, after 1,000 were read: {seconds:.3} s over {:.0} s = {percent:.2}% of a core (target ≤ 1%)",
                r.size, options.idle
            );
        }
    }
}
