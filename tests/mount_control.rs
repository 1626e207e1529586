//! The control files: `fork` makes a child session from a stable prefix, in the
//! store's own encoding; `flush` returns once everything sessionfs accepted is
//! durable. Checked on every store kind, through fresh mounts.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Mount, events, read_json, session_dir, snapshot, sorted_names, store_copy};
use serde_json::Value;

fn sh(command: &str) -> (bool, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(command)
        .output()
        .expect("sh");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn children(dir: &Path) -> Vec<String> {
    sorted_names(&dir.join("children"))
}

/// The Harness's fork rules, checked on a child read back from the store.
fn assert_valid_child(child: &Path, parent_events: &[Value], parent: &Value, boundary: usize) {
    let header = read_json(&child.join("header.json"));
    assert_eq!(header["parentSession"], parent["id"]);
    assert_eq!(header["seedLength"], boundary as u64 + 1);
    assert_eq!(header["cwd"], parent["cwd"]);
    assert_eq!(header["version"], 0);
    assert!(header.get("origin").is_none() && header.get("agentPreset").is_none());
    let got = events(child);
    assert_eq!(got.len(), boundary + 2, "the seed and one end-seed marker");
    for (i, (g, p)) in got.iter().zip(parent_events).take(boundary + 1).enumerate() {
        assert_eq!(g, p, "inherited event {i}");
        assert_eq!(
            serde_json::to_string(g).ok(),
            serde_json::to_string(p).ok(),
            "inherited event {i} keeps its key order"
        );
    }
    let marker = &got[boundary + 1];
    assert_eq!(marker["type"], "session/end-seed");
    assert_eq!(marker["seq"], boundary as u64 + 1);
    assert_eq!(marker["data"], serde_json::json!({}));
    assert_eq!(marker["time"], header["createdAt"]);
    let link = std::fs::read_link(child.join("parent")).expect("parent link");
    assert_eq!(
        link.to_string_lossy(),
        format!(
            "../{}",
            sessionfs::fs::mount_name(parent["id"].as_str().expect("id"))
        )
    );
}

fn fork_flush_and_read_back(store: &str) {
    let copy = store_copy(store);
    let parent_id = "release-notes";
    let parent_artifacts: Vec<_> = snapshot(copy.dir.path())
        .into_iter()
        .filter(|(p, _)| p.to_string_lossy().contains("/release-notes/"))
        .collect();
    let mount = Mount::new(&copy.path, &["-o", "grace=0,window=60000"]);
    let parent = session_dir(mount.path(), parent_id);
    let parent_events = events(&parent);
    let parent_header = read_json(&parent.join("header.json"));

    // `echo N > fork` (the shell truncates first) names nothing: a fresh id.
    let (ok, err) = sh(&format!("echo 42 > '{}'", parent.join("fork").display()));
    assert!(ok, "fork failed: {err}");
    let status = std::fs::read_to_string(parent.join("fork")).expect("cat fork");
    let child_id = status
        .lines()
        .find_map(|l| l.strip_prefix("fork: through seq 42 -> "))
        .expect("fork recorded")
        .to_string();
    assert!(
        child_id.starts_with("session-") && child_id.len() == 44,
        "{child_id}"
    );
    let child = session_dir(mount.path(), &child_id);
    assert!(
        child.join("header.json").exists(),
        "the child appears at once"
    );
    assert_valid_child(&child, &parent_events, &parent_header, 42);
    // A named child through a plain write(2), at the last turn end; the name is then taken.
    let turn_end = parent_events
        .iter()
        .rev()
        .find(|e| e["type"] == "turn/end")
        .and_then(|e| e["seq"].as_u64())
        .expect("a turn end") as usize;
    std::fs::write(parent.join("fork"), format!("{turn_end} my-branch\n")).expect("named fork");
    assert_valid_child(
        &session_dir(mount.path(), "my-branch"),
        &parent_events,
        &parent_header,
        turn_end,
    );
    let err =
        std::fs::write(parent.join("fork"), b"42 my-branch").expect_err("a taken name is refused");
    assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
    assert!(
        std::fs::read_to_string(parent.join("fork"))
            .expect("status")
            .contains("last-error:")
    );
    assert!(children(&parent).contains(&"my-branch".to_string()));

    // Not durable yet (a one-minute window); flush makes it so before returning.
    let flush_status = std::fs::read_to_string(mount.path().join("flush")).expect("cat flush");
    assert!(
        flush_status.starts_with("pending: 2 session(s)"),
        "{flush_status}"
    );
    let (ok, err) = sh(&format!(
        "echo > '{}'",
        mount.path().join("flush").display()
    ));
    assert!(ok, "flush failed: {err}");
    let flush_status = std::fs::read_to_string(mount.path().join("flush")).expect("cat flush");
    assert!(
        flush_status.starts_with("pending: 0 session(s)")
            && flush_status.contains(&format!("durable: my-branch through seq {}", turn_end + 1)),
        "{flush_status}"
    );
    let (ok, _) = sh(&format!("echo > '{}'", parent.join("flush").display()));
    assert!(ok);
    assert!(
        std::fs::read_to_string(parent.join("flush"))
            .expect("status")
            .contains("nothing was pending")
    );
    drop(mount);

    // A fresh mount reads both children from the store; the parent is untouched.
    let after: Vec<_> = snapshot(copy.dir.path())
        .into_iter()
        .filter(|(p, _)| p.to_string_lossy().contains("/release-notes/"))
        .collect();
    assert_eq!(parent_artifacts, after, "the parent's bytes never change");
    let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
    let parent = session_dir(mount.path(), parent_id);
    assert_valid_child(
        &session_dir(mount.path(), &child_id),
        &parent_events,
        &parent_header,
        42,
    );
    assert_valid_child(
        &session_dir(mount.path(), "my-branch"),
        &parent_events,
        &parent_header,
        turn_end,
    );
    let lineage = children(&parent);
    assert!(
        lineage.contains(&"my-branch".to_string())
            && lineage.contains(&child_id)
            && lineage.contains(&"release-notes-alt".to_string())
    );
    // Clean checkpoint: the child's surface is the parent's surface at the boundary
    // plus nothing (the end-seed marker is log-only).
    let surface =
        std::fs::read_to_string(session_dir(mount.path(), "my-branch").join("surface.jsonl"))
            .expect("surface");
    assert!(!surface.is_empty());
}

#[test]
fn fork_and_flush_on_jsonl() {
    fork_flush_and_read_back("jsonl");
}

#[test]
fn fork_and_flush_on_zstd() {
    fork_flush_and_read_back("jsonl-zstd");
}

#[test]
fn fork_and_flush_on_sqlite17() {
    fork_flush_and_read_back("sqlite17");
}

#[test]
fn fork_and_flush_on_sqlite14() {
    fork_flush_and_read_back("sqlite14");
}

#[test]
fn refused_forks_create_nothing() {
    let copy = store_copy("crash/jsonl-zstd");
    let before = snapshot(copy.dir.path());
    let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
    let session = session_dir(mount.path(), "drill-b-unknown-outcome-step2");
    let names_before: Vec<_> = std::fs::read_dir(mount.path())
        .expect("root")
        .count()
        .to_string()
        .into();
    let stored = events(&session)
        .iter()
        .filter(|e| e["type"] != "turn/end" || e["data"]["reason"]["kind"] != "interrupted")
        .count();
    let last_turn_end = events(&session)
        .iter()
        .filter(|e| e["type"] == "turn/end" && e["data"]["reason"]["kind"] == "completed")
        .map(|e| e["seq"].as_u64().expect("seq"))
        .max()
        .expect("a completed turn");
    for bad in [
        "abc\n",
        "-1\n",
        "\n",
        "1 2 3\n",
        &format!("{}\n", stored + 10),
        &format!("{}\n", last_turn_end + 2),
    ] {
        let err = std::fs::write(session.join("fork"), bad.as_bytes()).expect_err(bad);
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{bad:?}");
    }
    // The last seq of the stored log is inside the crashed turn: the synthetic
    // closers are never a valid boundary, so nothing is clipped or copied.
    let open = events(&session)
        .iter()
        .filter(|e| !e["type"].as_str().unwrap_or("").is_empty())
        .count()
        - 1;
    let err = std::fs::write(session.join("fork"), format!("{open}\n").as_bytes())
        .expect_err("closer boundary");
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    let status = std::fs::read_to_string(session.join("fork")).expect("status");
    assert!(
        status.contains("last-error:") && !status.contains("last-error: none"),
        "{status}"
    );
    let names_after: Vec<_> = std::fs::read_dir(mount.path())
        .expect("root")
        .count()
        .to_string()
        .into();
    assert_eq!(names_before, names_after, "no child directory appeared");
    // A stable boundary works and copies no synthetic event.
    std::fs::write(
        session.join("fork"),
        format!("{last_turn_end} stable-child\n").as_bytes(),
    )
    .expect("fork at a turn end");
    let child = events(&session_dir(mount.path(), "stable-child"));
    assert_eq!(child.len() as u64, last_turn_end + 2);
    std::fs::write(mount.path().join("flush"), b"\n").expect("flush");
    drop(mount);
    let after = snapshot(copy.dir.path());
    let new: Vec<_> = after.keys().filter(|k| !before.contains_key(*k)).collect();
    assert_eq!(new.len(), 1, "only the one child was written: {new:?}");
    assert!(new[0].to_string_lossy().contains("stable-child"));
    assert!(
        before.iter().all(|(k, v)| after.get(k) == Some(v)),
        "no existing byte changed"
    );
}

#[test]
fn a_read_only_mount_refuses_control_writes() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "ro"]);
    let session = session_dir(mount.path(), "release-notes");
    for file in [
        session.join("fork"),
        session.join("flush"),
        mount.path().join("flush"),
    ] {
        let err = std::fs::write(&file, b"42\n").expect_err("read-only");
        assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{}", file.display());
    }
    assert!(std::fs::read_to_string(session.join("header.json")).is_ok());
}

#[test]
fn kill_9_before_the_window_closes_leaves_a_valid_store() {
    for store in ["jsonl-zstd", "sqlite17"] {
        let copy = store_copy(store);
        let before = snapshot(copy.dir.path());
        let mount = Mount::new(&copy.path, &["-o", "window=10000"]);
        let parent = session_dir(mount.path(), "release-notes");
        std::fs::write(parent.join("fork"), b"42 doomed\n").expect("fork");
        assert!(
            session_dir(mount.path(), "doomed")
                .join("header.json")
                .exists()
        );
        // SAFETY: kill(2) on our own child process.
        unsafe { libc::kill(mount.pid() as i32, libc::SIGKILL) };
        let start = Instant::now();
        while Path::new(&format!("/proc/{}/stat", mount.pid())).exists()
            && std::fs::read_to_string(format!("/proc/{}/stat", mount.pid()))
                .is_ok_and(|s| !s.contains(") Z "))
        {
            assert!(start.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(mount);
        let after: std::collections::BTreeMap<_, _> = snapshot(copy.dir.path())
            .into_iter()
            .filter(|(p, _)| {
                !p.to_string_lossy().ends_with("-shm") && !p.to_string_lossy().ends_with("-wal")
            })
            .collect();
        let before: std::collections::BTreeMap<_, _> = before.into_iter().collect();
        assert_eq!(
            before, after,
            "{store}: nothing was written before the window closed"
        );
        let fresh = Mount::new(&copy.path, &["-o", "grace=0"]);
        assert!(
            !session_dir(fresh.path(), "doomed").exists(),
            "{store}: no child"
        );
        assert!(
            session_dir(fresh.path(), "release-notes")
                .join("surface.jsonl")
                .exists(),
            "{store}: parent intact"
        );
    }
}

/// A store on a small tmpfs, filled after mounting (so SQLite's `-wal` and
/// `-shm` exist), with a fork pending: the flush fails with ENOSPC, and the
/// store still mounts without the child.
fn a_full_disk_fails_the_flush_with_enospc(store_name: &str) {
    let dir = common::TempDir::new("tiny");
    let target = dir.path().join("fs");
    std::fs::create_dir(&target).expect("mkdir");
    let (ok, err) = sh(&format!(
        "mount -t tmpfs -o size=1m tmpfs '{}'",
        target.display()
    ));
    assert!(ok, "mounting a small tmpfs failed: {err}");
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _tmpfs = Unmount(target.clone());
    let source = common::fixtures().join("stores").join(store_name);
    let (store, kept) = if store_name.starts_with("sqlite") {
        let db = target.join("store/sessions.db");
        common::copy_tree(&source, &target.join("store"));
        (db.clone(), db)
    } else {
        let session = "--Users-mei-code-ledger-api--/release-notes";
        let store = target.join("store");
        common::copy_tree(&source.join(session), &store.join(session));
        (store.clone(), store)
    };
    let mount = Mount::new(&store, &["-o", "window=60000"]);
    let parent = session_dir(mount.path(), "release-notes");
    let before = snapshot(kept.parent().filter(|_| kept.is_file()).unwrap_or(&kept));
    // Fill the file system.
    let _ = Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", target.join("filler").display()))
        .arg("bs=4k")
        .stderr(std::process::Stdio::null())
        .status();
    std::fs::write(parent.join("fork"), b"42 no-room\n").expect("fork is accepted in memory");
    let err = std::fs::write(mount.path().join("flush"), b"\n").expect_err("the disk is full");
    assert_eq!(
        err.raw_os_error(),
        Some(libc::ENOSPC),
        "{store_name}: {err}"
    );
    let status = std::fs::read_to_string(mount.path().join("flush")).expect("status");
    assert!(
        status.contains("FAILED") && status.contains("no-room"),
        "{status}"
    );
    // The mount keeps serving, and the store holds no partial child.
    assert!(std::fs::read_to_string(parent.join("surface.jsonl")).is_ok());
    drop(mount);
    if !kept.is_file() {
        assert_eq!(
            before,
            snapshot(&kept),
            "a failed write leaves nothing behind"
        );
    }
    std::fs::remove_file(target.join("filler")).expect("make room");
    let fresh = Mount::new(&store, &["-o", "grace=0"]);
    assert!(
        session_dir(fresh.path(), "release-notes")
            .join("surface.jsonl")
            .exists()
    );
    assert!(!session_dir(fresh.path(), "no-room").exists());
}

#[test]
fn a_full_disk_fails_the_flush_with_enospc_on_jsonl() {
    a_full_disk_fails_the_flush_with_enospc("jsonl");
}

#[test]
fn a_full_disk_fails_the_flush_with_enospc_on_sqlite() {
    a_full_disk_fails_the_flush_with_enospc("sqlite17");
}

#[test]
fn the_backup_example_restores_an_identical_tree() {
    let copy = store_copy("jsonl-zstd");
    let mount = Mount::new(&copy.path, &["-o", "grace=0,window=60000"]);
    std::fs::write(
        session_dir(mount.path(), "release-notes").join("fork"),
        b"42 before-backup\n",
    )
    .expect("fork");
    let backup = common::TempDir::new("backup");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/backup.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(mount.path())
        .arg(&copy.path)
        .arg(backup.path())
        .env("SESSIONFS", common::binary())
        .output()
        .expect("backup.sh");
    assert!(
        out.status.success(),
        "backup.sh failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("backup verified"));
    // The fork made before the backup is in it.
    let restored = backup.path().join("restored/store");
    assert!(
        snapshot(&restored)
            .keys()
            .any(|k| k.to_string_lossy().contains("before-backup"))
    );
}
