//! `--follow` (issue #5): a session grows by `--rate` events per second (one
//! write-behind batch every 200 ms, as the Harness writes) for `--duration`
//! seconds while a reader tails its transcript.md. Prints the CPU time the
//! sessionfs process used meanwhile, for a small and for a large existing log:
//! following should cost CPU in proportion to the new events, not to the log.

use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::{Connection, TransactionBehavior};

use crate::Bench;
use crate::mount::{quote, time_sh};
use crate::stores::{LARGE, SMALL, large_specs};
use crate::table::{Row, print_table, secs};
use crate::write::{self, Enc, Encoders, SessionSpec};

/// Copies the session `spec` of the cached large store into a fresh store for
/// appending: the one artifact for JSONL, the whole database for SQLite.
pub fn fresh_copy(source: &write::Store, spec: &SessionSpec, enc: Enc, dir: &Path) -> PathBuf {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir).expect("create follow store");
    match enc {
        Enc::Zstd | Enc::Raw => {
            let root = dir.join("root");
            let from = spec.artifact(&source.root(enc), enc);
            let to = spec.artifact(&root, enc);
            fs::create_dir_all(to.parent().expect("parent")).expect("create session directory");
            fs::copy(&from, &to).expect("copy artifact");
            root
        }
        Enc::Sqlite => {
            let to = dir.join("sessions.db");
            fs::copy(source.root(enc), &to).expect("copy database");
            to
        }
    }
}

/// Appends batches to one session as the Harness's writer would.
pub enum Appender {
    File { path: PathBuf, zstd: bool },
    Sqlite { connection: Connection, id: String },
}

impl Appender {
    pub fn new(store: &Path, spec: &SessionSpec, enc: Enc) -> Appender {
        match enc {
            Enc::Zstd | Enc::Raw => Appender::File {
                path: spec.artifact(store, enc),
                zstd: enc == Enc::Zstd,
            },
            Enc::Sqlite => {
                let connection = Connection::open(store).expect("open database for writing");
                connection
                    .execute_batch("PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL;")
                    .expect("pragmas");
                Appender::Sqlite {
                    connection,
                    id: spec.id.clone(),
                }
            }
        }
    }

    pub fn append(&mut self, encoders: &mut Encoders, batch: &[sessionfs::json::JsonMap]) {
        match self {
            Appender::File { path, zstd } => {
                let (plain, _) = encoders.batch(batch, false);
                let bytes = if *zstd { encoders.frame(&plain) } else { plain };
                let mut file = OpenOptions::new()
                    .append(true)
                    .open(&*path)
                    .expect("open artifact for appending");
                file.write_all(&bytes).expect("append");
                file.sync_data().expect("fsync");
            }
            Appender::Sqlite { connection, id } => {
                let (_, rows) = encoders.batch(batch, true);
                let tx = connection
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .expect("begin immediate");
                write::insert_rows(&tx, id, &rows).expect("insert rows");
                tx.execute(
                    "UPDATE sessions SET revision = revision + 1 WHERE id = ?1",
                    [&*id],
                )
                .expect("bump revision");
                tx.commit().expect("commit");
            }
        }
    }
}

struct Followed {
    cpu: f64,
    appended: u64,
    existing: u64,
    build: f64,
    tail_bytes: u64,
}

fn follow_one(bench: &mut Bench, source: &write::Store, spec: &SessionSpec, enc: Enc) -> Followed {
    let dir = bench.options.dir.join(format!("follow-{}", enc.name()));
    let store = fresh_copy(source, spec, enc, &dir);
    // Replay the generator to where the stored log ends, so appends continue it.
    let mut generator = write::drive(spec, |_| 0);
    let existing = generator.emitted;
    assert_eq!(existing, source.stats_of(&spec.id).events);
    let mut appender = Appender::new(&store, spec, enc);
    let mut encoders = Encoders::new();

    // Default options: the grace period (10 s) keeps a growing log's open turn open.
    let mount = bench.mount(&store, "");
    let transcript = mount.path(&spec.mount_name()).join("transcript.md");
    let started = Instant::now();
    let mut reader = fs::File::open(&transcript)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", transcript.display()));
    let mut sink = Vec::new();
    reader.read_to_end(&mut sink).expect("read transcript");
    let build = started.elapsed().as_secs_f64();

    let period = Duration::from_millis(200);
    let per_batch = (bench.options.rate as f64 * period.as_secs_f64())
        .round()
        .max(1.0) as usize;
    let batches = (bench.options.duration / period.as_secs_f64()).round() as u64;
    let cpu_before = mount.cpu_seconds();
    let start = Instant::now();
    let mut tail_bytes = 0u64;
    let mut buffer = vec![0u8; 1 << 16];
    let mut tail = |reader: &mut fs::File| {
        loop {
            let n = reader.read(&mut buffer).expect("tail transcript");
            if n == 0 {
                break;
            }
            tail_bytes += n as u64;
        }
    };
    let mut appended = 0u64;
    for k in 0..batches {
        let due = start + period * k as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let batch = generator.take(per_batch, true);
        appended += batch.len() as u64;
        appender.append(&mut encoders, &batch);
        if k % 5 == 4 {
            tail(&mut reader);
        }
    }
    // Let the follow thread see the last batch, then read what it added.
    std::thread::sleep(Duration::from_millis(1500));
    tail(&mut reader);
    let cpu = mount.cpu_seconds() - cpu_before;
    drop(reader);
    let (_, count) = time_sh(&format!(
        "ls {}/events | wc -l",
        quote(&mount.path(&spec.mount_name()))
    ));
    let count: u64 = count.trim().parse().unwrap_or(0);
    assert!(
        count >= existing + appended,
        "events/ lists {count} entries after following, expected {}",
        existing + appended
    );
    mount.finish();
    let _ = fs::remove_dir_all(&dir);
    Followed {
        cpu,
        appended,
        existing,
        build,
        tail_bytes,
    }
}

pub fn run(bench: &mut Bench) {
    let (seed, scale) = (bench.options.seed, bench.options.scale);
    let (source, seconds) = write::build(
        &bench.options.dir,
        "large",
        large_specs(seed, scale),
        &Enc::ALL,
        bench.options.regenerate,
    );
    crate::stores::describe("large", &source, seconds);
    println!(
        "following: +{} events/s in batches every 200 ms for {} s, transcript.md tailed every second",
        bench.options.rate, bench.options.duration
    );
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for enc in bench.options.encodings.clone() {
        let mut small_cpu = None;
        for id in [SMALL, LARGE] {
            let spec = source
                .sessions
                .iter()
                .find(|s| s.id == id)
                .expect("spec")
                .clone();
            let f = follow_one(bench, &source, &spec, enc);
            notes.push(format!(
                "follow {id} [{}]: {} existing events (first read {}), {} appended, {:.0} KiB of transcript tailed, {:.3} s CPU = {:.2} ms per 1,000 new events",
                enc.name(),
                f.existing,
                secs(f.build),
                f.appended,
                f.tail_bytes as f64 / 1024.0,
                f.cpu,
                f.cpu * 1e6 / f.appended as f64
            ));
            let figure = format!(
                "#5 CPU following {id} ({} events) [{}]",
                f.existing,
                enc.name()
            );
            match small_cpu {
                None => {
                    rows.push(Row {
                        figure,
                        value: format!("{:.2} s", f.cpu),
                        floor: "-".into(),
                        ratio: "-".into(),
                        target: "(baseline)".into(),
                        met: "-".into(),
                    });
                    small_cpu = Some(f.cpu);
                }
                Some(small) => {
                    let ratio = f.cpu / small.max(0.01);
                    rows.push(Row {
                        figure,
                        value: format!("{:.2} s", f.cpu),
                        floor: format!("{small:.2} s"),
                        ratio: format!("{ratio:.2}×"),
                        target: "≤ 2× the small log".into(),
                        met: crate::table::yes(ratio <= 2.0),
                    });
                }
            }
        }
    }
    println!();
    print_table(&rows);
    println!();
    for note in notes {
        println!("  {note}");
    }
}
