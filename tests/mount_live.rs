//! A live store: events appended the way the Harness writes them (lines, one zstd
//! frame per batch, one SQLite transaction per batch) show up in every view of a
//! mounted session within a second; a quiet open turn is shown repaired in the
//! snapshot views (never in transcript.md, which only grows), and a turn still
//! being written is not.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::harness::{append_durably, commit_batch, log_batch};
use common::{Mount, session_dir, store_copy, within};
use serde_json::{Value, json};

#[derive(Clone, Copy, Debug)]
enum Kind {
    Jsonl,
    Zstd,
    Sqlite,
}

/// Appends one durable batch as the Harness does.
fn append(kind: Kind, store: &Path, id: &str, events: &[Value]) {
    match kind {
        Kind::Jsonl => append_durably(
            &artifact(store, id, "session.jsonl"),
            &log_batch(events, false),
        ),
        Kind::Zstd => append_durably(
            &artifact(store, id, "session.jsonl.zstd"),
            &log_batch(events, true),
        ),
        Kind::Sqlite => commit_batch(
            &mut rusqlite::Connection::open(store).expect("db"),
            id,
            events,
        ),
    }
}

fn artifact(store: &Path, id: &str, name: &str) -> PathBuf {
    for project in std::fs::read_dir(store).expect("root") {
        let candidate = project.expect("entry").path().join(id).join(name);
        if candidate.exists() {
            return candidate;
        }
    }
    panic!("no artifact for {id}");
}

fn event_count(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("events"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn next_turn(last_seq: u64, turn: u64, time: i64, needle: &str) -> Vec<Value> {
    vec![
        json!({"type": "turn/start", "seq": last_seq + 1, "time": time, "data": {"turn": turn}}),
        json!({"type": "step/start", "seq": last_seq + 2, "time": time + 1, "data": {"turn": turn, "step": 1}}),
        json!({"type": "user/message", "seq": last_seq + 3, "time": time + 2, "data": {"content": [{"type": "text", "text": needle}], "source": {"kind": "user"}, "role": "user", "id": format!("u-{needle}")}, "surfaceOp": "append"}),
    ]
}

fn follow(kind: Kind, store_name: &str) {
    let copy = store_copy(store_name);
    let mount = Mount::new(&copy.path, &["-o", "grace=2"]);
    let dir = session_dir(mount.path(), "ledger-chat");
    let header: Value = common::read_json(&dir.join("header.json"));
    assert_eq!(header["id"], "ledger-chat");
    let before = event_count(&dir);
    let surface_before = std::fs::read_to_string(dir.join("surface.jsonl"))
        .expect("surface")
        .lines()
        .count();
    let mut reader = std::fs::File::open(dir.join("transcript.md")).expect("open transcript");
    let mut seen = String::new();
    std::io::Read::read_to_string(&mut reader, &mut seen).expect("read");

    // The Harness keeps its connection open while it runs: a SQLite session
    // whose writer has closed the database would be shown repaired at once.
    let _harness = matches!(kind, Kind::Sqlite).then(|| {
        let connection = rusqlite::Connection::open(&copy.path).expect("writer connection");
        let _: i64 = connection
            .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
            .expect("first read");
        connection
    });
    let needle = format!("live needle {kind:?} 7f3a");
    let last = before as u64 - 1;
    append(
        kind,
        &copy.path,
        "ledger-chat",
        &next_turn(last, 5, 1_790_000_000_000, &needle),
    );
    let took = within(Duration::from_secs(1), "new events in events/", || {
        event_count(&dir) == before + 3
    });
    within(
        Duration::from_secs(1),
        "the new message in transcript.md",
        || std::fs::read_to_string(dir.join("transcript.md")).is_ok_and(|t| t.contains(&needle)),
    );
    let surface = std::fs::read_to_string(dir.join("surface.jsonl")).expect("surface");
    assert_eq!(
        surface.lines().count(),
        surface_before + 1,
        "surface.jsonl gained the message"
    );
    assert!(surface.lines().last().expect("line").contains(&needle));
    let index = std::fs::read_to_string(dir.join("index.jsonl")).expect("index");
    assert_eq!(index.lines().count(), before + 3);
    // The handle opened before the append keeps reading on: the file only grew.
    let mut more = String::new();
    std::io::Read::read_to_string(&mut reader, &mut more).expect("read on");
    assert!(
        more.contains(&needle),
        "an open transcript handle follows appends"
    );
    eprintln!("{kind:?}: events visible after {took:?}");

    // The turn is open and still being written: not repaired yet.
    let names: Vec<String> = std::fs::read_dir(dir.join("events"))
        .expect("events")
        .map(|e| e.expect("e").file_name().into_string().expect("u"))
        .collect();
    assert!(
        names.iter().all(|n| !n.contains("synthetic")),
        "a live turn is not closed by a reader"
    );
    // Quiet for the grace period: shown with the interrupted closers.
    within(
        Duration::from_secs(5),
        "synthetic closers after the grace period",
        || event_count(&dir) == before + 5,
    );
    // transcript.md only grows with the log: the closers are not in it.
    let transcript = std::fs::read_to_string(dir.join("transcript.md")).expect("transcript");
    assert_eq!(
        transcript,
        seen.clone() + &more,
        "the quiet open turn leaves transcript.md as the log has it"
    );
    // The writer comes back and ends the turn: the closers give way to the real events.
    append(
        kind,
        &copy.path,
        "ledger-chat",
        &[
            json!({"type": "step/end", "seq": last + 4, "time": 1_790_000_000_010i64, "data": {"turn": 5, "step": 1}}),
            json!({"type": "turn/end", "seq": last + 5, "time": 1_790_000_000_011i64, "data": {"turn": 5, "reason": {"kind": "completed"}}}),
        ],
    );
    within(
        Duration::from_secs(1),
        "the logged turn/end replacing the closers",
        || {
            std::fs::read_dir(dir.join("events"))
                .expect("events")
                .all(|e| {
                    !e.expect("e")
                        .file_name()
                        .to_string_lossy()
                        .contains("synthetic")
                })
                && event_count(&dir) == before + 5
        },
    );
    let last_name = format!("{:08}-turn.end.json", last + 5);
    let turn_end = common::read_json(&dir.join("events").join(last_name));
    assert_eq!(turn_end["data"]["reason"]["kind"], "completed");
}

#[test]
fn jsonl_views_follow_appends() {
    follow(Kind::Jsonl, "jsonl");
}

#[test]
fn zstd_views_follow_appended_frames() {
    follow(Kind::Zstd, "jsonl-zstd");
}

#[test]
fn sqlite_views_follow_committed_batches() {
    follow(Kind::Sqlite, "sqlite17");
}

#[test]
fn a_torn_final_record_is_not_shown_until_complete() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=60"]);
    let dir = session_dir(mount.path(), "release-notes");
    let before = event_count(&dir);
    let path = artifact(&copy.path, "release-notes", "session.jsonl");
    let line = serde_json::to_string(&json!({"type": "session/title", "seq": before, "time": 1, "data": {"title": "t", "messageSeqs": [], "source": {"kind": "user"}}})).expect("json");
    let (head, tail) = line.split_at(line.len() / 2);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .expect("open");
    file.write_all(head.as_bytes()).expect("write");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        event_count(&dir),
        before,
        "half a record is not an event yet"
    );
    assert!(
        !dir.join("error").exists(),
        "a record being written is not an error"
    );
    file.write_all(format!("{tail}\n").as_bytes())
        .expect("write");
    within(Duration::from_secs(1), "the completed record", || {
        event_count(&dir) == before + 1
    });
}

#[test]
fn new_sessions_appear_in_the_root() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=60"]);
    let source = artifact(&copy.path, "release-notes", "session.jsonl");
    let text = std::fs::read_to_string(&source).expect("read");
    let renamed = text.replacen("\"id\":\"release-notes\"", "\"id\":\"brand-new\"", 1);
    let dir = source
        .parent()
        .expect("dir")
        .parent()
        .expect("project")
        .join("brand-new");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("session.jsonl"), renamed).expect("write");
    within(Duration::from_secs(2), "the new session directory", || {
        mount
            .path()
            .join("brand-new")
            .join("surface.jsonl")
            .exists()
    });
}

#[test]
fn tail_f_shows_new_messages_as_they_land() {
    let copy = store_copy("jsonl-zstd");
    let mount = Mount::new(&copy.path, &["-o", "grace=60"]);
    let dir = session_dir(mount.path(), "ledger-chat");
    let last = event_count(&dir) as u64 - 1;
    let mut tail = Command::new("tail")
        .arg("-n0")
        .arg("-f")
        .arg(dir.join("transcript.md"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("tail");
    let stdout = tail.stdout.take().expect("stdout");
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    std::thread::sleep(Duration::from_millis(1500));
    let needle = "tail follows this 91c2";
    append(
        Kind::Zstd,
        &copy.path,
        "ledger-chat",
        &next_turn(last, 5, 1_790_000_000_000, needle),
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut found = false;
    while Instant::now() < deadline && !found {
        if let Ok(line) = receiver.recv_timeout(Duration::from_millis(200)) {
            found = line.contains(needle);
        }
    }
    let _ = tail.kill();
    let _ = tail.wait();
    assert!(found, "tail -f printed the new message");
}

/// Issue #12: `tail -f transcript.md` over a turn that stays open and quiet for
/// three grace periods (the closers come and go in events/) and then completes
/// prints exactly the final transcript.md.
#[test]
fn tail_f_follows_a_turn_quiet_past_the_grace_period() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=1"]);
    let dir = session_dir(mount.path(), "ledger-chat");
    let before = event_count(&dir);
    let last = before as u64 - 1;
    let output = common::TempDir::new("tail-f");
    let captured = output.path().join("tail.out");
    let mut tail = Command::new("tail")
        .arg("-c")
        .arg("+1")
        .arg("-f")
        .arg(dir.join("transcript.md"))
        .stdout(std::fs::File::create(&captured).expect("capture"))
        .spawn()
        .expect("tail");
    std::thread::sleep(Duration::from_millis(1500));
    let needle = "a slow build 5d1e";
    append(
        Kind::Jsonl,
        &copy.path,
        "ledger-chat",
        &next_turn(last, 5, 1_790_000_000_000, needle),
    );
    // Quiet for 3 × grace: the crash view shows its closers meanwhile.
    within(
        Duration::from_secs(3),
        "closers after the grace period",
        || event_count(&dir) == before + 5,
    );
    std::thread::sleep(Duration::from_secs(2));
    append(
        Kind::Jsonl,
        &copy.path,
        "ledger-chat",
        &[
            json!({"type": "assistant/message", "seq": last + 4, "time": 1_790_000_000_010i64, "data": {"turn": 5, "step": 1, "message": {"role": "assistant", "content": [{"type": "text", "text": "built after all"}], "source": {"kind": "model", "provider": "deepseek", "model": "m"}, "id": "a-5"}, "usage": {"inputTokens": 1, "outputTokens": 1}}, "surfaceOp": "append"}),
            json!({"type": "step/end", "seq": last + 5, "time": 1_790_000_000_011i64, "data": {"turn": 5, "step": 1}}),
            json!({"type": "turn/end", "seq": last + 6, "time": 1_790_000_000_012i64, "data": {"turn": 5, "reason": {"kind": "completed"}}}),
        ],
    );
    within(Duration::from_secs(2), "the completed turn", || {
        event_count(&dir) == before + 6
            && std::fs::read_to_string(dir.join("transcript.md"))
                .is_ok_and(|t| t.contains("built after all"))
    });
    let last_text = std::fs::read(dir.join("transcript.md")).expect("final transcript");
    // tail -f polls once a second.
    within(Duration::from_secs(4), "tail to catch up", || {
        std::fs::metadata(&captured).is_ok_and(|m| m.len() >= last_text.len() as u64)
    });
    std::thread::sleep(Duration::from_millis(1200));
    let _ = tail.kill();
    let _ = tail.wait();
    let final_path = output.path().join("final.md");
    std::fs::write(&final_path, &last_text).expect("write final");
    let same = Command::new("cmp")
        .arg(&captured)
        .arg(&final_path)
        .status()
        .expect("cmp");
    assert!(
        same.success(),
        "tail -f output differs from the final transcript.md"
    );
}
