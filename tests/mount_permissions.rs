//! Issue #8, permissions: other users get exactly what the modes and
//! `allow_other` say, `uid=` hands the control files to that user, and what a
//! fork writes into the store is private to its owner whatever the umask.

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use common::{Mount, as_nobody, quote, session_dir, snapshot, store_copy};

fn errno_of(result: std::io::Result<impl Sized>) -> Option<i32> {
    result.err().and_then(|e| e.raw_os_error())
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .expect("meta")
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn modes_and_other_users_with_allow_other() {
    // `umask=022` widens the stored 0600 modes on purpose: everyone may read.
    let copy = store_copy("jsonl");
    let mount = Mount::new(
        &copy.path,
        &[
            "-o",
            "allow_other,default_permissions,umask=022,grace=0,window=60000",
        ],
    );
    let options = std::fs::read_to_string("/proc/mounts")
        .expect("mounts")
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(&mount.path().to_string_lossy()))
        .map(|l| l.split(' ').nth(3).unwrap_or_default().to_string())
        .expect("the mount is listed");
    eprintln!("allow_other: kernel mount options {options}");
    assert!(
        options.contains("allow_other") && options.contains("default_permissions"),
        "{options}"
    );
    let session = session_dir(mount.path(), "release-notes");
    let child = session_dir(mount.path(), "release-notes-alt");
    assert_eq!(mode(mount.path()), 0o555);
    assert_eq!(mode(&mount.path().join("flush")), 0o644);
    assert_eq!(mode(&session), 0o555);
    for file in [
        "header.json",
        "surface.jsonl",
        "transcript.md",
        "index.jsonl",
    ] {
        assert_eq!(mode(&session.join(file)), 0o444, "{file}");
    }
    let first_event = std::fs::read_dir(session.join("events"))
        .expect("events")
        .next()
        .expect("one")
        .expect("e")
        .path();
    assert_eq!(mode(&first_event), 0o444);
    assert_eq!(mode(&session.join("events")), 0o555);
    assert_eq!(mode(&session.join("children")), 0o555);
    assert_eq!(mode(&session.join("fork")), 0o644);
    assert_eq!(mode(&session.join("flush")), 0o644);
    assert_eq!(mode(&child.join("parent")), 0o777);
    let meta = std::fs::metadata(session.join("header.json")).expect("meta");
    assert_eq!(
        (meta.uid(), meta.gid()),
        (0, 0),
        "owned by the mounting user"
    );

    // nobody reads everything readable...
    let out = as_nobody(&format!(
        "cat {} && ls {} && cat {}",
        quote(&session.join("header.json")),
        quote(&session.join("events")),
        quote(&first_event)
    ));
    assert!(
        out.status.success(),
        "nobody reads: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"release-notes\""));
    let out = as_nobody(&format!("cat {}", quote(&session.join("fork"))));
    assert!(out.status.success(), "nobody reads the fork status");
    // ...but writes nothing: the kernel checks the 0644 modes (default_permissions).
    for target in [
        session.join("fork"),
        session.join("flush"),
        mount.path().join("flush"),
        session.join("header.json"),
    ] {
        let out = as_nobody(&format!("echo 42 > {}", quote(&target)));
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!(
            "allow_other: nobody writing {}: {}",
            target.file_name().unwrap().to_string_lossy(),
            stderr.trim()
        );
        assert!(
            !out.status.success() && stderr.contains("Permission denied"),
            "{}: {stderr}",
            target.display()
        );
    }
    let out = as_nobody(&format!("touch {}", quote(&mount.path().join("new"))));
    assert!(!out.status.success(), "nobody cannot create files");
    assert!(
        !std::fs::read_to_string(session.join("fork"))
            .expect("status")
            .contains("fork: through"),
        "no fork happened"
    );
    // Root can.
    std::fs::write(session.join("fork"), b"42 roots-child\n").expect("root forks");
    std::fs::write(mount.path().join("flush"), b"\n").expect("root flushes");
    // Root's DAC override does not make generated files writable.
    assert_eq!(
        errno_of(
            std::fs::OpenOptions::new()
                .write(true)
                .open(session.join("header.json"))
        ),
        Some(libc::EROFS)
    );
}

#[test]
fn allow_other_shows_no_more_than_the_store_grants() {
    // The Harness keeps each session private (0600 files). Through allow_other
    // (say, for a backup agent) a session stays as private as its stored file:
    // only its read bits are shown.
    let copy = store_copy("jsonl");
    let public = copy
        .path
        .join("--Users-mei-code-ledger-api--/ledger-chat/session.jsonl");
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let mount = Mount::new(&copy.path, &["-o", "allow_other,grace=0"]);
    let private = session_dir(mount.path(), "release-notes");
    let shared = session_dir(mount.path(), "ledger-chat");
    assert_eq!(mode(&private), 0o500);
    assert_eq!(mode(&private.join("events")), 0o500);
    assert_eq!(mode(&private.join("header.json")), 0o400);
    assert_eq!(mode(&private.join("fork")), 0o600);
    assert_eq!(mode(&shared), 0o555);
    assert_eq!(mode(&shared.join("transcript.md")), 0o444);
    assert_eq!(mode(&shared.join("flush")), 0o644);
    for target in [private.join("header.json"), private.join("transcript.md")] {
        let out = as_nobody(&format!("cat {}", quote(&target)));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("Permission denied"),
            "{}: {stderr}",
            target.display()
        );
        assert!(out.stdout.is_empty());
    }
    let out = as_nobody(&format!("ls {}", quote(&private.join("events"))));
    assert!(
        !out.status.success(),
        "nobody cannot list a private session"
    );
    let out = as_nobody(&format!(
        "cat {} {}",
        quote(&shared.join("header.json")),
        quote(&shared.join("transcript.md"))
    ));
    assert!(
        out.status.success(),
        "a session the store shares is readable: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Root reads everything, as on the store itself.
    assert!(std::fs::read(private.join("transcript.md")).is_ok());
}

#[test]
fn without_allow_other_other_users_get_nothing() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
    let header = session_dir(mount.path(), "release-notes").join("header.json");
    for command in [
        format!("cat {}", quote(&header)),
        format!("ls {}", quote(mount.path())),
        format!("stat {}", quote(mount.path())),
    ] {
        let out = as_nobody(&command);
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!(
            "no allow_other: nobody `{}`: {}",
            command.split(' ').next().unwrap(),
            stderr.trim()
        );
        assert!(
            !out.status.success() && stderr.contains("Permission denied"),
            "{command}: {stderr}"
        );
    }
    assert!(std::fs::read_to_string(&header).is_ok(), "the owner reads");
}

#[test]
fn uid_option_hands_the_control_files_to_that_user() {
    // `-o uid=N` makes N the owner of every file, so N may write fork and flush.
    let copy = store_copy("jsonl");
    let mount = Mount::new(
        &copy.path,
        &["-o", "allow_other,uid=65534,gid=65534,grace=0,window=60000"],
    );
    let session = session_dir(mount.path(), "release-notes");
    let meta = std::fs::metadata(session.join("fork")).expect("meta");
    assert_eq!((meta.uid(), meta.gid()), (65534, 65534));
    let out = as_nobody(&format!(
        "echo '42 nobodys-child' > {} && echo > {}",
        quote(&session.join("fork")),
        quote(&mount.path().join("flush"))
    ));
    eprintln!(
        "uid=65534: nobody forking: {}",
        if out.status.success() {
            "allowed".to_string()
        } else {
            String::from_utf8_lossy(&out.stderr).into_owned()
        }
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The child is written by the sessionfs process (root), owner-only.
    let child = copy
        .path
        .join("--Users-mei-code-ledger-api--")
        .join("nobodys-child");
    let file = child.join("session.jsonl");
    assert_eq!(
        std::fs::metadata(&file).expect("child").uid(),
        0,
        "the store file belongs to the mounting user"
    );
    assert_eq!(mode(&file), 0o600);
}

#[test]
fn fork_children_in_the_store_are_private() {
    for (store_name, umask) in [("jsonl", 0o022), ("jsonl-zstd", 0o000), ("sqlite17", 0o000)] {
        let copy = store_copy(store_name);
        let before: BTreeSet<PathBuf> = snapshot(copy.dir.path()).into_keys().collect();
        let mount = Mount::builder(&copy.path)
            .options(&["-o", "grace=0,window=60000"])
            .umask(umask)
            .start();
        let parent = session_dir(mount.path(), "release-notes");
        std::fs::write(parent.join("fork"), b"42 private-child\n").expect("fork");
        std::fs::write(mount.path().join("flush"), b"\n").expect("flush");
        drop(mount);
        let after: BTreeSet<PathBuf> = snapshot(copy.dir.path()).into_keys().collect();
        let new: Vec<&PathBuf> = after.difference(&before).collect();
        let mut report = Vec::new();
        for relative in &new {
            let path = copy.dir.path().join(relative);
            report.push(format!("{} {:o}", relative.display(), mode(&path)));
            assert_eq!(
                mode(&path) & 0o077,
                0,
                "{store_name} (umask {umask:o}): {} is private",
                relative.display()
            );
            if relative.to_string_lossy().contains("private-child") {
                assert_eq!(mode(&path), 0o600, "{}", relative.display());
                assert_eq!(
                    mode(path.parent().expect("dir")),
                    0o700,
                    "the child directory"
                );
            }
        }
        eprintln!("private: {store_name} with umask {umask:03o}: new files {report:?}");
        if store_name.starts_with("jsonl") {
            assert!(
                new.iter()
                    .any(|p| p.to_string_lossy().contains("private-child")),
                "{store_name}: the child was written"
            );
        } else {
            assert_eq!(mode(&copy.path), 0o600, "the database keeps its mode");
        }
    }
}
