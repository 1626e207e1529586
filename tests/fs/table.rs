//! The session table: listing by cookie, duplicate ids, lookups of new sessions, removal.

use super::*;

#[test]
fn the_root_lists_every_session_once_by_cookie_and_new_ones_at_the_end() {
    let world = World::new(50, 42, config());
    let first = world.fs.readdir(ROOT, 0, 7).expect("readdir");
    assert_eq!(first[0].name, "flush");
    assert_eq!(first[1].name, name(0));
    // A session created mid-listing does not move the entries already listed.
    world.store.insert(
        SessionHeader::new("a-new-one", 1_772_457_300_000),
        world.events.clone(),
    );
    let mut names: Vec<String> = first.iter().map(|e| e.name.clone()).collect();
    let mut offset = first.last().expect("entries").next;
    loop {
        let entries = world.fs.readdir(ROOT, offset, 7).expect("readdir");
        let Some(last) = entries.last() else { break };
        offset = last.next;
        names.extend(entries.into_iter().map(|e| e.name));
    }
    let expected: Vec<String> = std::iter::once(ROOT_OWN[0].to_string())
        .chain((0..50).map(name))
        .chain(ROOT_OWN[1..].iter().map(|n| n.to_string()))
        .collect();
    assert_eq!(names, expected);
    // A listing from the start shows it.
    let again = list(&world.fs, ROOT, 11);
    assert_eq!(again.len(), ROOT_OWN.len() + 51);
    assert!(again.contains(&"a-new-one".to_string()));
}

#[test]
fn the_first_listing_is_answered_part_by_part_and_the_lists_come_after_it() {
    let world = World::new(30, 5, config());
    // The store hands its listing over in parts of 7: it stops after two.
    world.calls.hold_listing(2);
    let first = world.fs.readdir(ROOT, 0, 10).expect("readdir");
    let names: Vec<String> = first.iter().map(|e| e.name.clone()).collect();
    let expected: Vec<String> = std::iter::once("flush".to_string())
        .chain((0..9).map(name))
        .collect();
    assert_eq!(names, expected, "answered from the first parts");
    // Past the parts taken in, a reader waits for the listing.
    let offset = first.last().expect("entries").next;
    let fs = world.fs.clone();
    let rest = std::thread::spawn(move || {
        let mut names = Vec::new();
        let mut offset = offset;
        loop {
            let entries = fs.readdir(ROOT, offset, 10).expect("readdir");
            let Some(last) = entries.last() else {
                return names;
            };
            offset = last.next;
            names.extend(entries.into_iter().map(|e| e.name));
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(!rest.is_finished(), "the rest waits for the listing");
    world.calls.release();
    let rest = rest.join().expect("reader");
    let expected: Vec<String> = (9..30)
        .map(name)
        .chain(ROOT_OWN[1..].iter().map(|n| n.to_string()))
        .collect();
    assert_eq!(rest, expected, "every session once, then the lists");
    assert_eq!(world.calls.list.load(Ordering::Relaxed), 1, "one listing");
}

/// The kernel may offer room for thousands of entries per request: while
/// the first listing streams, a reply sends what is listed so far rather than
/// waiting to fill that room.
#[test]
fn a_reply_with_room_for_more_than_is_listed_yet_is_sent_without_waiting() {
    let world = World::new(100, 1, config());
    // Ten parts of 7: more slots than a reply waits for.
    world.calls.hold_listing(10);
    let fs = world.fs.clone();
    let first = std::thread::spawn(move || fs.readdir(ROOT, 0, 1000).expect("readdir").len());
    let started = std::time::Instant::now();
    while !first.is_finished() && started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let answered = first.is_finished();
    world.calls.release();
    assert!(answered, "the reply waited for the rest of the listing");
    assert_eq!(
        first.join().expect("reader"),
        1 + 70,
        "flush and the slots listed"
    );
    assert_eq!(sessions_listed(&world.fs, 1000).len(), 100);
}

#[test]
fn an_id_stored_twice_is_refused_even_when_the_listing_comes_in_parts() {
    let store = Arc::new(MemoryStore::default());
    let events = fixture_events("release-notes");
    for n in 0..20 {
        store.insert(SessionHeader::new(&name(n), 1), events.clone());
    }
    let copy = Listing::of(
        SessionHeader::new(&name(3), 1),
        SessionKey::Row("a second copy".into()),
    );
    let fs = SessionFs::new(
        Box::new(Counted {
            inner: store,
            calls: Arc::default(),
            part: 4,
            extra: vec![copy],
        }),
        config(),
    );
    let names = sessions_listed(&fs, 100);
    assert_eq!(names.len(), 20, "{names:?}");
    let dir = fs.lookup(ROOT, &name(3)).expect("shown").ino;
    let error = fs.lookup(dir, "error").expect("an error file");
    let (fh, _) = fs.open(error.ino, false).expect("open");
    let text = String::from_utf8(read_handle(&fs, fh)).expect("text");
    assert!(text.contains("appears in 2 artifacts"), "{text}");
    assert!(fs.lookup(dir, "transcript.md").is_err());
    let other = fs.lookup(ROOT, &name(4)).expect("shown").ino;
    assert!(fs.lookup(other, "transcript.md").is_ok(), "the others read");
}

#[test]
fn a_new_session_is_found_by_the_first_lookup_without_listing_the_store() {
    let world = World::new(20, 42, config());
    list(&world.fs, ROOT, 100);
    let listed = world.calls.list.load(Ordering::Relaxed);
    for n in 0..20 {
        world.store.insert(
            SessionHeader::new(&format!("late-{n}"), 1_772_457_300_000),
            world.events.clone(),
        );
    }
    for n in 0..20 {
        let attr = world
            .fs
            .lookup(ROOT, &format!("late-{n}"))
            .expect("found at once");
        assert_eq!(attr.kind, Kind::Dir);
    }
    assert_eq!(world.calls.list.load(Ordering::Relaxed), listed);
    assert_eq!(world.calls.find.load(Ordering::Relaxed), 20);
    // Known names ask the store nothing; unknown ones one look each.
    for n in 0..20 {
        world.fs.lookup(ROOT, &name(n)).expect("known");
    }
    assert_eq!(world.calls.find.load(Ordering::Relaxed), 20);
    assert!(matches!(
        world.fs.lookup(ROOT, "nobody"),
        Err(Error::NotFound(_))
    ));
    assert_eq!(world.calls.find.load(Ordering::Relaxed), 21);
    assert_eq!(world.calls.list.load(Ordering::Relaxed), listed);
}

#[test]
fn a_removed_session_leaves_the_listing_but_open_files_keep_their_snapshot() {
    let world = World::new(3, usize::MAX, config());
    list(&world.fs, ROOT, 100);
    let transcript = world.file(&name(1), "transcript.md");
    let (fh, _) = world.fs.open(transcript, false).expect("open");
    let before = world.read_all(transcript);
    world.store.remove(&name(1));
    let names = sessions_listed(&world.fs, 100);
    assert_eq!(names, vec![name(0), name(2)]);
    assert_eq!(world.fs.take_removed(), vec![name(1)], "the kernel is told");
    assert!(world.fs.take_removed().is_empty());
    assert!(world.fs.lookup(ROOT, &name(1)).is_err());
    assert_eq!(read_handle(&world.fs, fh), before);
    world.fs.release(fh);
    // Created again, with other content, it shows the new content.
    world.store.insert(
        SessionHeader::new(&name(1), 1_772_457_300_000),
        world.events[..20].to_vec(),
    );
    let names = list(&world.fs, ROOT, 100);
    assert!(names.contains(&name(1)));
    let after = world.read_all(world.file(&name(1), "transcript.md"));
    assert_ne!(after, before);
}
