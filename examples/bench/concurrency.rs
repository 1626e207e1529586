//! Figure c: a small session stays quick to read while the large session
//! builds cold on the same mount.

use std::time::{Duration, Instant};

use crate::Bench;
use crate::checks::timed;
use crate::mount::{quote, time_sh};
use crate::table::{Row, secs, yes};
use crate::write::Store;

/// Concurrency: a small read while the large session builds cold.
pub fn figure(bench: &mut Bench, store: &Store, rows: &mut Vec<Row>, notes: &mut Vec<String>) {
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
