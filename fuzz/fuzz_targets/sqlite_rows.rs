//! The SQLite backend's row decoding (spec §11.2, §11.3, §11.7): `sessions`
//! row → header, `events` rows → events (scalar rows of schema 14 and 17,
//! packed chunk rows, zstd `data` BLOBs, varint `source_event_seqs`), then the
//! torn-tail rule, all read through `SqliteStore` from a real database.
//!
//! The input is JSONL. Line 1: `{"schema":14|17,"session":{column: cell}}`;
//! every later line one `events` row `{"seq":…,"type":…,"time":…,"data":…,
//! "seqs":…,"op":…,"ignorable":…}`. A cell is NULL, an INTEGER, a REAL or TEXT
//! as its JSON spelling says; `{"zstd":X}` is a zstd BLOB of X (a string as
//! is, anything else as JSON text), `{"seqs":[…]}` a varint seq BLOB,
//! `{"hex":"…"}` raw BLOB bytes; any other array or object is its JSON text.
//! Rows the STRICT tables refuse are skipped. Each process keeps one database
//! per schema in its scratch directory and rewrites it for each input.
//!
//! Checks: as `jsonl_scan` (no panic, fetch agrees with scan, resumed scans
//! continue, readable sessions render, repairs leave a clean log).
#![no_main]

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, params};
use serde_json::Value;
use sessionfs::store::sqlite::{SqliteStore, encode_source_seqs};
use sessionfs::store::{Catalog, SessionKey};
use sessionfs_fuzz::{check_scans, check_view, scratch};

// The Harness's table definitions (spec §11.2, §11.7).
const EVENTS_17: &str = "CREATE TABLE events ( session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, seq INTEGER NOT NULL, type TEXT NOT NULL, time INTEGER NOT NULL, data ANY NOT NULL, source_event_seqs ANY, surface_op TEXT, ignorable INTEGER CHECK (ignorable IS NULL OR ignorable IN (0, 1)), PRIMARY KEY (session_id, seq) ) STRICT";
const EVENTS_14: &str = "CREATE TABLE events ( session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, seq INTEGER NOT NULL, type TEXT NOT NULL, time INTEGER NOT NULL, data TEXT NOT NULL, source_event_seqs TEXT, surface_op TEXT, PRIMARY KEY (session_id, seq) ) STRICT";
const PERSISTENCE_STATE: &str = "CREATE TABLE persistence_state ( singleton INTEGER PRIMARY KEY CHECK (singleton = 1), store_id TEXT NOT NULL ) STRICT";
const SESSIONS: &str = "CREATE TABLE sessions ( id TEXT PRIMARY KEY, version INTEGER NOT NULL, created_at INTEGER NOT NULL, cwd TEXT, parent_session TEXT, seed_length INTEGER, origin TEXT, delegation_depth INTEGER, agent_preset TEXT, incarnation TEXT NOT NULL, revision INTEGER NOT NULL ) STRICT";
const SESSION_COLUMNS: [&str; 11] = [
    "id",
    "version",
    "created_at",
    "cwd",
    "parent_session",
    "seed_length",
    "origin",
    "delegation_depth",
    "agent_preset",
    "incarnation",
    "revision",
];

struct Db {
    path: PathBuf,
    writer: Connection,
}

fn database(schema: u32) -> &'static Mutex<Db> {
    static DBS: OnceLock<[Mutex<Db>; 2]> = OnceLock::new();
    let dbs = DBS.get_or_init(|| {
        [14, 17].map(|schema| {
            let path = scratch("sqlite_rows").join(format!("sessions-{schema}.db"));
            let _ = std::fs::remove_file(&path);
            let writer = Connection::open(&path).expect("cannot create the fuzz database");
            let events = if schema == 17 { EVENTS_17 } else { EVENTS_14 };
            writer
                .execute_batch(&format!(
                    "PRAGMA application_id = {}; PRAGMA user_version = {schema}; {SESSIONS}; {events}; {PERSISTENCE_STATE};
                     INSERT INTO persistence_state VALUES (1, 'fuzz'); PRAGMA synchronous = OFF;",
                    0x4453_4850
                ))
                .expect("cannot create the fuzz database");
            Mutex::new(Db { path, writer })
        })
    });
    &dbs[usize::from(schema == 17)]
}

fn cell(value: Option<&Value>) -> SqlValue {
    match value {
        None | Some(Value::Null) => SqlValue::Null,
        Some(Value::Bool(b)) => SqlValue::Integer(i64::from(*b)),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(i) => SqlValue::Integer(i),
            None => SqlValue::Real(n.as_f64().unwrap_or(f64::NAN)),
        },
        Some(Value::String(s)) => SqlValue::Text(s.clone()),
        Some(Value::Object(map)) if map.len() == 1 && map.contains_key("zstd") => {
            let plain = match &map["zstd"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            SqlValue::Blob(zstd_blob(plain.as_bytes()))
        }
        Some(Value::Object(map))
            if map.len() == 1 && map.get("seqs").is_some_and(Value::is_array) =>
        {
            let seqs: Vec<u64> = map["seqs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap_or(u64::MAX))
                .collect();
            SqlValue::Blob(encode_source_seqs(&seqs))
        }
        Some(Value::Object(map))
            if map.len() == 1 && map.get("hex").is_some_and(Value::is_string) =>
        {
            let hex = map["hex"].as_str().unwrap().as_bytes();
            let bytes = hex
                .chunks(2)
                .filter_map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
                .collect();
            SqlValue::Blob(bytes)
        }
        Some(other) => SqlValue::Text(other.to_string()),
    }
}

/// A zstd frame as the Harness writes `data` BLOBs: level 3, content size, no checksum.
fn zstd_blob(plain: &[u8]) -> Vec<u8> {
    let mut compressor = zstd::bulk::Compressor::new(3).expect("zstd");
    compressor.include_checksum(false).expect("zstd");
    compressor.include_contentsize(true).expect("zstd");
    compressor.compress(plain).expect("zstd compresses")
}

fuzz_target!(|data: &[u8]| {
    let mut lines = data.split(|b| *b == b'\n').filter_map(|line| {
        match serde_json::from_slice::<Value>(line) {
            Ok(Value::Object(map)) => Some(map),
            _ => None,
        }
    });
    let Some(first) = lines.next() else { return };
    let schema = if first.get("schema").and_then(Value::as_u64) == Some(14) {
        14
    } else {
        17
    };
    let session = first
        .get("session")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let id = session
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or("s")
        .to_string();
    let db = database(schema).lock().unwrap_or_else(|p| p.into_inner());
    let write = || -> rusqlite::Result<()> {
        db.writer
            .execute_batch("BEGIN; DELETE FROM events; DELETE FROM sessions;")?;
        let cells: Vec<SqlValue> = SESSION_COLUMNS
            .iter()
            .map(|c| cell(session.get(*c)))
            .collect();
        let _ = db.writer.execute(
            "INSERT INTO sessions VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            rusqlite::params_from_iter(cells),
        );
        for row in lines.take(2048) {
            let get = |k: &str| cell(row.get(k));
            let _ = if schema == 17 {
                db.writer.execute(
                    "INSERT INTO events VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    params![
                        id,
                        get("seq"),
                        get("type"),
                        get("time"),
                        get("data"),
                        get("seqs"),
                        get("op"),
                        get("ignorable")
                    ],
                )
            } else {
                db.writer.execute(
                    "INSERT INTO events VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    params![
                        id,
                        get("seq"),
                        get("type"),
                        get("time"),
                        get("data"),
                        get("seqs"),
                        get("op")
                    ],
                )
            };
        }
        db.writer.execute_batch("COMMIT;")
    };
    if write().is_err() {
        let _ = db.writer.execute_batch("ROLLBACK;");
        return;
    }
    let store = SqliteStore::open(&db.path).expect("the fuzz database does not open");
    let key = SessionKey::Row(id);
    check_scans(&store, &key);
    if let Some(listing) = store.list().into_iter().find(|l| l.key == key) {
        let store: std::sync::Arc<dyn sessionfs::store::Backend> = std::sync::Arc::new(store);
        check_view(&store, &listing, true);
    }
});
