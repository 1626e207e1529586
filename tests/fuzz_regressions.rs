//! Regression tests from fuzzing the parsers (issue #8; the targets live in
//! `fuzz/`), and the hostile inputs the issue names: a single record of
//! hundreds of MiB, a zstd frame that claims (or decodes to) a huge size, a
//! deeply nested JSON value, and SQLite rows over the Harness's packed-row
//! limits. Each must be refused with a reason, without a panic, with memory
//! bounded by the documented limits.
//!
//! Inputs kept under `fuzz/regressions/<target>/` are replayed through their
//! fuzz target's own checks: `fuzz/src/lib.rs` is included below as a module.
//! F1 and F2 below were found this way and fixed.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use sessionfs::json::JsonMap;
use sessionfs::model::Refusal;
use sessionfs::store::jsonl::{JsonlStore, MAX_RECORD_BYTES};
use sessionfs::store::sqlite::SqliteStore;
use sessionfs::store::zstd_frames::{
    FRAME_MAGIC, FrameScan, MAX_FRAME_PLAINTEXT, decode_frame, decode_torn_frame, encode_frame,
    scan_frame,
};
use sessionfs::store::{Backend, Catalog, EventLoc, ScanEnd, ScanPoint, SessionKey, Source};
use sessionfs::view::SessionView;

#[allow(
    dead_code,
    reason = "`scratch` is the fuzzers' per-process directory; the replay uses TempDir"
)]
#[path = "../fuzz/src/lib.rs"]
mod fuzz_checks;

mod common;

use common::TempDir;

/// Tests that need hundreds of MiB take turns, so the suite's peak stays near one of them.
static BIG: Mutex<()> = Mutex::new(());

fn big_memory_turn() -> std::sync::MutexGuard<'static, ()> {
    BIG.lock().unwrap_or_else(|p| p.into_inner())
}

const HEADER: &str = r#"{"type":"session","version":0,"id":"s","createdAt":1,"delegationDepth":0}"#;

/// A JSONL store holding one session `s` (no cwd), whose file is made by `fill`.
fn jsonl_store(
    label: &str,
    zstd: bool,
    fill: impl FnOnce(&mut File),
) -> (TempDir, JsonlStore, SessionKey) {
    let dir = TempDir::new(label);
    let session = dir.path().join("_no-cwd").join("s");
    std::fs::create_dir_all(&session).expect("session dir");
    let path = session.join(if zstd {
        "session.jsonl.zstd"
    } else {
        "session.jsonl"
    });
    let mut file = File::create(&path).expect("session file");
    fill(&mut file);
    drop(file);
    let store = JsonlStore::open(dir.path()).expect("store opens");
    let key = SessionKey::File(path.canonicalize().expect("canonical path"));
    (dir, store, key)
}

/// A whole scan, through the fuzz targets' scan (chunks read quickly are fetched).
fn scan(
    store: &dyn Backend,
    key: &SessionKey,
) -> (Result<(ScanPoint, ScanEnd), Refusal>, Vec<JsonMap>) {
    let (result, events) = fuzz_checks::scan_from(store, key, &ScanPoint::default());
    (result, events.into_iter().map(|(_, event)| event).collect())
}

fn refusal_of(result: Result<(ScanPoint, ScanEnd), Refusal>) -> String {
    match result {
        Err(refusal) => {
            assert!(!refusal.message().is_empty(), "a refusal without a reason");
            refusal.message().to_string()
        }
        Ok(end) => panic!("expected a refusal, got {end:?}"),
    }
}

/// The process's peak resident set, in KiB (`VmHWM`), where Linux reports it.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

// ---------------------------------------------------------------------------
// A single record of hundreds of MiB.

#[test]
fn a_record_of_hundreds_of_mib_is_refused_with_memory_bounded() {
    let _turn = big_memory_turn();
    // A valid header, then one record of 300 MiB that is never written to
    // memory: the file is sparse.
    let huge = 300u64 << 20;
    let (_dir, store, key) = jsonl_store("huge-record", false, |file| {
        writeln!(file, "{HEADER}").unwrap();
        file.write_all(br#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1,"pad":""#)
            .unwrap();
        file.set_len(huge).unwrap();
    });
    let before = peak_rss_kib();
    let (result, events) = scan(&store, &key);
    let message = refusal_of(result);
    assert!(
        message.contains(&format!("longer than {MAX_RECORD_BYTES} bytes")),
        "{message}"
    );
    assert!(
        message.contains("record at byte"),
        "the refusal names where: {message}"
    );
    assert!(events.is_empty());
    // The scanner holds at most one record of MAX_RECORD_BYTES (and its Vec's
    // spare capacity), never the whole file.
    if let (Some(before), Some(after)) = (before, peak_rss_kib()) {
        let grown_mib = after.saturating_sub(before) / 1024;
        assert!(
            grown_mib < 2 * (MAX_RECORD_BYTES as u64 >> 20) + 64,
            "peak RSS grew by {grown_mib} MiB"
        );
    }
}

#[test]
fn a_header_line_of_hundreds_of_mib_is_refused_after_reading_one_mib() {
    let (_dir, store, key) = jsonl_store("huge-header", false, |file| {
        file.write_all(br#"{"type":"session","version":0,"id":"s","pad":""#)
            .unwrap();
        file.set_len(400 << 20).unwrap();
    });
    let listing = store
        .list()
        .into_iter()
        .find(|l| l.key == key)
        .expect("listed");
    let why = listing.header.expect_err("a 400 MiB header is refused");
    assert!(why.contains("longer than a header line"), "{why}");
    assert!(store.header(&key).is_err());
    let message = refusal_of(scan(&store, &key).0);
    assert!(message.contains("header"), "{message}");
}

// ---------------------------------------------------------------------------
// zstd frames that claim, or decode to, a huge size.

/// A frame whose header claims `content_size` bytes (8-byte field, single
/// segment, checksum flag on) and holds one raw block of `payload`.
fn frame_claiming(content_size: u64, payload: &[u8]) -> Vec<u8> {
    let mut frame = FRAME_MAGIC.to_le_bytes().to_vec();
    frame.push(0xE4); // FCS 8 bytes, single segment, content checksum.
    frame.extend(content_size.to_le_bytes());
    let block = 1 | ((payload.len() as u32) << 3); // last, raw
    frame.extend(&block.to_le_bytes()[..3]);
    frame.extend(payload);
    frame.extend([0, 0, 0, 0]); // checksum (never reached)
    frame
}

#[test]
fn a_zstd_frame_claiming_a_huge_content_size_is_refused() {
    for claim in [
        u64::MAX,
        1 << 62,
        1 << 40,
        MAX_FRAME_PLAINTEXT as u64 + 1,
        200 << 20,
    ] {
        let frame = frame_claiming(claim, b"{}\n");
        assert_eq!(
            scan_frame(&frame),
            FrameScan::Complete(frame.len()),
            "claim {claim}"
        );
        let why = decode_frame(&frame)
            .expect_err("a frame whose content contradicts its claim is refused");
        assert!(!why.is_empty());
        // A torn copy of it decodes to nothing much, and quickly.
        assert!(decode_torn_frame(&frame[..frame.len() - 5]).len() <= 3);
    }
    // Through the store: a valid header frame, then the frame with the claim.
    let (_dir, store, key) = jsonl_store("zstd-claim", true, |file| {
        file.write_all(&encode_frame(format!("{HEADER}\n").as_bytes()).unwrap())
            .unwrap();
        file.write_all(&frame_claiming(u64::MAX, b"{}\n")).unwrap();
    });
    let message = refusal_of(scan(&store, &key).0);
    assert!(
        message.contains("corrupt Zstandard session log: frame at byte"),
        "{message}"
    );
    // And as the header frame itself, the listing refuses with a reason.
    let (_dir2, store2, key2) = jsonl_store("zstd-claim-header", true, |file| {
        file.write_all(&frame_claiming(u64::MAX, format!("{HEADER}\n").as_bytes()))
            .unwrap();
    });
    let listing = store2
        .list()
        .into_iter()
        .find(|l| l.key == key2)
        .expect("listed");
    assert!(listing.header.is_err());
    assert!(refusal_of(scan(&store2, &key2).0).contains("frame at byte 0 failed validation"));
}

/// A frame (no content size, no checksum, 128 KiB window) of `blocks` RLE
/// blocks of 128 KiB each: a few KiB that decode to `blocks` × 128 KiB.
fn rle_bomb(blocks: usize) -> Vec<u8> {
    let mut frame = FRAME_MAGIC.to_le_bytes().to_vec();
    frame.push(0x00); // no FCS, not single segment, no checksum
    frame.push((17 - 10) << 3); // window 2^17
    for i in 0..blocks {
        let last = u32::from(i + 1 == blocks);
        let block = last | (1 << 1) | ((128u32 << 10) << 3); // RLE of 128 KiB
        frame.extend(&block.to_le_bytes()[..3]);
        frame.push(b'a');
    }
    frame
}

#[test]
fn a_zstd_frame_decoding_past_the_limit_is_refused_with_memory_bounded() {
    let _turn = big_memory_turn();
    let blocks = (MAX_FRAME_PLAINTEXT >> 17) + 8; // 1 MiB past the limit
    let frame = rle_bomb(blocks);
    assert!(frame.len() < 16 << 10);
    assert_eq!(scan_frame(&frame), FrameScan::Complete(frame.len()));
    let before = peak_rss_kib();
    let why = decode_frame(&frame).expect_err("a frame decoding past the limit is refused");
    assert!(
        why.contains(&format!("more than {MAX_FRAME_PLAINTEXT} bytes")),
        "{why}"
    );
    // The torn decoder stops at the limit too.
    let torn = decode_torn_frame(&frame[..frame.len() - 1]);
    assert!(torn.len() <= MAX_FRAME_PLAINTEXT);
    drop(torn);
    if let (Some(before), Some(after)) = (before, peak_rss_kib()) {
        let grown_mib = after.saturating_sub(before) / 1024;
        assert!(
            grown_mib < 2 * (MAX_FRAME_PLAINTEXT as u64 >> 20) + 64,
            "peak RSS grew by {grown_mib} MiB"
        );
    }
}

// ---------------------------------------------------------------------------
// Deeply nested JSON.

#[test]
fn deeply_nested_json_is_refused_not_a_stack_overflow() {
    let deep_array = "[".repeat(100_000);
    let deep_object = r#"{"a":"#.repeat(100_000);
    for deep in [&deep_array, &deep_object] {
        // A nested committed record followed by a turn/end: corruption, refused.
        let (_dir, store, key) = jsonl_store("deep", false, |file| {
            writeln!(file, "{HEADER}").unwrap();
            writeln!(file, "{deep}").unwrap();
            writeln!(file, r#"{{"type":"turn/end","seq":0,"time":1,"data":{{"turn":1,"reason":{{"kind":"completed"}}}}}}"#)
                .unwrap();
        });
        let message = refusal_of(scan(&store, &key).0);
        assert!(
            message.contains("unparsable committed event at line 1"),
            "{message}"
        );
        // As the last record it is a torn tail: dropped, not a crash.
        let (_dir, store, key) = jsonl_store("deep-tail", false, |file| {
            writeln!(file, "{HEADER}").unwrap();
            writeln!(file, "{deep}").unwrap();
        });
        let (result, events) = scan(&store, &key);
        assert!(
            matches!(result, Ok((_, ScanEnd::Torn { .. }))),
            "{result:?}"
        );
        assert!(events.is_empty());
        // As the header line: not a header, with a reason.
        let (_dir, store, key) = jsonl_store("deep-header", false, |file| {
            writeln!(file, "{deep}").unwrap();
        });
        let listing = store
            .list()
            .into_iter()
            .find(|l| l.key == key)
            .expect("listed");
        assert!(listing.header.expect_err("refused").contains("not JSON"));
        // Inside a zstd frame, where any defect is corruption.
        let (_dir, store, key) = jsonl_store("deep-zstd", true, |file| {
            file.write_all(&encode_frame(format!("{HEADER}\n").as_bytes()).unwrap())
                .unwrap();
            file.write_all(&encode_frame(format!("{deep}\n").as_bytes()).unwrap())
                .unwrap();
        });
        let message = refusal_of(scan(&store, &key).0);
        assert!(
            message.contains("corrupt Zstandard session log"),
            "{message}"
        );
    }
}

// ---------------------------------------------------------------------------
// SQLite rows over the Harness's packed-row limits.

/// A copy of the schema-17 fixture database emptied, holding one session `s`
/// with `rows` (seq, type, time, data, ignorable).
fn sqlite17_store(
    label: &str,
    rows: &[(i64, &str, i64, rusqlite::types::Value, Option<i64>)],
) -> (TempDir, SqliteStore) {
    let dir = TempDir::new(label);
    let path = dir.path().join("sessions.db");
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/stores/sqlite17/sessions.db");
    std::fs::copy(fixture, &path).expect("copy fixture");
    let db = rusqlite::Connection::open(&path).expect("open copy");
    db.execute_batch("DELETE FROM events; DELETE FROM sessions;")
        .unwrap();
    db.execute(
        "INSERT INTO sessions (id, version, created_at, incarnation, revision) VALUES ('s', 0, 1, '0b6f4c9e-3f3a-4c55-9d1e-2b7e6a1c9f00', 1)",
        [],
    )
    .unwrap();
    for (seq, event_type, time, data, ignorable) in rows {
        db.execute(
            "INSERT INTO events (session_id, seq, type, time, data, ignorable) VALUES ('s', ?1, ?2, ?3, ?4, ?5)",
            rusqlite::params![seq, event_type, time, data, ignorable],
        )
        .unwrap();
    }
    drop(db);
    let store = SqliteStore::open(&path).expect("store opens");
    (dir, store)
}

fn text_row(members: usize, member: &str) -> String {
    let texts = serde_json::to_string(&vec![member; members]).unwrap();
    let dt = serde_json::to_string(&vec![1; members - 1]).unwrap();
    format!(r#"{{"turn":1,"step":1,"index":0,"dt":{dt},"texts":{texts}}}"#)
}

#[test]
fn sqlite_rows_over_the_packed_row_limits_are_refused() {
    use rusqlite::types::Value as Sql;
    let turn_start = (0, "turn/start", 1, Sql::Text(r#"{"turn":1}"#.into()), None);
    let big_member = "x".repeat(400 << 10);
    let compressed_huge =
        zstd::bulk::compress(text_row(3, &"y".repeat(1 << 20)).as_bytes(), 3).unwrap();
    let over_limits = [
        ("1025 members", Sql::Text(text_row(1025, "a")), 1025),
        ("2 members", Sql::Text(text_row(2, "a")), 2),
        ("data over 1 MiB", Sql::Text(text_row(3, &big_member)), 3),
        (
            "data decompressing past 1 MiB",
            Sql::Blob(compressed_huge),
            3,
        ),
        ("data nested 100000 deep", Sql::Text("[".repeat(100_000)), 3),
    ];
    for (what, data, members) in over_limits {
        let packed = (1, "text-chunks", 2, data, Some(0));
        // Followed by a turn/end, the bad row is committed: the log is refused.
        let end = r#"{"turn":1,"reason":{"kind":"completed"}}"#;
        let turn_end = (
            1 + members as i64,
            "turn/end",
            3,
            Sql::Text(end.into()),
            None,
        );
        let (_dir, store) = sqlite17_store(
            "packed-limit",
            &[turn_start.clone(), packed.clone(), turn_end],
        );
        let key = SessionKey::Row("s".into());
        let message = refusal_of(scan(&store, &key).0);
        assert_eq!(
            message, "corrupt session log: invalid committed physical row at seq 1",
            "{what}"
        );
        assert!(
            store
                .fetch(
                    &key,
                    EventLoc {
                        record: 1,
                        within: 0,
                        member: 0
                    }
                )
                .is_err(),
            "{what}"
        );
        // As the last row it is a torn tail: the prefix is kept, nothing panics.
        let (_dir, store) = sqlite17_store("packed-limit-tail", &[turn_start.clone(), packed]);
        let (result, events) = scan(&store, &key);
        assert_eq!(
            result.map(|(_, end)| end),
            Ok(ScanEnd::Torn { at: "seq 1".into() }),
            "{what}"
        );
        assert_eq!(events.len(), 1, "{what}");
    }
    // At the limits exactly (3 and 1024 members) rows expand.
    for members in [3, 1024] {
        let packed = (
            1,
            "text-chunks",
            2,
            Sql::Text(text_row(members, "a")),
            Some(0),
        );
        let (_dir, store) = sqlite17_store("packed-ok", &[turn_start.clone(), packed]);
        let (result, events) = scan(&store, &SessionKey::Row("s".into()));
        assert_eq!(result.map(|(_, end)| end), Ok(ScanEnd::Complete));
        assert_eq!(events.len(), 1 + members);
    }
}

// ---------------------------------------------------------------------------
// Inputs the fuzz targets found, replayed through the same code path.

fn regressions(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    files
}

/// The `jsonl_scan` target, on one input: the input as `session.jsonl` at the
/// path its header names, scanned, fetched back, loaded and rendered, and
/// repaired, with every check the target makes. Returns the view before and
/// after the repair (if one was written).
fn replay_jsonl(label: &str, bytes: &[u8]) -> (SessionView, Option<SessionView>) {
    let dir = TempDir::new(label);
    let root = dir.path().join("store");
    let first_line = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
    let path = fuzz_checks::write_session(
        &root,
        fuzz_checks::header_of(first_line).as_ref(),
        false,
        bytes,
    );
    let checked = fuzz_checks::check_jsonl_session(&root, &path).expect("the input is listed");
    (checked.view, checked.repaired)
}

#[test]
fn jsonl_scan_regressions_replay_without_panics() {
    let files = regressions("jsonl_scan");
    assert!(
        !files.is_empty(),
        "fuzz/regressions/jsonl_scan holds the found inputs"
    );
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        let _ = replay_jsonl("replay", &bytes);
    }
}

/// F1 (found by `jsonl_scan`, also reachable from `session_fold`): a session
/// whose open turn's `turn/start` has no safe integer `turn` ≥ 1 is readable,
/// and its in-memory closers end with `turn/end {"turn": null, …}`.
#[test]
fn f1_an_open_turn_without_a_turn_number_is_readable_before_repair() {
    let file = regressions("jsonl_scan")
        .into_iter()
        .find(|f| f.ends_with("f1-turn-start-without-turn.jsonl"));
    let (view, _) = replay_jsonl("f1", &std::fs::read(file.expect("kept input")).unwrap());
    let indexed = view.indexed().expect("readable before the repair");
    let closers = indexed.closers();
    assert_eq!(closers.last().unwrap()["type"], "turn/end");
    assert_eq!(
        closers.last().unwrap()["data"]["turn"],
        serde_json::Value::Null
    );
}

/// F1 (found by fuzzing, fixed): closers copy the stored turn's fields unchecked
/// (a `turn/start` without a number, a tool call with an empty id), so writing
/// them, as the Harness's own `load` would, stored a log this reader refuses.
/// A repair is now written only when its closers fold cleanly.
#[test]
fn f1_a_repair_never_makes_a_readable_session_unreadable() {
    let f1: Vec<PathBuf> = regressions("jsonl_scan")
        .into_iter()
        .filter(|f| {
            f.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("f1-"))
        })
        .collect();
    assert_eq!(f1.len(), 2);
    for file in f1 {
        let (view, repaired) = replay_jsonl("f1-repair", &std::fs::read(&file).unwrap());
        assert!(
            view.indexed().is_some(),
            "{file:?} is readable before the repair"
        );
        // Closers that would not read back are not written: the session stays
        // readable, its last turn open.
        if let Some(repaired) = repaired {
            assert!(
                repaired.indexed().is_some(),
                "{file:?} after its repair: {}",
                String::from_utf8_lossy(&repaired.error_text().unwrap_or_default())
            );
        }
    }
}

// ---------------------------------------------------------------------------
// F2: a torn frame of empty blocks (review of the zstd frame reader, with the
// fuzz targets' inputs as the starting point).

/// A zstd session whose second frame has a header and then `zeros` zero
/// bytes, which the structural scan reads as empty raw blocks: a torn frame as
/// long as the file (a crash that leaves a zero-filled extent inside a frame
/// looks like this). The file is sparse.
fn zero_filled_frame_store(label: &str, zeros: u64) -> (TempDir, JsonlStore, SessionKey) {
    jsonl_store(label, true, |file| {
        file.write_all(&encode_frame(format!("{HEADER}\n").as_bytes()).unwrap())
            .unwrap();
        let mut frame = FRAME_MAGIC.to_le_bytes().to_vec();
        frame.extend([0x00, (17 - 10) << 3]); // no FCS, no checksum, 128 KiB window
        file.write_all(&frame).unwrap();
        let len = file.metadata().unwrap().len();
        file.set_len(len + zeros).unwrap();
    })
}

#[test]
fn a_zero_filled_torn_frame_is_a_torn_tail() {
    let (_dir, store, key) = zero_filled_frame_store("zero-frame", 1 << 20);
    let (result, events) = scan(&store, &key);
    assert!(
        matches!(&result, Ok((_, ScanEnd::Torn { at })) if at.contains("incomplete final frame")),
        "{result:?}"
    );
    assert!(events.is_empty());
}

/// F2 (found reviewing the frame reader, fixed): a torn frame of many empty
/// blocks was rescanned from its start after every 256 KiB read and held whole,
/// so 256 MiB of zeros took minutes. Reads now grow with the frame and a frame
/// longer than `MAX_FRAME_BYTES` is refused.
#[test]
fn f2_a_huge_torn_frame_is_scanned_in_bounded_time_and_memory() {
    let _turn = big_memory_turn();
    let (_dir, store, key) = zero_filled_frame_store("zero-frame-huge", 256 << 20);
    let before = peak_rss_kib();
    let started = std::time::Instant::now();
    let (result, _) = scan(&store, &key);
    let took = started.elapsed();
    assert!(result.is_err() || matches!(result, Ok((_, ScanEnd::Torn { .. }))));
    assert!(took < Duration::from_secs(10), "scanning took {took:?}");
    if let (Some(before), Some(after)) = (before, peak_rss_kib()) {
        let grown_mib = after.saturating_sub(before) / 1024;
        assert!(
            grown_mib < 64,
            "peak RSS grew by {grown_mib} MiB for one torn frame"
        );
    }
}
