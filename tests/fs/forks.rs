//! Forks (validation, the order of table and write-behind, errnos), the no-walk invariant, and stores that cannot be read now.

use super::*;

#[test]
fn forks_are_validated_and_children_appear_at_once() {
    let world = World::new(1, usize::MAX, config());
    let fork = world.file(&name(0), "fork");
    for bad in [&b"999999\n"[..], b"x\n", b"-1\n", b""] {
        assert!(
            matches!(world.fs.write(fork, bad), Err(Error::Invalid(_))),
            "{bad:?}"
        );
    }
    let boundary = first_of(&world.events, "turn/end");
    let command = format!("{boundary} kid\n");
    assert!(
        matches!(world.fs.write(fork, b"3 kid\n"), Err(Error::Invalid(_))),
        "inside an open turn"
    );
    world.fs.write(fork, command.as_bytes()).expect("fork");
    assert!(matches!(
        world.fs.write(fork, command.as_bytes()),
        Err(Error::Exists(_))
    ));
    let status = String::from_utf8(world.read_all(fork)).expect("text");
    assert!(status.contains("-> kid"), "{status}");
    assert!(status.contains("already exists"), "{status}");
    let kid = world.session("kid");
    let children = world
        .fs
        .lookup(world.session(&name(0)), "children")
        .expect("children");
    assert_eq!(list(&world.fs, children.ino, 10), vec!["kid".to_string()]);
    let parent = world.fs.lookup(kid, "parent").expect("parent link");
    assert_eq!(
        world.fs.readlink(parent.ino).expect("target"),
        format!("../{}", name(0))
    );
    let events = world.fs.lookup(kid, "events").expect("events");
    // The seed, then the `session/end-seed` marker.
    assert_eq!(list(&world.fs, events.ino, 100).len(), boundary + 2);
    world
        .fs
        .write(world.file("kid", "flush"), b"\n")
        .expect("flush");
    assert!(world.store.contains("kid"), "durable in the store");
    // The seed, then the `session/end-seed` marker.
    assert_eq!(list(&world.fs, events.ino, 100).len(), boundary + 2);
}

#[test]
fn no_operation_walks_the_store() {
    let world = World::new(5000, 42, config());
    let names = sessions_listed(&world.fs, 500);
    assert_eq!(names.len(), 5000);
    assert_eq!(world.calls.list.load(Ordering::Relaxed), 1, "one listing");
    // Using sessions asks the store about those sessions only.
    for n in 0..40 {
        world.read_all(world.file(&name(n), "index.jsonl"));
    }
    // A memory store has no directory to watch, so it is followed by polling:
    // one round checks the loaded sessions, not the store.
    let before = world.calls.revision.load(Ordering::Relaxed);
    world.fs.follow_changes();
    let polled = world.calls.revision.load(Ordering::Relaxed) - before;
    assert_eq!(polled, 40, "a poll checks the loaded sessions only");
    // A batch of a listing costs its entries.
    let batch = world.fs.readdir(ROOT, 3999 + 1, 10).expect("batch");
    assert_eq!(
        batch.iter().map(|e| e.name.clone()).collect::<Vec<_>>(),
        (3999..4009).map(name).collect::<Vec<_>>()
    );
    assert_eq!(world.calls.list.load(Ordering::Relaxed), 1);
    let unique: BTreeSet<_> = names.iter().collect();
    assert_eq!(unique.len(), names.len());
}

#[test]
fn a_store_that_cannot_be_read_now_is_no_damage_and_is_read_again() {
    let world = World::new(2, usize::MAX, config());
    list(&world.fs, ROOT, 100);
    let shown = world.read_all(world.file(&name(0), "transcript.md"));
    world.calls.busy.store(true, Ordering::Relaxed);
    // A view already shown stays as it is.
    assert_eq!(world.read_all(world.file(&name(0), "transcript.md")), shown);
    // One never read says why, with the store's errno and no advice to restore.
    let session = world.session(&name(1));
    assert!(world.fs.lookup(session, "transcript.md").is_err());
    let error = String::from_utf8(world.read_all(world.file(&name(1), "error"))).expect("utf8");
    assert!(error.contains("the store is busy"), "{error}");
    assert!(
        !error.contains("restore") && !error.contains("damaged"),
        "{error}"
    );
    // The store could not be listed: nothing is taken for removed.
    assert_eq!(sessions_listed(&world.fs, 100).len(), 2);
    world.calls.busy.store(false, Ordering::Relaxed);
    // The next access reads it.
    assert!(world.fs.lookup(session, "error").is_err());
    let read = world.read_all(world.file(&name(1), "transcript.md"));
    assert_eq!(
        read.len(),
        shown.len(),
        "the same events as the other session"
    );
}

#[test]
fn a_fork_child_is_in_the_table_before_it_is_submitted_for_writing() {
    let store = Arc::new(MemoryStore::default());
    let events = fixture_events("release-notes");
    store.insert(
        SessionHeader::new("parent", 1_772_457_300_000),
        events.clone(),
    );
    let calls = Arc::new(Calls::default());
    let fs = SessionFs::new(
        Box::new(Counted {
            inner: store.clone(),
            calls: calls.clone(),
            part: usize::MAX,
            extra: Vec::new(),
        }),
        FsConfig {
            write_window: Duration::ZERO,
            ..config()
        },
    );
    // The writer first looks the session it is asked to write up through the
    // filesystem: a fork child may be written the moment it is submitted (a
    // root `flush` from another process), so it must be in the table by
    // then, or its durable hook finds no slot to serve from the store.
    let unseen = Arc::new(Mutex::new(Vec::new()));
    *calls.before_create.lock().unwrap() = Some(Box::new({
        let (fs, unseen) = (Arc::downgrade(&fs), unseen.clone());
        move |header: &SessionHeader| {
            if fs
                .upgrade()
                .is_some_and(|fs| fs.lookup(ROOT, &header.id).is_err())
            {
                unseen.lock().unwrap().push(header.id.clone());
            }
        }
    }));
    let parent = fs.lookup(ROOT, "parent").expect("parent").ino;
    let fork = fs.lookup(parent, "fork").expect("fork").ino;
    let boundary = first_of(&events, "turn/end");
    // With no write-behind window a child is written the moment it is
    // submitted, as a root `flush` from another process may write it.
    let children = 3;
    for n in 0..children {
        let command = format!("{boundary} child-{n}\n");
        fs.write(fork, command.as_bytes()).expect("fork");
    }
    assert_eq!(*unseen.lock().unwrap(), Vec::<String>::new());
    for n in 0..children {
        let id = format!("child-{n}");
        assert!(store.contains(&id), "{id} is durable");
        // Served from the store now: its events are all there.
        let child = fs.lookup(ROOT, &id).expect("child").ino;
        let listed = fs.lookup(child, "events").expect("events").ino;
        assert_eq!(list(&fs, listed, 1000).len(), boundary + 2, "{id}");
    }
}

#[test]
fn a_fork_of_a_session_that_cannot_be_read_now_answers_the_stores_errno() {
    // No room for two views: using one session drops the other's.
    let world = World::new(
        2,
        usize::MAX,
        FsConfig {
            cache_bytes: 0,
            ..config()
        },
    );
    let fork = world.file(&name(0), "fork");
    let boundary = first_of(&world.events, "turn/end");
    world.file(&name(1), "fork");
    // The dropped session is read again now, from a busy store.
    world.calls.busy.store(true, Ordering::Relaxed);
    let refused = world
        .fs
        .write(fork, format!("{boundary} kid\n").as_bytes())
        .expect_err("the store is busy");
    assert_eq!(refused.errno(), libc::EBUSY, "{refused}");
    assert!(
        refused.to_string().contains("the store is busy"),
        "{refused}"
    );
    world.calls.busy.store(false, Ordering::Relaxed);
    world
        .fs
        .write(fork, format!("{boundary} kid\n").as_bytes())
        .expect("forked once the store answers");
}

#[test]
fn two_filesystems_sharing_a_store_never_take_one_name_twice() {
    // Two hosts, each with its own sessionfs over one shared JSONL store.
    let copy = common::store_copy("jsonl");
    let host = || {
        let store = sessionfs::store::open(&copy.path).expect("store");
        SessionFs::new(store, config())
    };
    let (first, second) = (host(), host());
    let fork_of = |fs: &SessionFs| {
        let parent = fs.lookup(ROOT, "ledger-chat").expect("parent").ino;
        fs.lookup(parent, "fork").expect("fork").ino
    };
    let (one, two) = (fork_of(&first), fork_of(&second));
    first
        .write(one, b"321 shared-name\n")
        .expect("the first takes it");
    // Refused at once, before either has written anything.
    let refused = second.write(two, b"321 shared-name\n");
    let Err(Error::Exists(reason)) = refused else {
        panic!("{refused:?}")
    };
    assert!(
        reason.contains("another process sharing this store"),
        "{reason}"
    );
    // Children with default names never collide.
    first.write(one, b"321\n").expect("fork");
    second.write(two, b"321\n").expect("fork");
    for fs in [&first, &second] {
        fs.write(fs.lookup(ROOT, "flush").expect("flush").ino, b"\n")
            .expect("flush");
    }
    let store = sessionfs::store::open(&copy.path).expect("store");
    let forked: Vec<String> = store
        .list()
        .into_iter()
        .filter(|listing| {
            listing
                .header
                .as_ref()
                .is_ok_and(|h| h.parent_session.as_deref() == Some("ledger-chat"))
        })
        .map(|listing| listing.id)
        .collect();
    assert_eq!(forked.len(), 3, "{forked:?}");
    assert!(forked.contains(&"shared-name".to_string()), "{forked:?}");
    assert_eq!(
        forked
            .iter()
            .filter(|id| id.starts_with("session-"))
            .count(),
        2,
        "{forked:?}"
    );
}

#[test]
fn a_child_never_written_gives_its_name_back_at_unmount() {
    let world = World::new(1, usize::MAX, config());
    let boundary = first_of(&world.events, "turn/end");
    world
        .fs
        .write(
            world.file(&name(0), "fork"),
            format!("{boundary} kid\n").as_bytes(),
        )
        .expect("fork");
    world.calls.refuse_writes.store(true, Ordering::Relaxed);
    assert_eq!(world.fs.writeback().shutdown(), vec!["kid".to_string()]);
    assert_eq!(*world.calls.given_back.lock().unwrap(), vec!["kid"]);
}
