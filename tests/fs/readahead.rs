//! Sessions built ahead of a reader that uses them in listing order: when it
//! happens, that a reader joins the build instead of starting a second one,
//! and that it changes no byte shown.

use std::collections::BTreeMap;
use std::time::Instant;

use super::*;

fn ahead() -> FsConfig {
    FsConfig {
        readahead: true,
        ..config()
    }
}

/// The store's scans once they reach `scans`, or after 10 s.
fn scans_reaching(world: &World, scans: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = world.calls.scan.load(Ordering::Relaxed);
        if now >= scans || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The store's scans after a pause long enough for a build ahead to start.
fn scans_after_a_pause(world: &World) -> usize {
    std::thread::sleep(Duration::from_millis(300));
    world.calls.scan.load(Ordering::Relaxed)
}

#[test]
fn sessions_read_in_order_are_built_one_ahead_and_each_read_once() {
    let world = World::new(6, usize::MAX, ahead());
    // Readers walk what the root lists.
    sessions_listed(&world.fs, 100);
    world.read_all(world.file(&name(0), "transcript.md"));
    assert_eq!(scans_after_a_pause(&world), 1, "one use is no order yet");
    world.read_all(world.file(&name(1), "transcript.md"));
    assert_eq!(
        scans_reaching(&world, 3),
        3,
        "the next session is built before it is asked for"
    );
    for n in 2..6 {
        world.read_all(world.file(&name(n), "transcript.md"));
    }
    // Each build ahead was joined or found built by the reader, and nothing
    // lies past the last session.
    assert_eq!(scans_after_a_pause(&world), 6, "each session read once");
}

#[test]
fn a_reader_going_backwards_is_read_ahead_backwards_and_a_jump_starts_nothing() {
    let world = World::new(8, usize::MAX, ahead());
    sessions_listed(&world.fs, 100);
    // A shell glob such as `*/transcript.md` stats the sessions in reverse.
    world.file(&name(7), "transcript.md");
    world.file(&name(6), "transcript.md");
    assert_eq!(scans_reaching(&world, 3), 3);
    world.read_all(world.file(&name(2), "surface.jsonl"));
    assert_eq!(
        scans_after_a_pause(&world),
        4,
        "a jump builds nothing ahead"
    );
    world.read_all(world.file(&name(5), "surface.jsonl"));
    assert_eq!(
        scans_after_a_pause(&world),
        4,
        "the session built ahead was the one before"
    );
}

#[test]
fn nothing_is_built_ahead_when_turned_off_or_when_the_cache_cannot_hold_two() {
    let small = FsConfig {
        cache_bytes: 1,
        ..ahead()
    };
    for config in [config(), small] {
        let world = World::new(4, usize::MAX, config);
        sessions_listed(&world.fs, 100);
        world.read_all(world.file(&name(0), "transcript.md"));
        world.read_all(world.file(&name(1), "transcript.md"));
        assert_eq!(scans_after_a_pause(&world), 2);
    }
}

#[test]
fn a_session_whose_transcript_was_spilled_is_not_built_ahead() {
    let probe = World::new(1, usize::MAX, config());
    probe.read_all(probe.file(&name(0), "surface.jsonl"));
    let one_view = probe.fs.cache_usage().1;
    // Room for two views and a half: reading on drops the oldest views, their
    // transcripts spilled to the page cache (a glob stats those again, and
    // `grep` reads them, without a build).
    let world = World::new(
        8,
        usize::MAX,
        FsConfig {
            cache_bytes: one_view * 5 / 2,
            ..ahead()
        },
    );
    sessions_listed(&world.fs, 100);
    // Out of order, so nothing is built ahead: session 2 is dropped as 6 is read.
    for n in [2, 4, 6] {
        world.read_all(world.file(&name(n), "surface.jsonl"));
    }
    assert_eq!(world.fs.cache_usage().0, 2);
    world.read_all(world.file(&name(0), "surface.jsonl"));
    // On in order to session 1: the next, session 2, is spilled, and not built.
    world.read_all(world.file(&name(1), "surface.jsonl"));
    assert_eq!(scans_after_a_pause(&world), 5);
}

/// Every file and link of the tree, by path, read in listing order as `tar`
/// and `grep -r` read it: the root's own entries, then each session's
/// directory, after which `after` is called with its number.
fn every_file(world: &World, after: impl Fn(usize)) -> BTreeMap<String, Vec<u8>> {
    fn walk(world: &World, dir: u64, path: &str, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in list(&world.fs, dir, 64) {
            if dir == ROOT && !ROOT_OWN.contains(&entry.as_str()) {
                continue;
            }
            let attr = world.fs.lookup(dir, &entry).expect("lookup");
            let path = format!("{path}/{entry}");
            match attr.kind {
                Kind::Dir => walk(world, attr.ino, &path, out),
                Kind::Symlink => {
                    let target = world.fs.readlink(attr.ino).expect("readlink");
                    out.insert(path, target.into_bytes());
                }
                Kind::File => {
                    let bytes = world.read_all(attr.ino);
                    assert_eq!(attr.size, bytes.len() as u64, "{path}");
                    out.insert(path, bytes);
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(world, ROOT, "", &mut out);
    for (n, session) in sessions_listed(&world.fs, 64).iter().enumerate() {
        walk(
            world,
            world.session(session),
            &format!("/{session}"),
            &mut out,
        );
        after(n);
    }
    out
}

#[test]
fn a_tree_read_with_sessions_built_ahead_is_the_tree_read_without() {
    const SESSIONS: usize = 12;
    let trees = [false, true].map(|readahead| {
        let world = World::new(
            0,
            0,
            FsConfig {
                readahead,
                ..config()
            },
        );
        for n in 0..SESSIONS {
            world.put(&name(n), 3 + n * 9);
        }
        let tree = every_file(&world, |n| {
            // Past the first two, each session is read while the next one is
            // built ahead, or after it was.
            if readahead && (1..SESSIONS - 1).contains(&n) {
                assert_eq!(scans_reaching(&world, n + 2), n + 2, "after session {n}");
            }
        });
        (tree, world.calls.scan.load(Ordering::Relaxed))
    });
    let [(without, scans_without), (with, scans_with)] = trees;
    assert!(without.len() > 200, "{} files", without.len());
    assert_eq!(
        without.keys().collect::<Vec<_>>(),
        with.keys().collect::<Vec<_>>()
    );
    for (path, bytes) in &without {
        assert!(
            with[path] == *bytes,
            "{path} differs with sessions built ahead"
        );
    }
    assert_eq!(scans_without, SESSIONS);
    assert_eq!(
        scans_with, SESSIONS,
        "a session built ahead is not built again"
    );
}
