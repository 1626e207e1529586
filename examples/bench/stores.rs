//! The generated stores each figure reads: which sessions they hold, all
//! derived from `--seed` and sized by `--scale`, so every run measures the same
//! data.

use std::fs;

use crate::synth::{Profile, Rng};
use crate::table::MIB;
use crate::write::{Enc, SessionSpec, Store};

pub const CREATED: i64 = 1_773_000_000_000;
pub const LARGE: &str = "bench-large";
pub const SMALL: &str = "bench-small";
const BULK: &str = "bench-bulk";
pub const NEEDLE: &str = "quokka-needle-5e1d";

pub fn scaled(n: f64, scale: f64) -> u64 {
    (n * scale).round().max(1.0) as u64
}

/// The large store: the profile session (1,307,073 events), a small
/// session, and a session whose transcript is about 100 MiB.
pub fn large_specs(seed: u64, scale: f64) -> Vec<SessionSpec> {
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

pub fn many_specs(seed: u64, scale: f64) -> Vec<SessionSpec> {
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

pub fn search_specs(seed: u64, scale: f64) -> Vec<SessionSpec> {
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

pub fn describe(name: &str, store: &Store, seconds: f64) {
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
