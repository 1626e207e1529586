//! A store reached through rclone: `rclone serve sftp` of a JSONL store on
//! 127.0.0.1, `rclone mount` of that remote with the flags README gives, and
//! sessionfs over the rclone mount. The Harness-side writes go to the store
//! directory itself, as a writer on the far host would.

mod common;

use std::time::Duration;

use common::follow::{new_and_removed_session_shows, tail_follows};
use common::harness::{append_jsonl, session_home};
use common::servers::RcloneSftp;
use common::{Mount, session_dir, session_names, store_copy, within};
use serde_json::json;

/// Two rclone caches in a row keep a listing up to 1 s each (the server's
/// and the mount's `--dir-cache-time`), sessionfs lists the root again after
/// 1 s and polls every 0.5 s: 3.5 s at most.
const SHOWS_WITHIN: Duration = Duration::from_millis(3500);

/// The generated files of every session, as a mount shows them.
fn views(mount: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for name in session_names(mount) {
        for file in [
            "header.json",
            "surface.jsonl",
            "transcript.md",
            "index.jsonl",
        ] {
            let path = mount.join(&name).join(file);
            out.push((
                format!("{name}/{file}"),
                std::fs::read(&path).expect("read"),
            ));
        }
    }
    out
}

#[test]
fn a_jsonl_store_through_rclone_is_read_followed_and_forked_into() {
    let copy = store_copy("jsonl");
    let server = RcloneSftp::serve(&copy.path);
    let remote = server.mount(&[]);
    let mount = Mount::builder(remote.path())
        .options(&["-o", "grace=600"])
        .capture_stderr()
        .start();
    // Every session reads as it does on the store itself.
    let local = Mount::new(&copy.path, &["-o", "grace=600,noindex"]);
    assert_eq!(views(mount.path()), views(local.path()));
    drop(local);
    let dir = session_dir(mount.path(), "ledger-chat");
    let events = common::event_names(&dir).len() as u64;
    // An append on the far side shows.
    let title = json!({"type": "session/title", "seq": events, "time": 1_790_000_000_000i64, "data": {"title": "through rclone", "messageSeqs": [], "source": {"kind": "user"}}});
    append_jsonl(&copy.path, "ledger-chat", &[title]);
    let took = within(SHOWS_WITHIN, "the append through rclone", || {
        common::event_names(&dir).len() as u64 == events + 1
    });
    eprintln!("append shown after {took:?}");
    // tail -f follows turns appended on the far side.
    tail_follows(&dir.join("transcript.md"), &copy.path, events + 1);
    // A new session on the far side shows; a removed one goes.
    let (listed, gone) =
        new_and_removed_session_shows(&copy.path, mount.path(), "rclone-far-side", SHOWS_WITHIN);
    eprintln!("new session listed after {listed:?}, removed gone after {gone:?}");
    // A fork through the mount lands on the far side, complete: rclone has
    // no hard links, so the child is renamed into place, never over a file.
    std::fs::write(dir.join("fork"), b"321 forked-through-rclone\n").expect("fork");
    std::fs::write(mount.path().join("flush"), b"\n").expect("flush");
    let child = session_home(&copy.path, "forked-through-rclone").join("session.jsonl");
    let written = std::fs::read_to_string(&child).expect("the child on the far side");
    assert!(
        written.contains("\"id\":\"forked-through-rclone\""),
        "{written:.200}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(child.parent().expect("dir"))
        .expect("readdir")
        .map(|e| e.expect("entry").file_name())
        .filter(|name| name != "session.jsonl")
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    // A name taken on the far side is refused, not overwritten.
    let refused = std::fs::write(dir.join("fork"), b"321 forked-through-rclone\n")
        .expect_err("the name is taken");
    assert_eq!(refused.raw_os_error(), Some(libc::EEXIST), "{refused}");
    assert!(!mount.stderr().contains("read-only"), "{}", mount.stderr());
    drop(mount);
    drop(remote);
    // Read on the far side itself, the child holds seqs 0..=321 and its seed marker.
    let local = Mount::new(&copy.path, &["-o", "grace=600"]);
    let names = common::event_names(&session_dir(local.path(), "forked-through-rclone"));
    assert_eq!(names.len(), 322 + 1, "{:?}", names.last());
    drop(local);
}
