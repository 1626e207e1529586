//! Schema and identity of a Harness session database (spec §11.1, §11.2,
//! §11.7): the application id, the two row layouts and their table
//! definitions, the queries on them, and the checks `open` and every write
//! transaction make.

use std::path::Path;

use rusqlite::Connection;

/// `PRAGMA application_id` of a Harness database: the ASCII bytes "DSHP".
pub const APPLICATION_ID: i64 = 0x4453_4850;

/// The user-schema table definitions as the Harness's `schema.sql` writes them
/// (spec §11.2, §11.7). They are compared with whitespace runs collapsed.
const EVENTS_17_SQL: &str = "CREATE TABLE events (
  session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  type TEXT NOT NULL,
  time INTEGER NOT NULL,
  data ANY NOT NULL,
  source_event_seqs ANY,
  surface_op TEXT,
  ignorable INTEGER CHECK (ignorable IS NULL OR ignorable IN (0, 1)),
  PRIMARY KEY (session_id, seq)
) STRICT";
const EVENTS_14_SQL: &str = "CREATE TABLE events (
  session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  type TEXT NOT NULL,
  time INTEGER NOT NULL,
  data TEXT NOT NULL,
  source_event_seqs TEXT,
  surface_op TEXT,
  PRIMARY KEY (session_id, seq)
) STRICT";
const PERSISTENCE_STATE_SQL: &str = "CREATE TABLE persistence_state (
  singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
  store_id TEXT NOT NULL
) STRICT";
const SESSIONS_SQL: &str = "CREATE TABLE sessions (
  id TEXT PRIMARY KEY,
  version INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  cwd TEXT,
  parent_session TEXT,
  seed_length INTEGER,
  origin TEXT,
  delegation_depth INTEGER,
  agent_preset TEXT,
  incarnation TEXT NOT NULL,
  revision INTEGER NOT NULL
) STRICT";

const USER_SCHEMA: &str = "SELECT type, name, tbl_name, sql FROM sqlite_schema WHERE name NOT GLOB 'sqlite_*' ORDER BY type, name";

pub(super) const LIST_SESSIONS: &str = "SELECT id, version, created_at, cwd, parent_session, seed_length, origin, delegation_depth, agent_preset, incarnation, revision FROM sessions";
pub(super) const SESSION_BY_ID: &str = "SELECT id, version, created_at, cwd, parent_session, seed_length, origin, delegation_depth, agent_preset, incarnation, revision FROM sessions WHERE id = ?1";
pub(super) const SESSION_EXISTS: &str = "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)";
pub(super) const INSERT_SESSION: &str = "INSERT INTO sessions (id, version, created_at, cwd, parent_session, seed_length, origin, delegation_depth, agent_preset, incarnation, revision) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";

// Schema 14 has no `ignorable` column; selecting NULL in its place lets both
// schemas share one row type.
const ROWS_FROM_17: &str = "SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable FROM events WHERE session_id = ?1 AND seq >= ?2 ORDER BY seq LIMIT ?3";
const ROWS_FROM_14: &str = "SELECT seq, type, time, data, source_event_seqs, surface_op, NULL FROM events WHERE session_id = ?1 AND seq >= ?2 ORDER BY seq LIMIT ?3";
const ROW_AT_17: &str = "SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable FROM events WHERE session_id = ?1 AND seq = ?2";
const ROW_AT_14: &str = "SELECT seq, type, time, data, source_event_seqs, surface_op, NULL FROM events WHERE session_id = ?1 AND seq = ?2";
pub(super) const INSERT_EVENT_17: &str = "INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, surface_op, ignorable) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
pub(super) const INSERT_EVENT_14: &str = "INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, surface_op) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// The two row layouts, selected by `PRAGMA user_version`: 14 (the published
/// package, one JSON-text row per event) and 17 (the reference tag, packed
/// chunk rows, zstd BLOBs, varint seq lists).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schema {
    /// Schema 14: one JSON-text row per event.
    V14,
    /// Schema 17: packed chunk rows, zstd BLOBs, varint seq lists.
    V17,
}

impl Schema {
    pub(super) fn from_user_version(version: i64) -> Option<Schema> {
        match version {
            14 => Some(Schema::V14),
            17 => Some(Schema::V17),
            _ => None,
        }
    }

    pub(super) fn number(self) -> u32 {
        match self {
            Schema::V14 => 14,
            Schema::V17 => 17,
        }
    }

    /// `(name, sql)` of each table, in `ORDER BY type, name` order.
    fn tables(self) -> [(&'static str, &'static str); 3] {
        let events = match self {
            Schema::V14 => EVENTS_14_SQL,
            Schema::V17 => EVENTS_17_SQL,
        };
        [
            ("events", events),
            ("persistence_state", PERSISTENCE_STATE_SQL),
            ("sessions", SESSIONS_SQL),
        ]
    }

    pub(super) fn rows_from_sql(self) -> &'static str {
        match self {
            Schema::V14 => ROWS_FROM_14,
            Schema::V17 => ROWS_FROM_17,
        }
    }

    pub(super) fn row_at_sql(self) -> &'static str {
        match self {
            Schema::V14 => ROW_AT_14,
            Schema::V17 => ROW_AT_17,
        }
    }

    /// The Harness's committed-corruption message, which the two schemas word
    /// differently (spec §8.3, §8.4).
    pub(super) fn bad_row_message(self, seq: u64) -> String {
        match self {
            Schema::V14 => format!("corrupt session log: unparsable committed event at seq {seq}"),
            Schema::V17 => {
                format!("corrupt session log: invalid committed physical row at seq {seq}")
            }
        }
    }
}

/// Checks the application id, the schema version and the table definitions
/// (spec §11.1), and returns the row layout they select.
pub(super) fn check_identity(connection: &Connection, path: &Path) -> Result<Schema, String> {
    let unreadable = |e: rusqlite::Error| {
        format!(
            "cannot read session database at \"{}\": {e}",
            path.display()
        )
    };
    let application_id: i64 = connection
        .pragma_query_value(None, "application_id", |row| row.get(0))
        .map_err(unreadable)?;
    if application_id != APPLICATION_ID {
        return Err(format!(
            "\"{}\" is not a DeepSeek Harness session database (application_id {application_id}, expected {APPLICATION_ID})",
            path.display()
        ));
    }
    let user_version: i64 = connection
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(unreadable)?;
    let schema = Schema::from_user_version(user_version).ok_or_else(|| {
        format!(
            "session database at \"{}\" has schema version {user_version}; sessionfs reads 14 and 17",
            path.display()
        )
    })?;
    let mut select = connection.prepare(USER_SCHEMA).map_err(unreadable)?;
    let objects = select
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, Option<String>>(3)?,
            ))
        })
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(unreadable)?;
    let mismatch = |what: String| {
        format!(
            "session database at \"{}\" does not have the schema-{} tables: {what}",
            path.display(),
            schema.number()
        )
    };
    let expected = schema.tables();
    for (index, (kind, name, table, sql)) in objects.iter().enumerate() {
        let Some((expected_name, expected_sql)) = expected.get(index) else {
            return Err(mismatch(format!("unexpected {kind} {name}")));
        };
        if kind != "table" || name != expected_name || table != expected_name {
            return Err(mismatch(format!(
                "expected table {expected_name}, found {kind} {name}"
            )));
        }
        if sql.as_deref().map(collapse_whitespace) != Some(collapse_whitespace(expected_sql)) {
            return Err(mismatch(format!("table {name} is defined differently")));
        }
    }
    if let Some((missing, _)) = expected.get(objects.len()) {
        return Err(mismatch(format!("table {missing} is missing")));
    }
    Ok(schema)
}

fn collapse_whitespace(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Makes an empty database a Harness schema-17 store as the Harness initialises
/// one (spec §11.1), in one transaction: the tables in `schema.sql` order, the
/// `persistence_state` row naming `store_id`, the application id and the user
/// version. Journal mode and synchronous are the caller's to choose.
pub fn initialise(connection: &Connection, store_id: &str) -> rusqlite::Result<()> {
    let transaction = connection.unchecked_transaction()?;
    for table in [PERSISTENCE_STATE_SQL, SESSIONS_SQL, EVENTS_17_SQL] {
        transaction.execute(table, [])?;
    }
    transaction.execute(
        "INSERT INTO persistence_state (singleton, store_id) VALUES (1, ?1)",
        [store_id],
    )?;
    transaction.pragma_update(None, "application_id", APPLICATION_ID)?;
    transaction.pragma_update(None, "user_version", Schema::V17.number())?;
    transaction.commit()
}
