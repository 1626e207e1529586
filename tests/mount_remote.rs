//! Stores on other hosts, through sshfs on loopback: a JSONL store followed by
//! polling (appends, new and removed sessions, forks landing on the far side),
//! and an SQLite store, which sessionfs mounts read-only there because SQLite's
//! locking is not safe over a network file system; and two readers, each with
//! its own sshfs mount of one store, forking from one parent at once.

mod common;

use std::time::Duration;

use common::follow::{new_and_removed_session_shows, tail_follows};
use common::harness::{append_jsonl, session_home};
use common::servers::Sshd;
use common::{Mount, session_dir, store_copy, within};
use serde_json::json;

/// Polling every 0.5 s, plus a second: the bound the issue sets.
const SHOWS_WITHIN: Duration = Duration::from_millis(1500);

#[test]
fn a_jsonl_store_over_sshfs_is_followed_and_forked_into() {
    let copy = store_copy("jsonl");
    let sshd = Sshd::start();
    let remote = sshd.sshfs(&copy.path);
    let mount = Mount::builder(remote.path())
        .options(&["-o", "grace=600"])
        .capture_stderr()
        .start();
    let dir = session_dir(mount.path(), "ledger-chat");
    let events = common::event_names(&dir).len() as u64;
    // An append on the far side (the directory itself) shows.
    let title = json!({"type": "session/title", "seq": events, "time": 1_790_000_000_000i64, "data": {"title": "over sshfs", "messageSeqs": [], "source": {"kind": "user"}}});
    append_jsonl(&copy.path, "ledger-chat", &[title]);
    let took = within(SHOWS_WITHIN, "the append over sshfs", || {
        common::event_names(&dir).len() as u64 == events + 1
    });
    eprintln!("append shown after {took:?}");
    // A new session on the far side shows; a removed one goes.
    let (listed, gone) =
        new_and_removed_session_shows(&copy.path, mount.path(), "far-side-new", SHOWS_WITHIN);
    eprintln!("new session listed after {listed:?}, removed gone after {gone:?}");
    // A fork through the mount lands on the far side, complete.
    std::fs::write(dir.join("fork"), b"321 forked-over-sshfs\n").expect("fork");
    std::fs::write(mount.path().join("flush"), b"\n").expect("flush");
    let child = session_home(&copy.path, "forked-over-sshfs").join("session.jsonl");
    let written = std::fs::read_to_string(&child).expect("the child on the far side");
    assert!(
        written.contains("\"id\":\"forked-over-sshfs\""),
        "{written:.200}"
    );
    assert!(!mount.stderr().contains("read-only"), "{}", mount.stderr());
    drop(mount);
    drop(remote);
    // Read on the far side itself, the child holds seqs 0..=321 and its seed marker.
    let local = Mount::new(&copy.path, &["-o", "grace=600"]);
    let names = common::event_names(&session_dir(local.path(), "forked-over-sshfs"));
    assert_eq!(names.len(), 322 + 1, "{:?}", names.last());
    drop(local);
}

#[test]
fn an_sqlite_store_over_sshfs_is_mounted_read_only_and_says_why() {
    let copy = store_copy("sqlite17");
    let sshd = Sshd::start();
    let remote = sshd.sshfs(copy.path.parent().expect("store dir"));
    let database = remote.join(copy.path.file_name().expect("db name"));
    let before = std::fs::read(&copy.path).expect("db");
    let mount = Mount::builder(&database).capture_stderr().start();
    let dir = session_dir(mount.path(), "ledger-chat");
    assert!(
        dir.join("transcript.md").is_file(),
        "sessions read as before"
    );
    let refused = std::fs::write(dir.join("fork"), b"321 never\n").expect_err("refused");
    assert_eq!(refused.raw_os_error(), Some(libc::EROFS), "{refused}");
    let refused = std::fs::write(mount.path().join("flush"), b"\n").expect_err("refused");
    assert_eq!(refused.raw_os_error(), Some(libc::EROFS));
    let status = std::fs::read_to_string(dir.join("fork")).expect("cat fork");
    assert!(
        status.contains("read-only: the SQLite store") && status.contains("network or FUSE"),
        "{status}"
    );
    assert_eq!(
        std::fs::metadata(dir.join("fork")).expect("stat").len(),
        status.len() as u64,
        "sized exactly"
    );
    let log = mount.stderr();
    assert_eq!(
        log.matches("mounted read-only: the SQLite store").count(),
        1,
        "{log}"
    );
    drop(mount);
    assert_eq!(
        std::fs::read(&copy.path).expect("db"),
        before,
        "nothing was written"
    );
    // The option whose name says the risk lifts it.
    let mount = Mount::new(&database, &["-o", "unsafe_network_sqlite_writes"]);
    let status = std::fs::read_to_string(session_dir(mount.path(), "ledger-chat").join("fork"))
        .expect("cat fork");
    assert!(!status.contains("read-only"), "{status}");
    drop(mount);
    drop(remote);
}

#[test]
fn two_readers_of_one_shared_store_fork_at_once_and_never_take_a_name_twice() {
    let copy = store_copy("jsonl");
    let sshd = Sshd::start();
    // Two hosts: each its own sshfs mount of the store and its own sessionfs.
    let remotes = [sshd.sshfs(&copy.path), sshd.sshfs(&copy.path)];
    let mounts: Vec<Mount> = remotes
        .iter()
        .map(|remote| Mount::new(remote.path(), &["-o", "grace=600"]))
        .collect();
    let forks: Vec<_> = mounts
        .iter()
        .map(|m| session_dir(m.path(), "ledger-chat").join("fork"))
        .collect();
    // Both fork one name at the same moment: one takes it, the other is told.
    let start = std::sync::Barrier::new(2);
    let answers: Vec<std::io::Result<()>> = std::thread::scope(|scope| {
        let start = &start;
        let racers: Vec<_> = forks
            .iter()
            .map(|fork| {
                scope.spawn(move || {
                    start.wait();
                    std::fs::write(fork, b"321 taken-once\n")
                })
            })
            .collect();
        racers
            .into_iter()
            .map(|r| r.join().expect("racer"))
            .collect()
    });
    let taken: Vec<usize> = (0..2).filter(|&n| answers[n].is_ok()).collect();
    assert_eq!(
        taken.len(),
        1,
        "exactly one fork takes the name: {answers:?}"
    );
    let loser = 1 - taken[0];
    let refused = answers[loser].as_ref().expect_err("refused");
    assert_eq!(refused.raw_os_error(), Some(libc::EEXIST), "{refused}");
    let status = std::fs::read_to_string(&forks[loser]).expect("cat fork");
    assert!(status.contains("already exists"), "{status}");
    // Both fork with default names at the same moment: both are kept.
    std::thread::scope(|scope| {
        let start = &start;
        for fork in &forks {
            scope.spawn(move || {
                start.wait();
                std::fs::write(fork, b"321\n").expect("fork with a default name");
            });
        }
    });
    for mount in &mounts {
        std::fs::write(mount.path().join("flush"), b"\n").expect("flush");
    }
    // Each mount shows every child, the other's within the bound.
    let children = |mount: &Mount| {
        common::sorted_names(&session_dir(mount.path(), "ledger-chat").join("children"))
    };
    for mount in &mounts {
        let took = within(SHOWS_WITHIN, "the other reader's children", || {
            children(mount).len() == 3
        });
        eprintln!("the other reader's children shown after {took:?}");
    }
    assert_eq!(children(&mounts[0]), children(&mounts[1]));
    drop(mounts);
    drop(remotes);
    // On the far side: three children, each written once and whole.
    let local = Mount::new(&copy.path, &["-o", "grace=600"]);
    let kids = children(&local);
    assert_eq!(kids.len(), 3, "{kids:?}");
    assert!(kids.contains(&"taken-once".to_string()), "{kids:?}");
    for kid in &kids {
        let names = common::event_names(&session_dir(local.path(), kid));
        assert_eq!(names.len(), 322 + 1, "{kid}: {:?}", names.last());
    }
    drop(local);
}

#[test]
fn tail_f_follows_a_transcript_growing_on_the_far_side() {
    let copy = store_copy("jsonl");
    let sshd = Sshd::start();
    let remote = sshd.sshfs(&copy.path);
    let mount = Mount::new(remote.path(), &["-o", "grace=600"]);
    let dir = session_dir(mount.path(), "ledger-chat");
    let events = common::event_names(&dir).len() as u64;
    tail_follows(&dir.join("transcript.md"), &copy.path, events);
    drop(mount);
}

#[test]
fn a_mount_read_over_sshfs_serves_grep_cp_and_tail() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=600"]);
    let sshd = Sshd::start();
    let remote = sshd.sshfs(mount.path());
    let run = |program: &str, args: &[&str], cwd: &std::path::Path| {
        let out = std::process::Command::new(program)
            .args(args)
            .current_dir(cwd)
            .output()
            .expect(program);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    // grep -r over the sshfs view finds what it finds on the mount itself.
    let direct = run("grep", &["-rc", "ledger", "ledger-chat"], mount.path());
    let through = run("grep", &["-rc", "ledger", "ledger-chat"], remote.path());
    assert_eq!(direct.0, Some(0), "{direct:?}");
    assert_eq!(through, direct);
    // cp -a through sshfs copies the session whole: diff -r finds nothing.
    let target = common::TempDir::new("copied");
    let copied = target.path().join("ledger-chat");
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(remote.join("ledger-chat"))
        .arg(&copied)
        .status()
        .expect("cp");
    assert!(status.success());
    let diff = run(
        "diff",
        &[
            "-r",
            "--no-dereference",
            &copied.display().to_string(),
            &session_dir(mount.path(), "ledger-chat")
                .display()
                .to_string(),
        ],
        target.path(),
    );
    assert_eq!(diff, (Some(0), String::new()));
    // tail -f through sshfs follows appends to the store.
    let events = common::event_names(&session_dir(mount.path(), "ledger-chat")).len() as u64;
    tail_follows(
        &remote.join("ledger-chat/transcript.md"),
        &copy.path,
        events,
    );
    drop(remote);
    drop(mount);
}
