//! The root's lists: `sessions.jsonl`, `by-project/` and `by-date/`, made from
//! the listing alone, and what they cost in a large store.

use super::*;
use sessionfs::model::catalog::{project_name, utc_day};

const DAY: i64 = 86_400_000;
const T0: i64 = 1_772_457_300_000;

/// A store of `n` sessions over three projects (one without a cwd) and two days.
fn grouped(n: usize) -> World {
    let world = World::new(0, 0, config());
    for k in 0..n {
        let mut header = SessionHeader::new(&name(k), T0 + (k % 2) as i64 * DAY);
        header.cwd = match k % 3 {
            0 => Some("/home/ana/atlas".into()),
            1 => Some("/srv/build".into()),
            _ => None,
        };
        world.store.insert(header, world.events[..20].to_vec());
    }
    world
}

fn lookup(world: &World, parent: u64, name: &str) -> u64 {
    world
        .fs
        .lookup(parent, name)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .ino
}

#[test]
fn the_root_shows_flush_then_its_sessions_then_its_lists() {
    let world = grouped(4);
    assert_eq!(
        sessions_listed(&world.fs, 3),
        (0..4).map(name).collect::<Vec<_>>()
    );
}

#[test]
fn by_project_and_by_date_link_every_readable_session_once() {
    let world = grouped(30);
    let by_project = lookup(&world, ROOT, "by-project");
    let projects = list(&world.fs, by_project, 2);
    let expected: BTreeSet<String> = [Some("/home/ana/atlas"), Some("/srv/build"), None]
        .map(project_name)
        .into_iter()
        .collect();
    assert_eq!(projects.iter().cloned().collect::<BTreeSet<_>>(), expected);
    assert!(projects.contains(&"home\u{2215}ana\u{2215}atlas".to_string()));
    let mut linked = Vec::new();
    for project in &projects {
        let dir = lookup(&world, by_project, project);
        let listed = list(&world.fs, dir, 4);
        assert_eq!(listed[0], "latest", "a project's own latest comes first");
        for session in listed.into_iter().skip(1) {
            let link = lookup(&world, dir, &session);
            assert_eq!(
                world.fs.readlink(link).expect("readlink"),
                format!("../../{session}")
            );
            assert_eq!(
                world.fs.getattr(link).expect("stat").size,
                format!("../../{session}").len() as u64
            );
            linked.push(session);
        }
    }
    linked.sort();
    assert_eq!(linked, (0..30).map(name).collect::<Vec<_>>());
    let by_date = lookup(&world, ROOT, "by-date");
    let days = list(&world.fs, by_date, 10);
    assert_eq!(days, vec![utc_day(T0), utc_day(T0 + DAY)]);
    let first_day = lookup(&world, by_date, &days[0]);
    assert_eq!(
        list(&world.fs, first_day, 5),
        (0..30).step_by(2).map(name).collect::<Vec<_>>()
    );
    // A session is only under its own project.
    let other = lookup(&world, by_project, &projects[0]);
    let outside = list(&world.fs, lookup(&world, by_project, &projects[1]), 100);
    assert!(matches!(
        world.fs.lookup(other, &outside[1]),
        Err(Error::NotFound(_))
    ));
}

#[test]
fn sessions_jsonl_has_a_line_per_session_sized_exactly_and_moves_when_rewritten() {
    let world = grouped(12);
    let catalog = lookup(&world, ROOT, "sessions.jsonl");
    let bytes = world.read_all(catalog);
    assert_eq!(
        world.fs.getattr(catalog).expect("stat").size,
        bytes.len() as u64
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(bytes.clone())
        .expect("text")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 12);
    assert_eq!(lines[0]["name"], name(0));
    assert_eq!(lines[0]["cwd"], "/home/ana/atlas");
    assert_eq!(lines[1]["createdAt"], T0 + DAY);
    // A new session sorted last is a line more: the same inode, read on.
    let (fh, _) = world.fs.open(catalog, false).expect("open");
    assert_eq!(read_handle(&world.fs, fh), bytes);
    world.store.insert(
        SessionHeader::new("zz-new", T0),
        world.events[..20].to_vec(),
    );
    list(&world.fs, ROOT, 100);
    assert_eq!(lookup(&world, ROOT, "sessions.jsonl"), catalog);
    let grown = world.read_all(catalog);
    assert!(grown.starts_with(&bytes) && grown.len() > bytes.len());
    // A removed session rewrites it: a new inode; the descriptor keeps its snapshot.
    world.store.remove(&name(0));
    list(&world.fs, ROOT, 100);
    let moved = lookup(&world, ROOT, "sessions.jsonl");
    assert_ne!(moved, catalog);
    assert!(!world.read_all(moved).starts_with(&bytes));
    assert!(read_handle(&world.fs, fh).starts_with(&bytes));
    world.fs.release(fh);
}

#[test]
fn the_lists_read_no_log_and_list_the_store_once_per_listing() {
    let world = grouped(3000);
    list(&world.fs, ROOT, 500);
    let listings = world.calls.list.load(Ordering::Relaxed);
    let by_project = lookup(&world, ROOT, "by-project");
    let mut links = 0;
    for project in list(&world.fs, by_project, 100) {
        // Each project's links, and its `latest`.
        links += list(&world.fs, lookup(&world, by_project, &project), 500).len() - 1;
    }
    assert_eq!(links, 3000);
    let catalog = world.read_all(lookup(&world, ROOT, "sessions.jsonl"));
    assert_eq!(catalog.iter().filter(|&&b| b == b'\n').count(), 3000);
    assert_eq!(
        world.calls.scan.load(Ordering::Relaxed),
        0,
        "no log is read"
    );
    assert_eq!(world.calls.fetch.load(Ordering::Relaxed), 0);
    // `ls by-project` lists the store as `ls` of the root does; its
    // directories and links ask nothing more of it.
    assert!(world.calls.list.load(Ordering::Relaxed) <= listings + 2);
}

#[test]
fn latest_leads_to_the_session_written_last_and_moves() {
    let world = World::new(0, 0, config());
    let mut header = SessionHeader::new("older", T0);
    header.cwd = Some("/srv/a".into());
    world.store.insert(header, world.events[..20].to_vec());
    let mut header = SessionHeader::new("newer", T0 + DAY);
    header.cwd = Some("/srv/b".into());
    world.store.insert(header, world.events[..20].to_vec());
    list(&world.fs, ROOT, 100);
    let latest = lookup(&world, ROOT, "latest");
    assert_eq!(world.fs.readlink(latest).expect("readlink"), "newer");
    assert_eq!(world.fs.getattr(latest).expect("stat").size, 5);
    // A session written later (here: created later; an in-memory store keeps
    // no write times) moves it; the same inode leads elsewhere.
    let mut header = SessionHeader::new("newest", T0 + 2 * DAY);
    header.cwd = Some("/srv/a".into());
    world.store.insert(header, world.events[..20].to_vec());
    list(&world.fs, ROOT, 100);
    assert_eq!(lookup(&world, ROOT, "latest"), latest);
    assert_eq!(world.fs.readlink(latest).expect("readlink"), "newest");
    // Each project has its own.
    let by_project = lookup(&world, ROOT, "by-project");
    let b = lookup(&world, by_project, "srv\u{2215}b");
    let b_latest = lookup(&world, b, "latest");
    assert_eq!(
        world.fs.readlink(b_latest).expect("readlink"),
        "../../newer"
    );
    let a = lookup(&world, by_project, "srv\u{2215}a");
    let a_latest = lookup(&world, a, "latest");
    assert_eq!(
        world.fs.readlink(a_latest).expect("readlink"),
        "../../newest"
    );
    // The latest session removed: the next newest is latest again.
    world.store.remove("newest");
    list(&world.fs, ROOT, 100);
    assert_eq!(world.fs.readlink(latest).expect("readlink"), "newer");
    assert_eq!(
        world.fs.readlink(a_latest).expect("readlink"),
        "../../older"
    );
}

#[test]
fn readable_names_are_listed_and_old_names_lead_to_the_same_directory() {
    let world = World::new(0, 0, config());
    let ids = ["notes 2026 «draft»", "a/b", "flush", "plain-1"];
    for id in ids {
        world
            .store
            .insert(SessionHeader::new(id, T0), world.events[..20].to_vec());
    }
    let listed: BTreeSet<String> = sessions_listed(&world.fs, 3).into_iter().collect();
    let shown: BTreeSet<String> = ["notes 2026 «draft»", "a~002Fb", "~0066lush", "plain-1"]
        .map(String::from)
        .into();
    assert_eq!(listed, shown);
    for (old, now) in [
        ("notes~00202026~0020~00ABdraft~00BB", "notes 2026 «draft»"),
        ("a~002Fb", "a~002Fb"),
        ("~0066lush", "~0066lush"),
    ] {
        assert_eq!(
            lookup(&world, ROOT, old),
            lookup(&world, ROOT, now),
            "{old}"
        );
    }
    // The root's own `flush` is never a session's old name.
    assert_eq!(
        world.fs.lookup(ROOT, "flush").expect("flush").ino,
        sessionfs::fs::inode::ROOT_FLUSH
    );
    assert!(world.fs.lookup(ROOT, "notes~0020").is_err());
}
