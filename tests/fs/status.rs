//! `status` and when an open turn is shown repaired: a turn its writer may
//! still be working on shows no closers under the grace, one quiet for longer
//! shows the crash view, and `status` says which, in one line whose size
//! `stat` gives exactly.

use std::time::{SystemTime, UNIX_EPOCH};

use super::*;

/// The fixture log cut just after its first `tool/call`, retimed so that its
/// last event was logged `age` ago.
fn open_tool_call(events: &[JsonMap], age: Duration) -> Vec<JsonMap> {
    let cut = &events[..first_of(events, "tool/call") + 1];
    let time = |e: &JsonMap| e.get("time").and_then(|t| t.as_i64()).expect("time");
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let shift = (now - age).as_millis() as i64 - time(cut.last().expect("events"));
    cut.iter()
        .map(|e| {
            let mut e = e.clone();
            e.insert("time".into(), (time(&e) + shift).into());
            e
        })
        .collect()
}

/// `status` of a session, checked to be one line of the size `stat` gives.
fn status(world: &World, session: &str) -> String {
    let ino = world.file(session, "status");
    let size = world.fs.getattr(ino).expect("stat").size;
    let line = String::from_utf8(world.read_all(ino)).expect("text");
    assert_eq!(size, line.len() as u64, "{line:?}");
    assert!(
        line.ends_with('\n') && line.lines().count() == 1,
        "{line:?}"
    );
    line
}

fn synthetic_events(world: &World, session: &str) -> usize {
    let events = world.file(session, "events");
    list(&world.fs, events, 1000)
        .iter()
        .filter(|name| name.contains(".synthetic."))
        .count()
}

#[test]
fn an_open_turn_shows_no_closers_until_the_grace_and_status_says_so() {
    let world = World::new(1, usize::MAX, config());
    let ended = status(&world, &name(0));
    assert!(ended.starts_with("ended · "), "{ended}");
    assert!(ended.contains(" turns · last event 20"), "{ended}");

    // Logged a second ago: a writer may be in the tool call.
    let live = open_tool_call(&world.events, Duration::from_secs(1));
    world
        .store
        .insert(SessionHeader::new("live", 1_772_457_300_000), live);
    let open = status(&world, "live");
    assert!(open.starts_with("open · turn "), "{open}");
    assert!(open.contains(" · tool "), "{open}");
    assert!(open.contains(") running for "), "{open}");
    assert_eq!(
        synthetic_events(&world, "live"),
        0,
        "no closers under the grace"
    );

    // Quiet for longer than the grace: the crash view, and status says why.
    let world = World::new(
        0,
        0,
        FsConfig {
            grace: Duration::from_millis(300),
            ..config()
        },
    );
    let quiet = open_tool_call(&world.events, Duration::ZERO);
    world
        .store
        .insert(SessionHeader::new("quiet", 1_772_457_300_000), quiet);
    assert!(status(&world, "quiet").starts_with("open · turn "));
    assert_eq!(synthetic_events(&world, "quiet"), 0);
    std::thread::sleep(Duration::from_millis(400));
    let repaired = status(&world, "quiet");
    assert!(
        repaired.starts_with("interrupted · repaired view shown · turn "),
        "{repaired}"
    );
    assert!(repaired.contains(" · quiet for "), "{repaired}");
    assert!(
        synthetic_events(&world, "quiet") > 0,
        "the crash view is shown"
    );
}

#[test]
fn no_grace_shows_the_crash_view_at_once() {
    let world = World::new(
        0,
        0,
        FsConfig {
            grace: Duration::ZERO,
            ..config()
        },
    );
    let live = open_tool_call(&world.events, Duration::ZERO);
    world
        .store
        .insert(SessionHeader::new("live", 1_772_457_300_000), live);
    assert!(status(&world, "live").starts_with("interrupted · repaired view shown · "));
    assert!(synthetic_events(&world, "live") > 0);
}

#[test]
fn an_unreadable_session_has_a_status_that_points_at_its_error() {
    let world = World::new(0, 0, config());
    let mut events = world.events[..3].to_vec();
    events[2].insert("type".into(), "future/unknown".into());
    world
        .store
        .insert(SessionHeader::new("odd", 1_772_457_300_000), events);
    let line = status(&world, "odd");
    assert_eq!(line, "unsupported · see error\n");
}
