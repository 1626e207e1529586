//! Figure i: the persistent index (issue 24). The profile session (1.3 M
//! events) is copied into a scratch store (alone for JSONL, with its
//! database for SQLite) and mounted with an index of its own. The first mount
//! builds it (cold `cat surface.jsonl`) and saves its scan; each later figure
//! is a remount with the page cache dropped. Last, the log grows by 1%, with
//! events the session's own generator goes on with (so its views grow by 1%
//! too), and is remounted again: the saved scan is continued, not read again.
//! Every other figure mounts with `-o noindex`, so it measures a first mount.

use std::fs;
use std::path::Path;

use crate::Bench;
use crate::checks::{expect_readable, timed};
use crate::follow::{Appender, fresh_copy};
use crate::large::{ls_cost, zstd_floor};
use crate::mount::{quote, time_sh};
use crate::search::{tree_bytes, wait_compacted};
use crate::table::{MIB, Row, human, info_row, secs, time_row, yes};
use crate::write::{self, Enc, Encoders, SessionSpec, Store};

/// The bound on a remount's tail and middle-event reads.
const QUICK: f64 = 0.150;

pub fn figure(bench: &mut Bench, store: &Store, rows: &mut Vec<Row>, notes: &mut Vec<String>) {
    let spec = &store.sessions[0];
    let name = spec.mount_name();
    let events = store.stats_of(&spec.id).events;
    let listing = ls_cost(&bench.options.dir, events);
    let zstd = zstd_floor(bench, store, spec);
    for enc in bench.options.encodings.clone() {
        let e = enc.name();
        let index = bench.options.dir.join("index-dir");
        let _ = fs::remove_dir_all(&index);
        let scratch = fresh_copy(store, spec, enc, &bench.options.dir.join("index-scratch"));
        let log = match enc {
            Enc::Sqlite => scratch.clone(),
            _ => spec.artifact(&scratch, enc),
        };
        let options = format!("grace=0,index={}", index.display());
        let dir = |mount: &crate::mount::Mount| quote(&mount.path(&name));

        let mount = bench.mount(&scratch, &options);
        bench.cold();
        let (first, _) = timed(
            &mount,
            &name,
            &format!("cat {}/surface.jsonl > /dev/null", dir(&mount)),
        );
        expect_readable(&mount, &name);
        let (_, middle) = time_sh(&format!(
            "ls {}/events | sed -n '{}p'",
            dir(&mount),
            events / 2 + 1
        ));
        let written_bytes = tree_bytes(&index);
        // The steady state a mount that stays up reaches: the index compacted.
        let (index_bytes, compacting) = wait_compacted(&index);
        mount.finish();
        let middle = middle.trim().to_string();
        let log_bytes = fs::metadata(&log).map_or(0, |m| m.len());

        let remount = |bench: &mut Bench, script: &str| {
            let mount = bench.mount(&scratch, &options);
            bench.cold();
            let script = script.replace("{dir}", &dir(&mount));
            let (seconds, out) = timed(&mount, &name, &script);
            let rss = mount.peak_rss();
            mount.finish();
            (seconds, out, rss)
        };
        let (surface, _, rss) = remount(bench, "cat {dir}/surface.jsonl > /dev/null");
        let (tail, _, _) = remount(bench, "tail -n 50 {dir}/transcript.md > /dev/null");
        let (event, _, _) = remount(bench, &format!("cat {{dir}}/events/{middle} > /dev/null"));
        let (listed, count, _) = remount(bench, "ls {dir}/events | wc -l");
        assert_eq!(count.trim(), events.to_string(), "events/ after a remount");
        let appended = grow(spec, &scratch, enc, events, events / 100);
        let (grown, _, _) = remount(bench, "cat {dir}/surface.jsonl > /dev/null");

        rows.push(info_row(
            format!("i first mount: cold cat surface.jsonl, saving the index [{e}]"),
            first,
            first,
            "(information: what a remount is compared with)",
        ));
        rows.push(info_row(
            format!("i remount: cold cat surface.jsonl, floor zstd -dc [{e}]"),
            surface,
            zstd,
            "(information)",
        ));
        let reference = bench.options.harness_inspect.clone().map(|template| {
            crate::harness::measure(bench, &template, &store.root(enc), &spec.id, enc)
        });
        rows.push(crate::harness::row(
            format!("i remount: cold cat surface.jsonl against Harness inspect() [{e}]"),
            surface,
            reference.as_ref(),
            (1.0 / 20.0, "1/20"),
        ));
        rows.push(time_row(
            format!("i remount: cold tail -n 50 transcript.md [{e}]"),
            tail,
            first,
            1.0,
            Some(QUICK),
        ));
        rows.push(time_row(
            format!("i remount: cold cat of the middle event [{e}]"),
            event,
            first,
            1.0,
            Some(QUICK),
        ));
        rows.push(time_row(
            format!("i remount: cold ls events | wc -l, floor tmpfs [{e}]"),
            listed,
            listing,
            1.2,
            None,
        ));
        rows.push(time_row(
            format!("i remount after {appended} events (1%) appended: cat surface.jsonl [{e}]"),
            grown,
            surface,
            1.5,
            None,
        ));
        let share = index_bytes as f64 / log_bytes as f64;
        rows.push(Row {
            figure: format!("i index size, share of the stored log [{e}]"),
            value: human(index_bytes),
            floor: human(log_bytes),
            ratio: format!("{:.1}%", share * 100.0),
            target: "≤ 10%".into(),
            met: yes(share <= 0.10),
        });
        notes.push(format!(
            "i [{e}]: {} events; middle event {middle}; peak RSS at the remount's cat surface.jsonl {:.0} MiB",
            events,
            rss as f64 / MIB
        ));
        notes.push(format!(
            "i [{e}]: the index as the first mount wrote it {}, compacted {} (in about {compacting:.0} s)",
            human(written_bytes),
            human(index_bytes)
        ));
        notes.push(format!(
            "i [{e}]: first {}, remount {}: {:.1}× faster",
            secs(first),
            secs(surface),
            first / surface
        ));
        let _ = fs::remove_dir_all(bench.options.dir.join("index-scratch"));
        let _ = fs::remove_dir_all(&index);
    }
}

/// Appends `count` events to the session (which holds `events`), as its
/// generator goes on after them, in the Harness's batches; returns how many.
fn grow(spec: &SessionSpec, store: &Path, enc: Enc, events: u64, count: u64) -> u64 {
    let mut generator = write::drive(spec, |_| 0);
    assert_eq!(
        generator.emitted, events,
        "the generator replays the stored log"
    );
    let mut appender = Appender::new(store, spec, enc);
    let mut encoders = Encoders::new();
    let mut appended = 0;
    while appended < count {
        let batch = generator.take(200.min((count - appended) as usize), true);
        appended += batch.len() as u64;
        appender.append(&mut encoders, &batch);
    }
    appended
}
