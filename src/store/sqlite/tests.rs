//! The SQLite backend against the fixtures: decoding both schemas, listing,
//! crash cases, resumed scans, and fork children written and read back.

use super::encode::pack_rows;
use super::rows::{MAX_SCALAR_DATA_BYTES, data_text};
use super::*;
use crate::model::Scanned;
use rusqlite::types::Value as SqlValue;
use std::sync::atomic::{AtomicUsize, Ordering};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn read_json(relative: &str) -> Value {
    let text = std::fs::read_to_string(fixtures().join(relative)).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A copy of a fixture database in its own temp directory, removed on drop:
/// opening a WAL database creates `-wal`/`-shm` files next to it.
struct TempDb {
    dir: PathBuf,
    path: PathBuf,
}

impl TempDb {
    fn empty() -> TempDb {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "sessionfs-sqlite-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sessions.db");
        TempDb { dir, path }
    }

    fn copy_of(store: &str) -> TempDb {
        let db = TempDb::empty();
        std::fs::copy(
            fixtures().join("stores").join(store).join("sessions.db"),
            &db.path,
        )
        .unwrap();
        db
    }

    fn open(&self) -> SqliteStore {
        SqliteStore::open(&self.path).unwrap()
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn key(id: &str) -> SessionKey {
    SessionKey::Row(id.to_string())
}

type ScanResult = (Vec<(EventLoc, JsonMap)>, ScanPoint, ScanEnd);

/// Scans, fetching the chunks that were read quickly, to compare whole events.
fn scan_from(store: &SqliteStore, id: &str, from: &ScanPoint) -> Result<ScanResult, Refusal> {
    let mut scanned = Vec::new();
    let (point, end) = store.scan(&key(id), from, &mut |loc, event| {
        scanned.push((loc, event));
        Ok(())
    })?;
    let events = scanned
        .into_iter()
        .map(|(loc, event)| match event {
            Scanned::Event(event) => Ok((loc, event)),
            Scanned::Chunk { .. } => store.fetch(&key(id), loc).map(|e| (loc, e)),
        })
        .collect::<Result<_, _>>()?;
    Ok((events, point, end))
}

fn scan_all(store: &SqliteStore, id: &str) -> Vec<JsonMap> {
    let (events, _, end) = scan_from(store, id, &ScanPoint::default()).unwrap();
    assert_eq!(end, ScanEnd::Complete, "{id}");
    events.into_iter().map(|(_, event)| event).collect()
}

/// Value equality plus key order: the compact texts must be identical.
fn assert_same_events(actual: &[JsonMap], expected: &[Value], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: event count");
    for (event, expected) in actual.iter().zip(expected) {
        assert_eq!(&Value::Object(event.clone()), expected, "{what}");
        assert_eq!(
            serde_json::to_string(event).unwrap(),
            serde_json::to_string(expected).unwrap(),
            "{what}: key order"
        );
    }
}

fn session_files() -> Vec<(String, String)> {
    let manifest = read_json("expected/manifest.json");
    manifest["sessionFiles"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(id, file)| (id.clone(), file.as_str().unwrap().to_string()))
        .collect()
}

fn expected_events(file: &str) -> Vec<Value> {
    read_json(&format!("expected/{file}"))["events"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn clean_schema_17_sessions_decode_to_the_expected_logs() {
    let db = TempDb::copy_of("sqlite17");
    let store = db.open();
    assert_eq!(
        store.describe(),
        format!("sqlite schema 17 database {}", db.path.display())
    );
    for (id, file) in session_files() {
        assert_same_events(&scan_all(&store, &id), &expected_events(&file), &id);
    }
}

#[test]
fn clean_schema_14_sessions_decode_to_the_expected_logs() {
    let db = TempDb::copy_of("sqlite14");
    let store = db.open();
    for (id, file) in session_files() {
        let mut expected = expected_events(&file);
        if id == "metrics-ignorable" {
            // Schema 14 dropped the marker and the resume failed: only seqs 0–21 exist.
            expected.truncate(22);
            for event in &mut expected {
                event.as_object_mut().unwrap().shift_remove("ignorable");
            }
        }
        assert_same_events(&scan_all(&store, &id), &expected, &id);
    }
}

#[test]
fn listed_headers_match_the_harness_list() {
    for format in ["sqlite14", "sqlite17"] {
        let db = TempDb::copy_of(format);
        let store = db.open();
        let listings = store.list();
        let expected = read_json(&format!("expected/formats/{format}.json"))["listedHeaders"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(listings.len(), expected.len(), "{format}");
        for want in expected {
            let id = want["id"].as_str().unwrap();
            let listing = listings.iter().find(|l| l.id == id).unwrap();
            assert_eq!(listing.key, key(id));
            let header = listing.header.as_ref().unwrap();
            // The SQLite header: NULL columns, delegationDepth included, are absent.
            let mut got = header.to_json();
            if header.delegation_depth.is_none() {
                got.shift_remove("delegationDepth");
            }
            assert_eq!(
                serde_json::to_string(&got).unwrap(),
                serde_json::to_string(&want).unwrap(),
                "{format}"
            );
            assert_eq!(&store.header(&key(id)).unwrap(), header);
        }
    }
}

#[test]
fn crash_cases_keep_the_stored_prefix_or_refuse() {
    for format in ["sqlite14", "sqlite17"] {
        let db = TempDb::copy_of(&format!("crash/{format}"));
        let store = db.open();
        let dir = fixtures().join("expected/crash").join(format);
        let entries: Vec<_> = std::fs::read_dir(dir).unwrap().collect();
        assert_eq!(
            entries.len(),
            8,
            "{format}: crash cases a, b, b2, f, g, h, s1, s2"
        );
        for entry in entries {
            let case: Value =
                serde_json::from_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap())
                    .unwrap();
            let id = case["case"]["id"].as_str().unwrap();
            let stored = &case["loadStored"];
            let what = format!("{format} {id}");
            match scan_from(&store, id, &ScanPoint::default()) {
                Err(refusal) => assert_eq!(
                    refusal,
                    Refusal::Corrupt(stored["error"]["message"].as_str().unwrap().into()),
                    "{what}"
                ),
                Ok((events, point, end)) => {
                    let count = stored["eventCount"].as_u64().unwrap();
                    assert_eq!(events.len() as u64, count, "{what}");
                    assert_eq!(point.events, count, "{what}");
                    match stored["tornMarker"].as_u64() {
                        None => {
                            assert_eq!((end, point.offset), (ScanEnd::Complete, count), "{what}")
                        }
                        Some(marker) => {
                            assert_eq!(
                                end,
                                ScanEnd::Torn {
                                    at: format!("seq {marker}")
                                },
                                "{what}"
                            );
                            assert_eq!(
                                point.offset, marker,
                                "{what}: the next scan re-reads the torn row"
                            );
                            let (again, _, end) = scan_from(&store, id, &point).unwrap();
                            assert!(
                                again.is_empty()
                                    && end
                                        == ScanEnd::Torn {
                                            at: format!("seq {marker}")
                                        },
                                "{what}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn scans_resume_at_a_row_boundary_and_fetch_reads_one_event() {
    let db = TempDb::copy_of("sqlite17");
    let store = db.open();
    let id = "orbit-debug-tools";
    let (all, end_point, _) = scan_from(&store, id, &ScanPoint::default()).unwrap();
    assert_eq!(
        (end_point.events, end_point.offset),
        (all.len() as u64, all.len() as u64)
    );
    let (nothing, same, end) = scan_from(&store, id, &end_point).unwrap();
    assert!(nothing.is_empty() && same == end_point && end == ScanEnd::Complete);

    let packed = all
        .iter()
        .find(|(loc, _)| loc.member == 2 && loc.record > 100)
        .unwrap()
        .0;
    let boundary = packed.record;
    let (rest, point, _) = scan_from(
        &store,
        id,
        &ScanPoint {
            events: boundary,
            offset: boundary,
            ..ScanPoint::default()
        },
    )
    .unwrap();
    assert_eq!(point, end_point);
    assert_eq!(rest, all[boundary as usize..]);

    for (loc, event) in &all {
        assert_eq!(&store.fetch(&key(id), *loc).unwrap(), event, "{loc:?}");
    }
    assert!(
        store
            .fetch(
                &key(id),
                EventLoc {
                    record: packed.record,
                    within: 0,
                    member: 5000
                }
            )
            .is_err()
    );
    assert!(
        store
            .fetch(
                &key(id),
                EventLoc {
                    record: 1 << 40,
                    within: 0,
                    member: 0
                }
            )
            .is_err()
    );
}

#[test]
fn revision_and_missing_sessions() {
    let db = TempDb::copy_of("sqlite17");
    let store = db.open();
    assert_eq!(
        store.revision(&key("ledger-chat")).unwrap(),
        Revision("18036197-390d-4076-b22e-730784217679:61".into())
    );
    assert!(store.contains("ledger-chat"));
    assert!(!store.contains("no-such-session"));
    let gone = store
        .scan(
            &key("no-such-session"),
            &ScanPoint::default(),
            &mut |_, _| Ok(()),
        )
        .unwrap_err();
    assert!(gone.message().contains("no longer exists"), "{gone}");
    assert!(store.header(&key("no-such-session")).is_err());
    assert!(store.revision(&key("no-such-session")).is_err());
}

#[test]
fn open_refuses_foreign_and_other_version_databases() {
    let foreign = TempDb::empty();
    Connection::open(&foreign.path)
        .unwrap()
        .execute_batch("CREATE TABLE t (x)")
        .unwrap();
    let message = SqliteStore::open(&foreign.path).err().unwrap();
    assert!(
        message.contains("is not a DeepSeek Harness session database (application_id 0"),
        "{message}"
    );

    let newer = TempDb::copy_of("sqlite17");
    Connection::open(&newer.path)
        .unwrap()
        .execute_batch("PRAGMA user_version = 18")
        .unwrap();
    let message = SqliteStore::open(&newer.path).err().unwrap();
    assert!(
        message.ends_with("has schema version 18; sessionfs reads 14 and 17"),
        "{message}"
    );

    let extra = TempDb::copy_of("sqlite14");
    Connection::open(&extra.path)
        .unwrap()
        .execute_batch("CREATE INDEX by_type ON events (type)")
        .unwrap();
    let message = SqliteStore::open(&extra.path).err().unwrap();
    assert!(
        message.contains(
            "does not have the schema-14 tables: expected table events, found index by_type"
        ),
        "{message}"
    );

    let not_sqlite = TempDb::empty();
    std::fs::write(
        &not_sqlite.path,
        "this is not a database, just some text that is long enough",
    )
    .unwrap();
    assert!(SqliteStore::open(&not_sqlite.path).is_err());
    assert!(SqliteStore::open(&not_sqlite.dir.join("missing.db")).is_err());
}

fn child_header(id: &str) -> SessionHeader {
    SessionHeader {
        cwd: Some("/workspace/orbit".into()),
        parent_session: Some("orbit-debug-tools".into()),
        seed_length: Some(3),
        ..SessionHeader::new(id, 1_780_000_000_000)
    }
}

#[test]
fn create_writes_a_child_that_reads_back_exactly() {
    let sources = [
        ("sqlite17", "orbit-debug-tools"),
        ("sqlite17", "metrics-ignorable"),
        ("sqlite14", "pipeline-compaction"),
    ];
    for (format, source) in sources {
        let db = TempDb::copy_of(format);
        let store = db.open();
        let events = scan_all(&store, source);
        let child = format!("session-child-of-{source}");
        let header = child_header(&child);
        assert_eq!(store.create(&header, &events).unwrap(), key(&child));
        assert_eq!(
            store.create(&header, &events).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );

        let reopened = db.open();
        assert_eq!(reopened.header(&key(&child)).unwrap(), header);
        assert!(reopened.revision(&key(&child)).unwrap().0.ends_with(":1"));
        let expected: Vec<Value> = events.iter().cloned().map(Value::Object).collect();
        assert_same_events(&scan_all(&reopened, &child), &expected, &child);
        assert!(reopened.contains(&child));
        assert_physical_layout(&db, &child, events.len());
    }
}

/// Schema 17: packed rows carry a chunk tag and no seq list; BLOBs are zstd
/// frames with a content size and no checksum. Schema 14: one TEXT row per event.
fn assert_physical_layout(db: &TempDb, id: &str, event_count: usize) {
    let connection =
        Connection::open_with_flags(&db.path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let version: i64 = connection
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    let count = |sql: &str| {
        connection
            .query_row(sql, [id], |row| row.get::<_, i64>(0))
            .unwrap() as usize
    };
    let rows = count("SELECT count(*) FROM events WHERE session_id = ?1");
    if version == 14 {
        assert_eq!(rows, event_count);
        assert_eq!(
            count("SELECT count(*) FROM events WHERE session_id = ?1 AND typeof(data) != 'text'"),
            0
        );
        return;
    }
    let packed = "FROM events WHERE session_id = ?1 AND ignorable = 0";
    assert!(rows < event_count && count(&format!("SELECT count(*) {packed}")) > 0);
    let malformed =
        "AND (type NOT LIKE '%-chunks' OR source_event_seqs IS NOT NULL OR surface_op IS NOT NULL)";
    assert_eq!(count(&format!("SELECT count(*) {packed} {malformed}")), 0);
    let mut blobs = connection
        .prepare("SELECT data FROM events WHERE session_id = ?1 AND typeof(data) = 'blob'")
        .unwrap();
    let blobs: Vec<Vec<u8>> = blobs
        .query_map([id], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    // orbit-debug-tools has 13 KB values; every compressed value has a 2-byte content size.
    assert_eq!(blobs.is_empty(), id != "session-child-of-orbit-debug-tools");
    for blob in blobs {
        assert_eq!((&blob[..4], blob[4]), (&[0x28, 0xB5, 0x2F, 0xFD][..], 0x60));
    }
}

#[test]
fn schema_14_refuses_ignorable_events_and_nothing_is_written() {
    let source = TempDb::copy_of("sqlite17");
    let events = scan_all(&source.open(), "metrics-ignorable");
    let db = TempDb::copy_of("sqlite14");
    let store = db.open();
    let error = store.create(&child_header("child"), &events).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    assert!(!store.contains("child"));
}

#[test]
fn compressed_data_is_byte_identical_to_the_harness() {
    let db = TempDb::copy_of("sqlite17");
    let connection =
        Connection::open_with_flags(&db.path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let mut select = connection
        .prepare("SELECT data FROM events WHERE typeof(data) = 'blob'")
        .unwrap();
    let blobs: Vec<Vec<u8>> = select
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(blobs.len(), 7);
    // One encoder for every row: its reused compressor must not carry state over.
    let mut encoder = RowEncoder::new(Schema::V17).unwrap();
    for blob in blobs {
        let text = data_text(&Cell::Blob(blob.clone()), MAX_SCALAR_DATA_BYTES)
            .unwrap()
            .into_owned();
        assert_eq!(encoder.data_column(text).unwrap(), SqlValue::Blob(blob));
    }
    assert_eq!(
        encoder.data_column("x".repeat(4095)).unwrap(),
        SqlValue::Text("x".repeat(4095))
    );
}

fn text_delta(seq: u64, text: &str) -> JsonMap {
    let chunk = serde_json::json!({"type": "text-delta", "index": 0, "text": text});
    let event = serde_json::json!({
        "type": "assistant/chunk",
        "seq": seq,
        "time": 1000 + seq,
        "data": {"turn": 1, "step": 1, "chunk": chunk},
    });
    event.as_object().unwrap().clone()
}

#[test]
fn oversized_runs_are_cut_into_rows_that_fit() {
    let big = "y".repeat(300_000);
    let events: Vec<JsonMap> = (0..7).map(|seq| text_delta(seq, &big)).collect();
    let rows = pack_rows(&events);
    let shape: Vec<Option<usize>> = rows
        .iter()
        .map(|r| {
            r.get("seq0")
                .map(|_| r["data"]["texts"].as_array().unwrap().len())
        })
        .collect();
    assert_eq!(shape, [Some(3), Some(3), None]);
    let huge = "z".repeat(400_000);
    let events: Vec<JsonMap> = (0..4).map(|seq| text_delta(seq, &huge)).collect();
    assert!(
        pack_rows(&events)
            .iter()
            .all(|row| !row.contains_key("seq0"))
    );

    let db = TempDb::copy_of("sqlite17");
    let store = db.open();
    let small: Vec<JsonMap> = (0..5).map(|seq| text_delta(seq, "hi")).collect();
    let mut all: Vec<JsonMap> = (0..7).map(|seq| text_delta(seq, &big)).collect();
    all.extend(small.into_iter().enumerate().map(|(k, mut e)| {
        e["seq"] = (7 + k as u64).into();
        e
    }));
    store.create(&child_header("big"), &all).unwrap();
    let expected: Vec<Value> = all.into_iter().map(Value::Object).collect();
    assert_same_events(&scan_all(&store, "big"), &expected, "big");
}

#[test]
fn an_initialised_database_is_a_store_that_takes_sessions() {
    let db = TempDb::empty();
    let connection = Connection::open(&db.path).unwrap();
    initialise(&connection, "b1f5c3de-1a2b-4c3d-8e9f-0a1b2c3d4e5f").unwrap();
    drop(connection);
    let store = db.open();
    assert!(store.list().is_empty());
    let events: Vec<JsonMap> = (0..5).map(|seq| text_delta(seq, "hi")).collect();
    store.create(&child_header("first"), &events).unwrap();
    let expected: Vec<Value> = events.into_iter().map(Value::Object).collect();
    assert_same_events(&scan_all(&db.open(), "first"), &expected, "first");
}

#[test]
fn a_new_session_row_moves_the_added_mark() {
    let db = TempDb::copy_of("sqlite17");
    let store = db.open();
    let before = store.added_mark().unwrap();
    assert!(before > 0);
    let writer = Connection::open(&db.path).unwrap();
    writer
        .execute(
            "INSERT INTO sessions SELECT 'marked', version, created_at, cwd, NULL, NULL, origin, delegation_depth, agent_preset, 'inc-marked', 1 FROM sessions WHERE id = 'ledger-chat'",
            [],
        )
        .unwrap();
    assert!(store.added_mark().unwrap() > before);
}
