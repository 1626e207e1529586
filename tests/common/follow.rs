//! Following a store from the far side of whatever it is reached through:
//! a file as `tail -f` does while turns are appended to its session, and
//! sessions made and removed there.

use std::time::Duration;

use serde_json::json;

use super::harness::{append_jsonl, session_home};
use super::{TempDir, session_names, within};

/// One complete turn after `last`, whose user message says `needle`.
pub fn turn(last: u64, turn: u64, needle: &str) -> Vec<serde_json::Value> {
    let time = 1_790_000_000_000i64 + turn as i64 * 1000;
    vec![
        json!({"type": "turn/start", "seq": last + 1, "time": time, "data": {"turn": turn}}),
        json!({"type": "step/start", "seq": last + 2, "time": time + 1, "data": {"turn": turn, "step": 1}}),
        json!({"type": "user/message", "seq": last + 3, "time": time + 2, "data": {"content": [{"type": "text", "text": needle}], "source": {"kind": "user"}, "role": "user", "id": format!("u-{needle}")}, "surfaceOp": "append"}),
        json!({"type": "assistant/message", "seq": last + 4, "time": time + 3, "data": {"turn": turn, "step": 1, "message": {"role": "assistant", "content": [{"type": "text", "text": format!("answer to {needle}")}], "source": {"kind": "model", "provider": "deepseek", "model": "m"}, "id": format!("a-{needle}")}, "usage": {"inputTokens": 1, "outputTokens": 1}}, "surfaceOp": "append"}),
        json!({"type": "step/end", "seq": last + 5, "time": time + 4, "data": {"turn": turn, "step": 1}}),
        json!({"type": "turn/end", "seq": last + 6, "time": time + 5, "data": {"turn": turn, "reason": {"kind": "completed"}}}),
    ]
}

/// `tail -c +1 -f PATH`, its output captured in a file until dropped.
pub struct Tail {
    child: std::process::Child,
    _dir: TempDir,
    out: std::path::PathBuf,
}

impl Tail {
    pub fn follow(path: &std::path::Path) -> Tail {
        let dir = TempDir::new("tail");
        let out = dir.path().join("tail.out");
        let child = std::process::Command::new("tail")
            .args(["-c", "+1", "-f"])
            .arg(path)
            .stdout(std::fs::File::create(&out).expect("capture"))
            .spawn()
            .expect("tail");
        Tail {
            child,
            _dir: dir,
            out,
        }
    }

    pub fn printed(&self) -> Vec<u8> {
        std::fs::read(&self.out).expect("tail output")
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tail -f` prints every turn appended on the far side, and what it printed
/// ends as the final file.
pub fn tail_follows(transcript: &std::path::Path, store: &std::path::Path, events: u64) {
    let tail = Tail::follow(transcript);
    let mut last = events - 1;
    for (n, needle) in ["far side one 7c1a", "far side two 7c1b"]
        .iter()
        .enumerate()
    {
        std::thread::sleep(Duration::from_millis(700));
        append_jsonl(store, "ledger-chat", &turn(last, 100 + n as u64, needle));
        last += 6;
        let took = within(Duration::from_secs(5), "tail -f printing the turn", || {
            String::from_utf8_lossy(&tail.printed()).contains(needle)
        });
        eprintln!("tail -f printed {needle:?} after {took:?}");
    }
    within(
        Duration::from_secs(5),
        "tail's output equal to the file",
        || std::fs::read(transcript).is_ok_and(|file| file == tail.printed()),
    );
}

/// A session `id` made on the far side (a copy of `release-notes` in
/// `store`), seen listed at `mount`, then removed and seen gone, each within
/// `limit`. Returns how long each took.
pub fn new_and_removed_session_shows(
    store: &std::path::Path,
    mount: &std::path::Path,
    id: &str,
    limit: Duration,
) -> (Duration, Duration) {
    let home = session_home(store, "release-notes");
    let fresh = home.parent().expect("project").join(id);
    std::fs::create_dir_all(&fresh).expect("mkdir");
    let text = std::fs::read_to_string(home.join("session.jsonl")).expect("log");
    std::fs::write(
        fresh.join("session.jsonl"),
        text.replacen("\"id\":\"release-notes\"", &format!("\"id\":\"{id}\""), 1),
    )
    .expect("write");
    let listed = within(limit, "the new session listed", || {
        session_names(mount).contains(&id.to_string())
    });
    std::fs::remove_dir_all(&fresh).expect("remove");
    let gone = within(limit, "the removed session gone", || {
        !session_names(mount).contains(&id.to_string())
    });
    (listed, gone)
}
