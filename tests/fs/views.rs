//! Views under a budget, and what descriptors see as files grow or are rewritten.

use super::*;

#[test]
fn views_beyond_the_budget_are_dropped_least_recently_used_first() {
    let config = FsConfig {
        cache_bytes: 1,
        ..config()
    };
    let world = World::new(30, usize::MAX, config);
    let mut first = Vec::new();
    for n in 0..30 {
        let bytes = world.read_all(world.file(&name(n), "surface.jsonl"));
        if n == 0 {
            first = bytes;
        }
        let (views, _) = world.fs.cache_usage();
        assert!(views <= 1, "{views} views loaded under a 1-byte budget");
    }
    let scans = world.calls.scan.load(Ordering::Relaxed);
    assert_eq!(
        world.read_all(world.file(&name(0), "surface.jsonl")),
        first,
        "an evicted session is read again, to the same bytes"
    );
    assert!(world.calls.scan.load(Ordering::Relaxed) > scans);

    // With room for all, each session is built once however often it is read.
    let world = World::new(30, usize::MAX, self::config());
    for _ in 0..3 {
        for n in 0..30 {
            world.read_all(world.file(&name(n), "transcript.md"));
        }
    }
    assert_eq!(world.calls.scan.load(Ordering::Relaxed), 30);
    let (views, bytes) = world.fs.cache_usage();
    assert_eq!(views, 30);
    assert!(bytes > 0);
}

/// A keeper of saved scans that keeps nothing and says it holds `0` bytes
/// queued for writing.
#[derive(Debug)]
struct Backlog(usize);

impl sessionfs::view::SavedScans for Backlog {
    fn load(&self, _key: &SessionKey) -> Option<Vec<u8>> {
        None
    }
    fn save(&self, _key: &SessionKey, _bytes: Vec<u8>) {}
    fn queued_bytes(&self) -> usize {
        self.0
    }
}

#[test]
fn scans_queued_for_saving_count_against_the_cache_budget() {
    const BUDGET: usize = 1 << 30;
    let loaded = |queued: usize| {
        let world = World::new(
            3,
            usize::MAX,
            FsConfig {
                cache_bytes: BUDGET,
                saved_scans: Some(Arc::new(Backlog(queued))),
                ..config()
            },
        );
        for n in 0..3 {
            world.read_all(world.file(&name(n), "transcript.md"));
        }
        world.fs.cache_usage().0
    };
    assert_eq!(loaded(0), 3);
    assert_eq!(loaded(BUDGET - 1), 1, "the queue leaves room for one view");
}

#[test]
fn a_handle_follows_growth_and_keeps_its_snapshot_when_rewritten() {
    let world = World::new(0, 0, config());
    let events = &world.events;
    // Cut inside a tool call, before its result.
    let cut = first_of(events, "tool/call") + 1;
    world.put("grow", cut);
    let transcript = world.file("grow", "transcript.md");
    let (fh, _) = world.fs.open(transcript, false).expect("open");
    let start = read_handle(&world.fs, fh);
    let index = world.file("grow", "index.jsonl");
    let (index_fh, _) = world.fs.open(index, false).expect("open index");
    let index_start = read_handle(&world.fs, index_fh);
    world.put("grow", usize::MAX);
    // A file that only grew keeps its inode, and its readers read on.
    assert_eq!(world.file("grow", "index.jsonl"), index, "same inode");
    let index_now = world.read_all(index);
    assert!(index_now.len() > index_start.len() && index_now.starts_with(&index_start));
    assert_eq!(read_handle(&world.fs, index_fh), index_now);
    world.fs.release(index_fh);
    let grown = read_handle(&world.fs, fh);
    assert!(grown.len() > start.len(), "the descriptor reads on");
    assert!(grown.starts_with(&start));
    let attr = world.fs.getattr_open(transcript, fh).expect("fstat");
    assert_eq!(attr.size, grown.len() as u64);
    world.fs.release(fh);
    assert_eq!(world.read_all(transcript), grown);
    assert_eq!(world.fs.open_handles(), 0);
}

#[test]
fn a_transcript_grown_over_many_segments_is_followed_and_spilled_whole() {
    let world = World::new(
        0,
        0,
        FsConfig {
            cache_bytes: 1,
            ..config()
        },
    );
    let spills = world.fs.spill_receiver();
    let header = SessionHeader::new("big", 1_772_457_300_000);
    let mut events = long_turn(1, 0, 700 << 10);
    world.store.insert(header.clone(), events.clone());
    let transcript = world.file("big", "transcript.md");
    let (fh, _) = world.fs.open(transcript, false).expect("open");
    // Reads of a size no segment divides, so some span two segments.
    let mut held = Vec::new();
    read_on(&world.fs, fh, &mut held, 100_000);
    for turn in 2..=8 {
        events.extend(long_turn(turn, events.len() as u64, 700 << 10));
        world.store.insert(header.clone(), events.clone());
        let before = held.len();
        read_on(&world.fs, fh, &mut held, 100_000);
        assert!(held.len() > before, "turn {turn}: the descriptor reads on");
        let attr = world.fs.getattr_open(transcript, fh).expect("fstat");
        assert_eq!(attr.size, held.len() as u64, "turn {turn}");
    }
    assert!(held.len() > 4 * SEGMENT, "{} bytes", held.len());
    world.fs.release(fh);
    let (fh, _) = world.fs.open(transcript, false).expect("open again");
    let mut again = Vec::new();
    read_on(&world.fs, fh, &mut again, 100_000);
    world.fs.release(fh);
    assert!(again == held, "read again from the start");
    let text = String::from_utf8(held.clone()).expect("utf8");
    let lines = text
        .lines()
        .filter(|l| l.starts_with("turn 8 line "))
        .count();
    assert!(lines > 10_000, "{lines} lines of the last turn");

    // Dropped, it goes to the kernel's page cache whole, segment by segment.
    world.store.insert(
        SessionHeader::new("other", 1_772_457_300_000),
        long_turn(1, 0, 10),
    );
    world.file("other", "transcript.md");
    let spill = spills.try_recv().expect("the dropped view's transcript");
    assert_eq!(spill.ino, transcript);
    let sizes: Vec<usize> = spill.bytes.pieces().map(<[u8]>::len).collect();
    assert!(sizes.len() > 3, "{sizes:?}");
    assert_eq!(spill.bytes.to_vec(), held);
}

#[test]
fn a_rewritten_file_keeps_the_snapshot_its_descriptor_opened() {
    // No grace: a log that ends inside a tool call is shown closed at once, with
    // a synthetic result in surface.jsonl that gives way when the log goes on.
    let world = World::new(
        0,
        0,
        FsConfig {
            grace: Duration::ZERO,
            ..config()
        },
    );
    let surface = quiet_inside_a_tool_call(&world);
    let (fh, _) = world.fs.open(surface, false).expect("open");
    let held = read_handle(&world.fs, fh);
    assert!(
        String::from_utf8_lossy(&held).contains("tool"),
        "the synthetic result is shown"
    );
    world.put("quiet", usize::MAX);
    let moved = world.file("quiet", "surface.jsonl");
    assert_ne!(moved, surface, "a rewritten file moves to a new inode");
    let now = world.read_all(moved);
    assert!(!now.starts_with(&held), "the surface was rewritten");
    assert_eq!(
        read_handle(&world.fs, fh),
        held,
        "the descriptor keeps its snapshot"
    );
    assert_eq!(
        world.fs.getattr_open(surface, fh).expect("fstat").size,
        held.len() as u64,
        "fstat on the old descriptor is the size it reads"
    );
    assert_eq!(
        world.fs.getattr(moved).expect("stat").size,
        now.len() as u64
    );
    world.fs.release(fh);
    assert!(
        matches!(world.fs.getattr(surface), Err(Error::Stale(_))),
        "the old inode, held by no descriptor, is stale: the kernel looks the name up again"
    );
}

#[test]
fn a_dropped_views_transcript_is_sized_and_opened_without_reading_the_log_again() {
    let world = World::new(
        2,
        30,
        FsConfig {
            cache_bytes: 1,
            ..config()
        },
    );
    assert!(world.events.len() > 30);
    let spills = world.fs.spill_receiver();
    let first = world.file(&name(0), "transcript.md");
    let size = world.fs.getattr(first).expect("stat").size;
    world.file(&name(1), "transcript.md");
    let spill = spills.try_recv().expect("the dropped view's transcript");
    assert_eq!(spill.ino, first);
    assert_eq!(spill.bytes.len() as u64, size);
    let scans = world.calls.scan.load(Ordering::Relaxed);
    assert_eq!(scans, 2);

    // A glob stats it again and grep opens it: the kernel holds its pages.
    assert_eq!(world.file(&name(0), "transcript.md"), first);
    assert_eq!(world.fs.getattr(first).expect("stat").size, size);
    let (fh, _) = world.fs.open(first, false).expect("open");
    assert_eq!(world.fs.getattr_open(first, fh).expect("fstat").size, size);
    assert_eq!(world.calls.scan.load(Ordering::Relaxed), scans);

    // A read the kernel cannot answer reads the session again, to the same bytes.
    assert_eq!(read_handle(&world.fs, fh), spill.bytes.to_vec());
    assert_eq!(world.calls.scan.load(Ordering::Relaxed), scans + 1);

    // Dropped again while the descriptor holds its bytes: the kernel's check
    // before each read (`fstat` through the descriptor) reads nothing again.
    world.read_all(world.file(&name(1), "surface.jsonl"));
    assert_eq!(
        world.fs.cache_usage().0,
        1,
        "only the other session is loaded"
    );
    let scans = world.calls.scan.load(Ordering::Relaxed);
    assert_eq!(world.fs.getattr_open(first, fh).expect("fstat").size, size);
    assert_eq!(world.calls.scan.load(Ordering::Relaxed), scans);
    world.fs.release(fh);

    // A log changed since is read again before its size is given.
    world.store.insert(
        SessionHeader::new(&name(0), 1_772_457_300_000),
        world.events.clone(),
    );
    let before = world.calls.scan.load(Ordering::Relaxed);
    let grown_size = world.fs.getattr(first).expect("stat").size;
    assert!(grown_size > size, "{grown_size} > {size}");
    assert_eq!(world.calls.scan.load(Ordering::Relaxed), before + 1);
}

#[test]
fn a_rewritten_transcript_is_a_new_inode_and_the_old_one_keeps_its_descriptors() {
    let world = World::new(1, usize::MAX, config());
    let old = world.file(&name(0), "transcript.md");
    let (fh, _) = world.fs.open(old, false).expect("open");
    let held = read_handle(&world.fs, fh);

    // The log is replaced by one whose transcript does not extend the old one.
    let mut events = world.events.clone();
    let user = first_of(&events, "user/message");
    events[user]["data"]["content"][0]["text"] = serde_json::json!("a different question");
    world
        .store
        .insert(SessionHeader::new(&name(0), 1_772_457_300_000), events);
    world.calls.incarnation.fetch_add(1, Ordering::Relaxed);

    let new = world.file(&name(0), "transcript.md");
    assert_ne!(new, old, "a rewritten transcript is a new inode");
    let now = world.read_all(new);
    assert!(String::from_utf8_lossy(&now).contains("a different question"));
    // `fstat` comes with or without the descriptor: both give its snapshot.
    assert_eq!(world.fs.getattr(old).expect("stat").size, held.len() as u64);
    assert_eq!(
        world.fs.getattr_open(old, fh).expect("fstat").size,
        held.len() as u64
    );
    assert_eq!(
        read_handle(&world.fs, fh),
        held,
        "the descriptor keeps its bytes"
    );
    world.fs.release(fh);
    let error = world.fs.getattr(old).expect_err("the old lineage is gone");
    assert_eq!(error.errno(), libc::ESTALE, "{error}");
}

#[test]
fn a_rewrite_while_the_view_was_dropped_still_moves_the_file_and_no_rewrite_keeps_it() {
    // A 1-byte budget drops every view but the one in use.
    let world = World::new(
        2,
        usize::MAX,
        FsConfig {
            cache_bytes: 1,
            grace: Duration::ZERO,
            ..config()
        },
    );
    let surface = quiet_inside_a_tool_call(&world);
    let shown = world.read_all(surface);
    // Another session's use drops this view; nothing changed: same inode.
    world.read_all(world.file(&name(0), "surface.jsonl"));
    assert_eq!(world.file("quiet", "surface.jsonl"), surface);
    assert_eq!(world.read_all(surface), shown);
    // Dropped again, then rewritten (the closer gives way): a new inode.
    world.read_all(world.file(&name(1), "surface.jsonl"));
    world.put("quiet", usize::MAX);
    let moved = world.file("quiet", "surface.jsonl");
    assert_ne!(
        moved, surface,
        "the rewrite is found against what was shown"
    );
    assert!(!world.read_all(moved).starts_with(&shown));
}

/// Stores session `quiet` as a log that ends inside a tool call, before its
/// result; returns its `surface.jsonl`.
fn quiet_inside_a_tool_call(world: &World) -> u64 {
    let cut = first_of(&world.events, "tool/call") + 1;
    world.put("quiet", cut);
    world.file("quiet", "surface.jsonl")
}
