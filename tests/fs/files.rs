//! Events listed while a session is read, exact sizes, and reads that fetch nothing.

use super::*;

#[test]
fn events_are_listed_while_the_session_is_still_being_read() {
    let world = World::new(0, 0, config());
    world
        .store
        .insert(SessionHeader::new("huge", 1_772_457_300_000), turns(4_000));
    let session = world.session("huge");
    // The scan stops past its first published batch until released.
    world.calls.hold(10_000);
    let events = world
        .fs
        .lookup(session, "events")
        .expect("events/ before the scan ends");
    let first = world.fs.readdir(events.ino, 0, 100).expect("first batch");
    assert_eq!(first.len(), 100);
    assert_eq!(first[0].name, "00000000-turn.start.json");
    let plus = world.fs.entry_plus(first[1].clone());
    assert!(plus.attr.is_none(), "an event's size waits for the scan");
    assert_eq!(
        world.fs.cache_usage().0,
        0,
        "the session is still being read"
    );
    world.calls.release();

    let streamed: Vec<String> = first.into_iter().map(|e| e.name).collect();
    let all = list(&world.fs, events.ino, 100);
    assert_eq!(all.len(), 20_000);
    assert_eq!(
        all[..100],
        streamed[..],
        "the built view lists the same names"
    );
    assert_eq!(world.calls.scan.load(Ordering::Relaxed), 1, "read once");
    assert!(
        world
            .fs
            .entry_plus(world.fs.readdir(events.ino, 5, 1).unwrap()[0].clone())
            .attr
            .is_some()
    );
}

#[test]
fn every_file_stats_at_the_size_a_read_returns_control_files_included() {
    let world = World::new(2, usize::MAX, config());
    let fork = world.file(&name(0), "fork");
    let boundary = first_of(&world.events, "turn/end");
    world
        .fs
        .write(fork, format!("{boundary}\n").as_bytes())
        .expect("fork");
    let mut stack = vec![ROOT];
    let mut files = 0;
    while let Some(dir) = stack.pop() {
        for entry in list(&world.fs, dir, 64) {
            let attr = world.fs.lookup(dir, &entry).expect("lookup");
            match attr.kind {
                Kind::Dir => stack.push(attr.ino),
                Kind::Symlink => {
                    let target = world.fs.readlink(attr.ino).expect("readlink");
                    assert_eq!(attr.size, target.len() as u64, "{entry}");
                }
                Kind::File => {
                    files += 1;
                    let bytes = world.read_all(attr.ino);
                    assert_eq!(attr.size, bytes.len() as u64, "{entry}");
                    assert!(!bytes.is_empty(), "{entry} is empty");
                }
            }
        }
    }
    assert!(files > 100, "{files} files");
}

/// `ls -l events/` of a huge session must not render a million events: each
/// event's size is kept from the scan, so listing with attributes
/// (`readdirplus`) and `stat` fetch nothing, and a read returns that many bytes.
#[test]
fn listing_and_stating_events_fetch_nothing_from_the_store() {
    let world = World::new(1, usize::MAX, config());
    let events = world
        .fs
        .lookup(world.session(&name(0)), "events")
        .expect("events");
    let fetched = || world.calls.fetch.load(Ordering::Relaxed);
    let before = fetched();
    let mut sizes = Vec::new();
    let mut offset = 0;
    loop {
        let entries = world.fs.readdir(events.ino, offset, 64).expect("readdir");
        let Some(last) = entries.last() else { break };
        offset = last.next;
        for entry in entries {
            let ino = entry.ino;
            let plus = world.fs.entry_plus(entry);
            let listed = plus.attr.as_ref().expect("an event's size once scanned");
            let attr = world.fs.getattr(ino).expect("getattr");
            assert_eq!(attr.size, listed.size, "{}", plus.entry.name);
            sizes.push((plus.entry.name, ino, attr.size));
        }
    }
    assert_eq!(sizes.len(), world.events.len());
    assert_eq!(fetched(), before, "listing or stating events fetched them");
    for (name, ino, size) in sizes {
        assert_eq!(world.read_all(ino).len() as u64, size, "{name}");
    }
    assert!(fetched() > before, "reads fetch the events");
}
