//! The root's lists through the kernel: `sessions.jsonl` against the listing,
//! `by-project/` and `by-date/` links that lead to their sessions, the same tree
//! whatever the time zone, and the escape of ids spelled like root entries.

mod common;

use std::path::Path;

use common::{Mount, session_names, sorted_names, store_copy};
use serde_json::Value;

fn catalog(mount: &Path) -> Vec<Value> {
    let path = mount.join("sessions.jsonl");
    let text = std::fs::read_to_string(&path).expect("sessions.jsonl");
    assert_eq!(
        std::fs::metadata(&path).expect("stat").len(),
        text.len() as u64,
        "sized exactly"
    );
    text.lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

/// Every link of a list directory (`by-project` or `by-date`): its group,
/// its name, and where it leads.
fn links(mount: &Path, list: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for group in sorted_names(&mount.join(list)) {
        // A project's own `latest` is not one of its sessions' links.
        for name in sorted_names(&mount.join(list).join(&group))
            .into_iter()
            .filter(|name| name != "latest")
        {
            let link = mount.join(list).join(&group).join(&name);
            let target = std::fs::read_link(&link).expect("readlink");
            out.push((group.clone(), name, target.to_string_lossy().into_owned()));
        }
    }
    out
}

#[test]
fn sessions_jsonl_and_the_link_directories_agree_with_the_listing() {
    for store in ["jsonl", "jsonl-zstd", "sqlite17"] {
        let copy = store_copy(store);
        let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
        let sessions = session_names(mount.path());
        let lines = catalog(mount.path());
        let named: Vec<String> = lines
            .iter()
            .map(|l| l["name"].as_str().expect("name").to_string())
            .collect();
        let mut sorted = named.clone();
        sorted.sort();
        assert_eq!(sorted, sessions, "{store}: one line per session");
        for line in &lines {
            let dir = mount.path().join(line["name"].as_str().expect("name"));
            let header: Value =
                serde_json::from_slice(&std::fs::read(dir.join("header.json")).unwrap_or_default())
                    .unwrap_or(Value::Null);
            if header.is_null() {
                continue;
            }
            assert_eq!(line["id"], header["id"], "{store}: {line}");
            assert_eq!(line["createdAt"], header["createdAt"], "{store}: {line}");
            assert_eq!(line["cwd"], header["cwd"], "{store}: {line}");
            let kind = if store == "sqlite17" {
                "sqlite"
            } else if store == "jsonl" {
                "jsonl"
            } else {
                "zstd"
            };
            assert_eq!(line["store"], kind, "{store}: {line}");
        }
        for list in ["by-project", "by-date"] {
            let links = links(mount.path(), list);
            let mut linked: Vec<String> = links.iter().map(|(_, name, _)| name.clone()).collect();
            linked.sort();
            linked.dedup();
            assert_eq!(
                links.len(),
                linked.len(),
                "{store}/{list}: each session once"
            );
            for (group, name, target) in &links {
                assert_eq!(target, &format!("../../{name}"), "{store}/{list}/{group}");
                let through = mount
                    .path()
                    .join(list)
                    .join(group)
                    .join(name)
                    .join("header.json");
                assert!(
                    through.is_file(),
                    "{store}: {} leads to its session",
                    through.display()
                );
            }
            assert!(
                linked.iter().all(|name| sessions.contains(name)),
                "{store}/{list}: links lead to sessions"
            );
        }
        let projects = sorted_names(&mount.path().join("by-project"));
        assert!(
            projects.contains(&"Users\u{2215}mei\u{2215}code\u{2215}ledger-api".to_string()),
            "{store}: {projects:?}"
        );
        drop(mount);
    }
}

#[test]
fn by_date_is_the_same_tree_in_every_time_zone() {
    let copy = store_copy("jsonl");
    let trees: Vec<Vec<(String, String, String)>> = ["UTC", "Pacific/Kiritimati", "America/Adak"]
        .into_iter()
        .map(|tz| {
            let mount = Mount::builder(&copy.path)
                .options(&["-o", "grace=0"])
                .env("TZ", tz)
                .start();
            let tree = links(mount.path(), "by-date");
            drop(mount);
            tree
        })
        .collect();
    assert!(!trees[0].is_empty());
    assert_eq!(trees[0], trees[1]);
    assert_eq!(trees[0], trees[2]);
    for (day, _, _) in &trees[0] {
        assert!(
            day.len() == 10 && day.as_bytes()[4] == b'-' && day.as_bytes()[7] == b'-',
            "{day}"
        );
    }
}

#[test]
fn ids_spelled_like_root_entries_are_escaped_and_reachable() {
    let copy = store_copy("jsonl");
    let home = common::harness::session_home(&copy.path, "ledger-chat");
    let project = home.parent().expect("project").to_path_buf();
    let text = std::fs::read_to_string(home.join("session.jsonl")).expect("log");
    for id in ["sessions.jsonl", "by-project", "by-date"] {
        let dir = project.join(sessionfs::model::ids::encode_segment(id).expect("segment"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let renamed = text.replacen("\"id\":\"ledger-chat\"", &format!("\"id\":\"{id}\""), 1);
        std::fs::write(dir.join("session.jsonl"), renamed).expect("write");
    }
    let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
    let root = sorted_names(mount.path());
    for (own, escaped) in [
        ("sessions.jsonl", "~0073essions.jsonl"),
        ("by-project", "~0062y-project"),
        ("by-date", "~0062y-date"),
    ] {
        assert_eq!(root.iter().filter(|n| *n == own).count(), 1, "{root:?}");
        assert!(root.contains(&escaped.to_string()), "{root:?}");
        let header: Value = serde_json::from_slice(
            &std::fs::read(mount.path().join(escaped).join("header.json")).expect("header"),
        )
        .expect("json");
        assert_eq!(header["id"], own);
    }
    assert!(
        mount
            .path()
            .join("by-project")
            .join("Users\u{2215}mei\u{2215}code\u{2215}ledger-api")
            .join("~0062y-date")
            .is_symlink()
    );
    drop(mount);
}

#[test]
fn latest_moves_to_the_session_written_last_and_a_reader_keeps_its_own() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=600"]);
    let latest = mount.path().join("latest");
    let first = std::fs::read_link(&latest).expect("latest");
    let mut reader =
        std::fs::File::open(latest.join("transcript.md")).expect("open through latest");
    let mut before = String::new();
    std::io::Read::read_to_string(&mut reader, &mut before).expect("read");
    // Another session gets the newest event.
    let other = if first.to_str() == Some("ledger-chat") {
        "release-notes"
    } else {
        "ledger-chat"
    };
    let dir = mount.path().join(other);
    let last_seq = common::event_names(&dir).len() as u64 - 1;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let title = serde_json::json!({"type": "session/title", "seq": last_seq + 1, "time": now, "data": {"title": "newest", "messageSeqs": [], "source": {"kind": "user"}}});
    common::harness::append_jsonl(&copy.path, other, &[title]);
    common::within(std::time::Duration::from_secs(3), "latest moves", || {
        std::fs::read(dir.join("header.json"))
            .is_ok_and(|h| String::from_utf8_lossy(&h).contains("newest"))
            && std::fs::read_link(&latest).is_ok_and(|t| t.to_str() == Some(other))
    });
    // The descriptor opened through the old target still reads its session.
    let mut again = String::new();
    std::io::Seek::seek(&mut reader, std::io::SeekFrom::Start(0)).expect("seek");
    std::io::Read::read_to_string(&mut reader, &mut again).expect("read again");
    assert!(again.starts_with(&before));
    let project_latest = mount
        .path()
        .join("by-project")
        .join("Users\u{2215}mei\u{2215}code\u{2215}ledger-api")
        .join("latest");
    assert!(
        std::fs::read_link(&project_latest).is_ok(),
        "a project has its own latest"
    );
    drop(reader);
    drop(mount);
}

#[test]
fn readable_names_show_ids_as_they_are_and_old_names_still_lead_there() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
    let id = "notes\\2026 · 50% «draft» 🦀~";
    let old = "notes~005C2026~0020~00B7~002050~0025~0020~00ABdraft~00BB~0020~D83E~DD80~007E";
    let root = sorted_names(mount.path());
    assert!(root.contains(&id.to_string()), "shown as it is: {root:?}");
    assert!(!root.contains(&old.to_string()), "and only so: {root:?}");
    let shown = mount.path().join(id);
    let header: Value =
        serde_json::from_slice(&std::fs::read(shown.join("header.json")).expect("header"))
            .expect("json");
    assert_eq!(header["id"], id);

    // The old name is no entry of its own, but every path through it works.
    let by_old = mount.path().join(old);
    assert_eq!(
        std::fs::read(by_old.join("transcript.md")).expect("old name"),
        std::fs::read(shown.join("transcript.md")).expect("shown name")
    );
    let events = |dir: &Path| {
        std::fs::read_dir(dir.join("events"))
            .expect("events")
            .count()
    };
    assert_eq!(events(&by_old), events(&shown));
    let through_cd = std::process::Command::new("sh")
        .arg("-c")
        .arg("cd \"$1\" && ls events | wc -l")
        .arg("sh")
        .arg(&by_old)
        .output()
        .expect("sh");
    assert_eq!(
        String::from_utf8_lossy(&through_cd.stdout).trim(),
        events(&shown).to_string()
    );

    // The catalogue and the lists name it so, and their links lead to it.
    let line = catalog(mount.path())
        .into_iter()
        .find(|line| line["id"] == id)
        .expect("in sessions.jsonl");
    assert_eq!(line["name"], id);
    let link = mount.path().join("by-project").join("_no-cwd").join(id);
    assert_eq!(
        std::fs::read_link(&link).expect("link"),
        Path::new("../..").join(id)
    );
    assert_eq!(
        link.canonicalize().expect("resolves"),
        shown.canonicalize().expect("shown")
    );

    // A fork child's parent link names it as it is shown.
    std::fs::write(shown.join("fork"), b"32 a-child-of-notes\n").expect("fork");
    let child = mount.path().join("a-child-of-notes");
    assert_eq!(
        std::fs::read_link(child.join("parent")).expect("parent"),
        Path::new("..").join(id)
    );
    drop(mount);
}

/// Sets every directory under `root` to have changed an hour ago, as in a
/// store in use: no listing revision moves then, so only a watch of the
/// session (or of the database) sees a write.
fn age_directories(root: &Path) {
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            }
        }
        std::fs::File::open(&dir)
            .and_then(|d| d.set_modified(hour_ago))
            .expect("set the directory's time");
    }
}

/// Writes a title event to `other`, a session nothing of which was read
/// through the mount, and waits for `latest` to lead there.
fn latest_follows_an_unused_session(store: &str) {
    let copy = store_copy(store);
    let sqlite = store.starts_with("sqlite");
    if !sqlite {
        age_directories(&copy.path);
    }
    let mount = Mount::new(&copy.path, &["-o", "grace=600"]);
    let latest = mount.path().join("latest");
    let first = std::fs::read_link(&latest).expect("latest");
    let other = if first.to_str() == Some("ledger-chat") {
        "release-notes"
    } else {
        "ledger-chat"
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let title = |seq: u64| serde_json::json!({"type": "session/title", "seq": seq, "time": now, "data": {"title": "newest", "messageSeqs": [], "source": {"kind": "user"}}});
    let written = std::time::Instant::now();
    if sqlite {
        let mut connection = rusqlite::Connection::open(&copy.path).expect("open");
        let last: i64 = connection
            .query_row(
                "SELECT max(seq) FROM events WHERE session_id = ?1",
                [other],
                |row| row.get(0),
            )
            .expect("last seq");
        common::harness::commit_batch(&mut connection, other, &[title(last as u64 + 1)]);
    } else {
        // Its last seq from the store's log, not through the mount.
        let log = common::harness::session_home(&copy.path, other).join("session.jsonl");
        let last = std::fs::read_to_string(&log)
            .expect("log")
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter_map(|event| event["seq"].as_u64())
            .max()
            .expect("events");
        common::harness::append_jsonl(&copy.path, other, &[title(last + 1)]);
    }
    common::within(std::time::Duration::from_secs(3), "latest moves", || {
        std::fs::read_link(&latest).is_ok_and(|t| t.to_str() == Some(other))
    });
    eprintln!(
        "{store}: latest moved from {first:?} to {other}, not in use, {:?} after its write",
        written.elapsed()
    );
    let header: Value =
        serde_json::from_slice(&std::fs::read(latest.join("header.json")).expect("header"))
            .expect("json");
    assert_eq!(header["title"]["title"], "newest");
    drop(mount);
}

#[test]
fn latest_follows_a_write_to_a_jsonl_session_no_one_has_opened() {
    latest_follows_an_unused_session("jsonl");
}

#[test]
fn latest_follows_a_write_to_an_sqlite_session_no_one_has_opened() {
    latest_follows_an_unused_session("sqlite17");
}
