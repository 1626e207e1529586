//! Figure s (issue 16): `steps/` of a 69,030-event session. Listing it must cost
//! no more than the session's first build, and reading one call's
//! `messages.jsonl` cold at most 2× reading `surface.jsonl` cold.

use crate::Bench;
use crate::checks::timed;
use crate::mount::quote;
use crate::stores::{CREATED, scaled};
use crate::synth::{Profile, Rng};
use crate::table::{Row, secs, time_row};
use crate::write::{SessionSpec, Store};

pub const STEPS_SESSION: &str = "bench-steps";

pub fn specs(seed: u64, scale: f64) -> Vec<SessionSpec> {
    vec![SessionSpec {
        id: STEPS_SESSION.into(),
        cwd: Some("/home/ana/src/harness".into()),
        created_at: CREATED,
        seed: Rng::derive(seed ^ 0x7374_6570, 1).next_u64(),
        profile: Profile::streaming(),
        stop_events: scaled(69_030.0, scale),
        stop_bytes: u64::MAX,
        needle: None,
    }]
}

pub fn figure(bench: &mut Bench, store: &Store, rows: &mut Vec<Row>, notes: &mut Vec<String>) {
    let name = store.sessions[0].mount_name();
    for &enc in &bench.options.encodings.clone() {
        // The first build, cold, then listing steps/ in the same mount.
        let mount = bench.mount(&store.root(enc), "grace=0");
        bench.cold();
        let dir = mount.path(&name);
        let (build, _) = timed(
            &mount,
            &name,
            &format!("cat {}/header.json > /dev/null", quote(&dir)),
        );
        let (listing, out) = timed(&mount, &name, &format!("ls {}/steps | wc -l", quote(&dir)));
        let calls: u64 = out.trim().parse().unwrap_or(0);
        assert!(calls > 0, "{name} lists no model calls");
        let (_, last) = timed(
            &mount,
            &name,
            &format!("ls {}/steps | tail -1", quote(&dir)),
        );
        let last = last.trim().to_string();
        mount.finish();
        rows.push(time_row(
            format!("s ls steps/ | wc -l after the build [{}]", enc.name()),
            listing,
            build,
            1.0,
            None,
        ));
        // Cold reads from a fresh mount each: surface.jsonl, then the last call's messages.
        let mut cold_read = |file: &str| {
            let mount = bench.mount(&store.root(enc), "grace=0");
            bench.cold();
            let path = mount.path(&name).join(file);
            let (seconds, _) = timed(&mount, &name, &format!("cat {} > /dev/null", quote(&path)));
            let size = std::fs::metadata(&path).map_or(0, |m| m.len());
            mount.finish();
            (seconds, size)
        };
        let (surface, surface_size) = cold_read("surface.jsonl");
        let messages_file = format!("steps/{last}/messages.jsonl");
        let (messages, messages_size) = cold_read(&messages_file);
        rows.push(time_row(
            format!("s cold cat one call's messages.jsonl [{}]", enc.name()),
            messages,
            surface,
            2.0,
            None,
        ));
        notes.push(format!(
            "s [{}]: {name}: {calls} calls; cold build (cat header.json) {}; floor of the second row: cold cat surface.jsonl ({} bytes); the call read: {last} ({} bytes)",
            enc.name(),
            secs(build),
            surface_size,
            messages_size
        ));
    }
}
