//! Past the inotify watch limit the mount goes on: sessions whose directory
//! cannot be watched are polled, and the log says so once. The limit is the
//! system's (`fs.inotify.max_user_watches`): this test lowers it and puts it
//! back, even when it fails, and is a test binary of its own so no other test
//! runs meanwhile.

mod common;

use std::path::Path;
use std::time::Duration;

use common::harness::append_jsonl;
use common::{Mount, session_dir, session_names, store_copy, within};
use serde_json::json;

const LIMIT: &str = "/proc/sys/fs/inotify/max_user_watches";

/// Sets the watch limit, and puts the old one back when dropped.
struct WatchLimit(String);

impl WatchLimit {
    fn set(limit: usize) -> WatchLimit {
        let old = std::fs::read_to_string(LIMIT).expect("read the limit");
        std::fs::write(LIMIT, limit.to_string()).expect("set the limit (as root)");
        WatchLimit(old)
    }
}

impl Drop for WatchLimit {
    fn drop(&mut self) {
        let _ = std::fs::write(LIMIT, self.0.trim());
    }
}

/// Watches held now by every process (each `inotify wd:` line of an inotify
/// descriptor's fdinfo is one).
fn watches_in_use() -> usize {
    let mut count = 0;
    for process in std::fs::read_dir("/proc").expect("proc").flatten() {
        let Ok(fds) = std::fs::read_dir(process.path().join("fdinfo")) else {
            continue;
        };
        for fd in fds.flatten() {
            count += std::fs::read_to_string(fd.path()).map_or(0, |info| {
                info.lines()
                    .filter(|l| l.starts_with("inotify wd:"))
                    .count()
            });
        }
    }
    count
}

fn event_count(dir: &Path) -> usize {
    common::event_names(dir).len()
}

#[test]
fn past_the_watch_limit_sessions_in_use_are_polled_and_the_log_says_so_once() {
    let copy = store_copy("jsonl");
    // The store's own directories (the root and 8 projects) and two sessions.
    let projects = std::fs::read_dir(&copy.path).expect("root").count();
    let _limit = WatchLimit::set(watches_in_use() + 1 + projects + 2);
    let mount = Mount::builder(&copy.path)
        .options(&["-o", "grace=600"])
        .capture_stderr()
        .start();
    let names = session_names(mount.path());
    assert!(names.len() >= 8, "{names:?}");
    // Use eight sessions: the last six cannot be watched.
    for name in &names[..8] {
        std::fs::read(mount.path().join(name).join("header.json")).expect("header");
    }
    // The last of them that can be read was loaded past the limit.
    let polled = names[..8]
        .iter()
        .rev()
        .find(|name| mount.path().join(name).join("events").is_dir())
        .expect("a readable session");
    let dir = session_dir(mount.path(), polled);
    let before = event_count(&dir);
    let title = json!({"type": "session/title", "seq": before as u64, "time": 1_790_000_000_000i64, "data": {"title": "past the limit", "messageSeqs": [], "source": {"kind": "user"}}});
    append_jsonl(&copy.path, polled, &[title]);
    let took = within(
        Duration::from_millis(1500),
        "the append to a polled session",
        || event_count(&dir) == before + 1,
    );
    eprintln!("a session past the limit showed its append after {took:?}");
    let log = mount.stderr();
    assert_eq!(
        log.matches("the inotify watch limit (fs.inotify.max_user_watches) is reached")
            .count(),
        1,
        "{log}"
    );
    drop(mount);
}
