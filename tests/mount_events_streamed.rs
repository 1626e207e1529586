//! `events/` of a session too large to read at once is listed while the session
//! is read (`src/fs/streaming.rs`): through the kernel, a cold listing names
//! exactly what the built session lists, each once and in order.

mod common;

use std::io::Write;
use std::path::Path;

use common::{Mount, TempDir};

/// A raw JSONL store holding one session of `turns` short turns (five events each).
fn store_of_turns(root: &Path, turns: u64) {
    let dir = root.join("--tmp-huge--/huge");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let mut log =
        std::io::BufWriter::new(std::fs::File::create(dir.join("session.jsonl")).expect("create"));
    writeln!(
        log,
        r#"{{"type":"session","version":0,"id":"huge","createdAt":1773236880000,"cwd":"/tmp/huge","delegationDepth":0}}"#
    )
    .expect("write");
    for t in 0..turns {
        let (seq, turn) = (t * 5, t + 1);
        let time = 1_773_236_880_000 + t;
        for line in [
            format!(
                r#"{{"type":"turn/start","seq":{seq},"time":{time},"data":{{"turn":{turn}}}}}"#
            ),
            format!(
                r#"{{"type":"step/start","seq":{},"time":{time},"data":{{"turn":{turn},"step":1}}}}"#,
                seq + 1
            ),
            format!(
                r#"{{"type":"user/message","seq":{},"time":{time},"data":{{"content":[{{"type":"text","text":"question {turn}"}}],"source":{{"kind":"user"}},"role":"user","id":"u{turn}"}},"surfaceOp":"append"}}"#,
                seq + 2
            ),
            format!(
                r#"{{"type":"step/end","seq":{},"time":{time},"data":{{"turn":{turn},"step":1}}}}"#,
                seq + 3
            ),
            format!(
                r#"{{"type":"turn/end","seq":{},"time":{time},"data":{{"turn":{turn},"reason":{{"kind":"completed"}}}}}}"#,
                seq + 4
            ),
        ] {
            writeln!(log, "{line}").expect("write");
        }
    }
    log.flush().expect("flush");
}

fn names(dir: &Path) -> Vec<String> {
    // Directory order, as `ls -f` shows it: the order the listing produced.
    std::fs::read_dir(dir)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn a_cold_listing_of_a_large_events_dir_names_what_the_built_session_lists() {
    let store = TempDir::new("store");
    store_of_turns(store.path(), 12_000);
    let mount = Mount::new(store.path(), &[]);
    let events = mount.path().join("huge/events");
    let cold = names(&events);
    let built = names(&events);
    assert_eq!(cold.len(), 60_000);
    assert_eq!(cold, built);
    let mut sorted = cold.clone();
    sorted.sort();
    assert_eq!(sorted, cold, "in seq order");
    assert_eq!(cold[59_999], "00059999-turn.end.json");
    let transcript =
        std::fs::read_to_string(mount.path().join("huge/transcript.md")).expect("read");
    assert!(transcript.contains("question 12000"));
    drop(mount);
}
