//! A live session looks live (issue #25): an open turn shows no crash closers
//! while its writer may still be working, even through a long tool call; the
//! crash view shows once the writer is gone (SQLite: its connection closed)
//! or the log has been quiet for the grace period (JSONL); `status` says
//! which, in one line of exact size; a new session is listed within 100 ms;
//! and a session's directories keep their times while only its events grow.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::harness::{append_jsonl, commit_batch, session_home};
use common::{Mount, session_dir, sorted_names, store_copy, within};
use serde_json::{Value, json};

/// `ledger-chat` holds 322 events in 4 closed turns in every fixture store.
const SESSION: &str = "ledger-chat";
const LAST_SEQ: u64 = 321;
const TIME: i64 = 1_790_000_000_000;

/// A connection like the Harness's: its own, in WAL mode, open for as long as
/// it lives (its first read takes the locks it then holds while idle).
struct SqliteWriter(rusqlite::Connection);

impl SqliteWriter {
    fn open(db: &Path) -> SqliteWriter {
        let connection = rusqlite::Connection::open(db).expect("db");
        let mode: String = connection
            .query_row("PRAGMA journal_mode", [], |row| row.get(0))
            .expect("journal mode");
        assert_eq!(mode, "wal");
        SqliteWriter(connection)
    }

    /// One committed batch, as the Harness's write-behind commits it.
    fn append(&mut self, id: &str, events: &[Value]) {
        commit_batch(&mut self.0, id, events);
    }
}

/// Turn 5 opened after seq `last`: the model asks for `bash`, and the Harness
/// logs the call as started at `started` (then runs it, writing nothing).
fn open_tool_call(last: u64, started: i64) -> Vec<Value> {
    vec![
        json!({"type": "turn/start", "seq": last + 1, "time": started - 30, "data": {"turn": 5}}),
        json!({"type": "step/start", "seq": last + 2, "time": started - 20, "data": {"turn": 5, "step": 1}}),
        json!({"type": "assistant/message", "seq": last + 3, "time": started - 10, "data": {"turn": 5, "step": 1, "message": {"role": "assistant", "content": [{"type": "tool-call", "id": "call_live01", "name": "bash", "arguments": "{\"command\":\"cargo build\"}"}], "source": {"kind": "model", "provider": "deepseek", "model": "m"}, "id": "a-live"}, "usage": {"inputTokens": 1, "outputTokens": 1}}, "sourceEventSeqs": [], "surfaceOp": "append"}),
        json!({"type": "tool/call", "seq": last + 4, "time": started, "data": {"turn": 5, "step": 1, "callId": "call_live01", "name": "bash", "arguments": "{\"command\":\"cargo build\"}"}}),
    ]
}

/// The rest of turn 5: the tool's result, the step's and the turn's end.
fn finish_tool_call(last: u64, time: i64) -> Vec<Value> {
    vec![
        json!({"type": "tool/result", "seq": last + 5, "time": time, "data": {"turn": 5, "step": 1, "message": {"role": "user", "source": {"kind": "tool", "callId": "call_live01"}, "content": [{"type": "tool-result", "toolCallId": "call_live01", "content": [{"type": "text", "text": "Finished"}]}], "id": "t-live"}}, "sourceEventSeqs": [last + 4], "surfaceOp": "append"}),
        json!({"type": "step/end", "seq": last + 6, "time": time + 1, "data": {"turn": 5, "step": 1}}),
        json!({"type": "turn/end", "seq": last + 7, "time": time + 2, "data": {"turn": 5, "reason": {"kind": "completed"}}}),
    ]
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

/// Where crash closers would show, if any does.
fn closers_shown(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    found.extend(
        sorted_names(&dir.join("events"))
            .into_iter()
            .filter(|name| name.contains("synthetic")),
    );
    let index = std::fs::read_to_string(dir.join("index.jsonl")).expect("index");
    if index.contains("\"synthetic\":true") {
        found.push("index.jsonl".into());
    }
    let surface = std::fs::read_to_string(dir.join("surface.jsonl")).expect("surface");
    if surface.contains("interrupted-tool-result") {
        found.push("surface.jsonl".into());
    }
    found
}

/// The crash view of turn 5: the closer files, marked in index.jsonl and
/// surface.jsonl.
fn crash_view_shown(dir: &Path) -> bool {
    let names = sorted_names(&dir.join("events"));
    let closer = |seq: u64, kind: &str| format!("{seq:08}-{kind}.synthetic.json");
    names.contains(&closer(LAST_SEQ + 5, "tool.result"))
        && names.contains(&closer(LAST_SEQ + 6, "step.end"))
        && names.contains(&closer(LAST_SEQ + 7, "turn.end"))
        && closers_shown(dir).len() == 5
}

/// Reads `status`, checking that stat gives its exact size. Both go through
/// one descriptor: a `stat` of the path and a later read of it may meet two
/// versions, when the status changes between them (a new inode each).
fn status(dir: &Path) -> String {
    use std::io::Read;
    let mut file = std::fs::File::open(dir.join("status")).expect("open status");
    let size = file.metadata().expect("stat status").len();
    let mut text = String::new();
    file.read_to_string(&mut text).expect("read status");
    assert_eq!(
        size,
        text.len() as u64,
        "stat sizes status exactly: {text:?}"
    );
    assert!(
        text.ends_with('\n') && text.lines().count() == 1,
        "{text:?}"
    );
    text
}

/// Waits until `status` starts with `prefix`.
fn status_becomes(dir: &Path, limit: Duration, prefix: &str) -> String {
    let mut last = String::new();
    within(limit, &format!("status starting {prefix:?}"), || {
        last = status(dir);
        last.starts_with(prefix)
    });
    last
}

/// The old grace (10 s) three times over: a long tool call.
const LONG_TOOL_CALL: Duration = Duration::from_secs(30);

/// Checks for `span` that no closer shows while the tool call runs.
fn no_closers_for(dir: &Path, span: Duration) {
    let start = Instant::now();
    while start.elapsed() < span {
        assert_eq!(
            closers_shown(dir),
            Vec::<String>::new(),
            "closers shown {:?} into a running tool call",
            start.elapsed()
        );
        let line = status(dir);
        assert!(
            line.starts_with("open · turn 5 · step 1 · tool bash (call_live01) running for "),
            "{line}"
        );
        std::thread::sleep(Duration::from_secs(3));
    }
}

#[test]
fn a_long_tool_call_in_jsonl_shows_no_closers_under_the_default_grace() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &[]);
    let dir = session_dir(mount.path(), SESSION);
    assert_eq!(
        status(&dir),
        "ended · 4 turns · last event 2026-03-02T13:20:27.273Z\n"
    );
    append_jsonl(&copy.path, SESSION, &open_tool_call(LAST_SEQ, now_ms()));
    status_becomes(&dir, Duration::from_secs(1), "open · turn 5");
    no_closers_for(&dir, LONG_TOOL_CALL);
}

#[test]
fn a_quiet_jsonl_log_shows_the_crash_view_after_the_grace() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=3"]);
    let dir = session_dir(mount.path(), SESSION);
    let started = now_ms();
    append_jsonl(&copy.path, SESSION, &open_tool_call(LAST_SEQ, started));
    let open = status_becomes(&dir, Duration::from_secs(1), "open");
    assert!(
        open.starts_with("open · turn 5 · step 1 · tool bash (call_live01) running for "),
        "{open}"
    );
    assert!(
        !open.contains("writer connected"),
        "JSONL cannot tell: {open}"
    );
    assert!(closers_shown(&dir).is_empty());
    // The quiet time passes: the log is all there is to go by.
    within(Duration::from_secs(6), "the crash view", || {
        crash_view_shown(&dir)
    });
    let repaired = status(&dir);
    assert!(
        repaired.starts_with("interrupted · repaired view shown · turn 5 · quiet for "),
        "{repaired}"
    );
    // The writer was only slow: its result takes the closers' place.
    append_jsonl(&copy.path, SESSION, &finish_tool_call(LAST_SEQ, now_ms()));
    let ended = status_becomes(&dir, Duration::from_secs(1), "ended");
    assert!(
        ended.starts_with("ended · 5 turns · last event "),
        "{ended}"
    );
    assert!(closers_shown(&dir).is_empty());
}

#[test]
fn an_open_sqlite_tool_call_waits_for_its_writer_and_shows_the_crash_view_when_it_closes() {
    let copy = store_copy("sqlite17");
    let mut writer = SqliteWriter::open(&copy.path);
    let mount = Mount::new(&copy.path, &[]);
    let dir = session_dir(mount.path(), SESSION);
    assert!(status(&dir).starts_with("ended · 4 turns · "));
    writer.append(SESSION, &open_tool_call(LAST_SEQ, now_ms()));
    let open = status_becomes(&dir, Duration::from_secs(1), "open · turn 5");
    assert!(open.ends_with(" · writer connected\n"), "{open}");
    no_closers_for(&dir, LONG_TOOL_CALL);
    // The Harness exits: its connection closes, and nothing else changes.
    drop(writer);
    let took = within(Duration::from_secs(1), "the crash view", || {
        crash_view_shown(&dir)
    });
    eprintln!("crash view {took:?} after the writer closed");
    let repaired = status(&dir);
    assert!(
        repaired.starts_with("interrupted · repaired view shown · turn 5 · no writer connected · "),
        "{repaired}"
    );
}

#[test]
fn status_is_sized_exactly_and_an_open_descriptor_keeps_its_line() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=600"]);
    let dir = session_dir(mount.path(), SESSION);
    let before = status(&dir);
    let mut held = std::fs::File::open(dir.join("status")).expect("open status");
    append_jsonl(&copy.path, SESSION, &open_tool_call(LAST_SEQ, now_ms()));
    let after = status_becomes(&dir, Duration::from_secs(1), "open");
    let mut seen = String::new();
    std::io::Read::read_to_string(&mut held, &mut seen).expect("read held");
    assert_eq!(seen, before, "an open descriptor reads the line it opened");
    assert_ne!(after, before);
}

#[test]
fn a_rewritten_status_is_a_new_inode() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=600"]);
    let dir = session_dir(mount.path(), SESSION);
    let held_ino = std::fs::metadata(dir.join("status")).expect("stat").ino();
    append_jsonl(&copy.path, SESSION, &open_tool_call(LAST_SEQ, now_ms()));
    status_becomes(&dir, Duration::from_secs(1), "open");
    let now_ino = std::fs::metadata(dir.join("status")).expect("stat").ino();
    assert_ne!(held_ino, now_ino, "a rewritten status is a new inode");
}

/// Lists the mount's root, as `ls` does.
fn listed(mount: &Path) -> Vec<String> {
    sorted_names(mount)
}

/// Materialises a JSONL session as the Harness does (spec §10.7): the session
/// directory first, then a temporary file linked to its final name. A user's
/// `ls` comes between the two.
fn materialise_with_ls_between(mount: &Path, project: &Path, id: &str, text: &str) -> Duration {
    let home = project.join(id);
    std::fs::create_dir_all(&home).expect("mkdir");
    std::thread::sleep(Duration::from_millis(50));
    assert!(!listed(mount).contains(&id.to_string()));
    let temp = home.join("session.jsonl.0123456789ab.tmp");
    std::fs::write(&temp, text).expect("write temp");
    std::fs::File::open(&temp)
        .expect("open temp")
        .sync_all()
        .expect("fsync");
    std::fs::hard_link(&temp, home.join("session.jsonl")).expect("link");
    let took = within(
        Duration::from_millis(100),
        &format!("{id} in ls of the root"),
        || listed(mount).contains(&id.to_string()),
    );
    std::fs::remove_file(&temp).expect("remove temp");
    took
}

#[test]
fn a_new_jsonl_session_is_listed_within_100_ms() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &[]);
    assert!(listed(mount.path()).contains(&SESSION.to_string()));
    let home = session_home(&copy.path, SESSION);
    let text = std::fs::read_to_string(home.join("session.jsonl")).expect("log");
    let retitled =
        |id: &str| text.replacen("\"id\":\"ledger-chat\"", &format!("\"id\":\"{id}\""), 1);
    let project = home.parent().expect("project");
    let took = materialise_with_ls_between(
        mount.path(),
        project,
        "new-in-project",
        &retitled("new-in-project"),
    );
    eprintln!("a new session in a known project: listed after {took:?}");
    // A new project directory too; the Harness makes it with the session's.
    let fresh_project = copy.path.join("--srv-fresh--");
    assert!(!fresh_project.exists());
    let in_fresh_project = text
        .lines()
        .next()
        .map(|header| {
            let mut header: Value = serde_json::from_str(header).expect("header");
            header["cwd"] = "/srv/fresh".into();
            header["id"] = "new-project".into();
            format!("{header}\n{}", text.split_once('\n').expect("events").1)
        })
        .expect("header line");
    let took = materialise_with_ls_between(
        mount.path(),
        &fresh_project,
        "new-project",
        &in_fresh_project,
    );
    eprintln!("a new session in a new project: listed after {took:?}");
}

#[test]
fn a_new_sqlite_session_is_listed_within_100_ms() {
    let copy = store_copy("sqlite17");
    let writer = SqliteWriter::open(&copy.path);
    let mount = Mount::new(&copy.path, &[]);
    assert!(listed(mount.path()).contains(&SESSION.to_string()));
    writer
        .0
        .execute_batch(
            "BEGIN IMMEDIATE;
             INSERT INTO sessions SELECT 'brand-new', version, created_at, cwd, NULL, NULL, origin, delegation_depth, agent_preset, 'inc-brand-new', 1 FROM sessions WHERE id = 'ledger-chat';
             INSERT INTO events SELECT 'brand-new', seq, type, time, data, source_event_seqs, surface_op, ignorable FROM events WHERE session_id = 'ledger-chat';
             COMMIT;",
        )
        .expect("new session");
    let took = within(Duration::from_millis(100), "brand-new in ls", || {
        listed(mount.path()).contains(&"brand-new".to_string())
    });
    eprintln!("a new SQLite session: listed after {took:?}");
}

/// A directory's mtime and ctime as the mount shows them.
fn times(path: &Path) -> (i64, i64, i64, i64) {
    let meta = std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec(),
    )
}

#[test]
fn a_session_directory_keeps_its_time_while_only_its_events_grow() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=600"]);
    let dir = session_dir(mount.path(), SESSION);
    let steps = dir.join("steps");
    let first_call = steps.join(sorted_names(&steps).first().expect("a call"));
    let stable = [dir.clone(), dir.join("children"), steps.clone(), first_call];
    let before: Vec<_> = stable.iter().map(|p| times(p)).collect();
    let events_before = times(&dir.join("events"));
    // New titles: new events, no new model call, no child.
    let title = |seq: u64| json!({"type": "session/title", "seq": seq, "time": TIME + seq as i64, "data": {"title": format!("title {seq}"), "messageSeqs": [], "source": {"kind": "user"}}});
    append_jsonl(&copy.path, SESSION, &[title(LAST_SEQ + 1)]);
    within(Duration::from_secs(1), "the new event", || {
        sorted_names(&dir.join("events")).len() as u64 == LAST_SEQ + 2
    });
    let after: Vec<_> = stable.iter().map(|p| times(p)).collect();
    assert_eq!(before, after, "{stable:?} keep their times");
    assert_ne!(
        times(&dir.join("events")),
        events_before,
        "events/ gained an entry: its time moves"
    );
    // tar of the session while events keep landing: the files that grew may
    // be reported, and events/, which gained entries; no other directory.
    let appending = std::sync::atomic::AtomicBool::new(true);
    let output = std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut seq = LAST_SEQ + 2;
            while appending.load(std::sync::atomic::Ordering::Relaxed) {
                append_jsonl(&copy.path, SESSION, &[title(seq)]);
                seq += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let output = std::process::Command::new("tar")
            .arg("-cf")
            .arg("/dev/null")
            .arg("-C")
            .arg(mount.path())
            .arg(SESSION)
            .output()
            .expect("tar");
        appending.store(false, std::sync::atomic::Ordering::Relaxed);
        output
    });
    let stderr = String::from_utf8_lossy(&output.stderr);
    for line in stderr.lines() {
        let Some((path, _)) = line
            .strip_prefix("tar: ")
            .and_then(|l| l.split_once(": file changed as we read it"))
        else {
            continue;
        };
        let shown = mount.path().join(path);
        assert!(
            !shown.is_dir() || shown == dir.join("events"),
            "tar found a directory changed: {line}"
        );
    }
}
