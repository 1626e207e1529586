//! Writes generated sessions as the Harness stores them: JSONL plaintext with
//! packed chunk rows (spec §10.4), the same plaintext as one zstd frame per
//! write-behind batch after a header frame (§10.6), and SQLite schema 17 rows
//! (§11.2, §11.3), packed per batch. Stores are cached on disk by parameters.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, params};
use sessionfs::json::JsonMap;
use sessionfs::model::chunk_rows;
use sessionfs::model::header::SessionHeader;
use sessionfs::model::ids::{encode_segment, project_dir};
use sessionfs::store::sqlite::{self, EventRow, NewSession, RowEncoder, Schema};

use crate::synth::{Profile, Rng, SessionGen};

/// Bump when the generator's output changes, so cached stores are rebuilt.
pub const GEN_VERSION: u32 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enc {
    Zstd,
    Raw,
    Sqlite,
}

impl Enc {
    pub const ALL: [Enc; 3] = [Enc::Zstd, Enc::Raw, Enc::Sqlite];

    pub fn name(self) -> &'static str {
        match self {
            Enc::Zstd => "zstd",
            Enc::Raw => "raw",
            Enc::Sqlite => "sqlite",
        }
    }

    pub fn parse(name: &str) -> Option<Enc> {
        Enc::ALL.into_iter().find(|e| e.name() == name)
    }
}

/// One session to generate.
#[derive(Clone, Debug)]
pub struct SessionSpec {
    pub id: String,
    pub cwd: Option<String>,
    pub created_at: i64,
    pub seed: u64,
    pub profile: Profile,
    /// Stop at the first turn boundary after this many events or plaintext bytes.
    pub stop_events: u64,
    pub stop_bytes: u64,
    pub needle: Option<String>,
}

impl SessionSpec {
    pub fn header(&self) -> SessionHeader {
        SessionHeader {
            version: 0.into(),
            id: self.id.clone(),
            created_at: self.created_at,
            cwd: self.cwd.clone(),
            parent_session: None,
            seed_length: None,
            origin: None,
            delegation_depth: Some(0),
            agent_preset: None,
        }
    }

    pub fn generator(&self) -> SessionGen {
        SessionGen::new(
            Rng::new(self.seed),
            self.profile.clone(),
            self.created_at,
            self.needle.clone(),
        )
    }

    /// Where the JSONL artifact of this session lives under a JSONL root.
    pub fn artifact(&self, root: &Path, enc: Enc) -> PathBuf {
        let name = if enc == Enc::Zstd {
            "session.jsonl.zstd"
        } else {
            "session.jsonl"
        };
        root.join(project_dir(self.cwd.as_deref()))
            .join(encode_segment(&self.id).expect("non-empty id"))
            .join(name)
    }

    /// The session's directory name in the mount.
    pub fn mount_name(&self) -> String {
        sessionfs::fs::mount_name(&self.id)
    }
}

/// Runs the generator to its stop point, handing each batch to `sink`, which
/// returns the batch's plaintext size. Returns the generator, ready to continue.
pub fn drive(spec: &SessionSpec, mut sink: impl FnMut(&[JsonMap]) -> u64) -> SessionGen {
    let mut generator = spec.generator();
    let mut bytes = 0;
    loop {
        let more = generator.emitted < spec.stop_events && bytes < spec.stop_bytes;
        if !more && generator.drained() {
            break;
        }
        let n = generator.batch_size();
        let batch = generator.take(n, more);
        if batch.is_empty() {
            break;
        }
        bytes += sink(&batch);
    }
    generator
}

/// Per-thread encoders, reused across frames (creating a zstd context per frame
/// costs more than compressing a 300-byte batch). SQLite rows come from the
/// store's own row encoder, so they are packed and split as sessionfs writes them.
pub struct Encoders {
    frame: zstd::bulk::Compressor<'static>,
    rows: RowEncoder,
}

impl Encoders {
    pub fn new() -> Encoders {
        // As src/store/zstd_frames.rs `encode_frame`: level 3, checksum, no content size.
        let mut frame = zstd::bulk::Compressor::new(3).expect("zstd context");
        frame.include_checksum(true).expect("zstd parameter");
        frame.include_contentsize(false).expect("zstd parameter");
        let rows = RowEncoder::new(Schema::V17).expect("zstd context");
        Encoders { frame, rows }
    }

    pub fn frame(&mut self, plaintext: &[u8]) -> Vec<u8> {
        self.frame.compress(plaintext).expect("zstd compress")
    }

    /// The storage records of one batch (packed as the Harness packs, per batch),
    /// as JSONL plaintext and, when `rows`, as schema-17 rows.
    pub fn batch(&mut self, batch: &[JsonMap], rows: bool) -> (Vec<u8>, Vec<EventRow>) {
        let mut plain = Vec::with_capacity(batch.len() * 120);
        for record in &chunk_rows::pack(batch, usize::MAX) {
            serde_json::to_writer(&mut plain, record).expect("serialize");
            plain.push(b'\n');
        }
        let rows = if rows {
            self.rows.batch(batch).expect("encode rows")
        } else {
            Vec::new()
        };
        (plain, rows)
    }
}

/// Counts for one session.
#[derive(Clone, Debug, Default)]
pub struct SessionStats {
    pub id: String,
    pub events: u64,
    pub batches: u64,
    /// JSONL plaintext, header line included.
    pub plain: u64,
    /// The zstd artifact's size.
    pub zstd: u64,
}

/// A lowercase UUID v4 from the PRNG (deterministic ids keep stores reproducible).
pub fn uuid(rng: &mut Rng) -> String {
    let mut bytes = [0u8; 16];
    for chunk in bytes.chunks_mut(8) {
        chunk.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    sessionfs::random::format_uuid_v4(bytes)
}

/// Creates a fresh Harness schema-17 database, as the Harness initialises one
/// (spec §11.1); WAL without fsyncs, for speed. Mode 0600 as the Harness
/// creates it: its SQLite backend refuses a database others can read.
pub fn create_database(path: &Path, store_id: &str) -> rusqlite::Result<Connection> {
    let connection = Connection::open(path)?;
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| panic!("chmod 600 {}: {e}", path.display()));
    connection.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = OFF;")?;
    sqlite::initialise(&connection, store_id)?;
    Ok(connection)
}

/// Inserts one batch's rows (in the caller's transaction).
pub fn insert_rows(connection: &Connection, id: &str, rows: &[EventRow]) -> rusqlite::Result<()> {
    sqlite::insert_events(connection, Schema::V17, id, rows)
}

enum DbMessage {
    /// The session row goes in first (events reference it), with revision 0 ...
    Begin(SessionHeader),
    Rows(Arc<str>, Vec<EventRow>),
    /// ... and gets the number of committed batches at the end.
    End(Arc<str>, u64),
}

fn header_line(spec: &SessionSpec) -> Vec<u8> {
    let mut line = spec.header().to_jsonl_line().into_bytes();
    line.push(b'\n');
    line
}

fn create_file(path: &Path) -> BufWriter<File> {
    fs::create_dir_all(path.parent().expect("parent"))
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
    BufWriter::with_capacity(
        1 << 20,
        File::create(path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display())),
    )
}

/// Writes one session in the given encodings; SQLite rows go to `db`.
fn write_session(
    spec: &SessionSpec,
    store: &Path,
    encs: &[Enc],
    encoders: &mut Encoders,
    db: Option<&mpsc::SyncSender<DbMessage>>,
) -> SessionStats {
    let header = header_line(spec);
    let mut zstd = encs
        .contains(&Enc::Zstd)
        .then(|| create_file(&spec.artifact(&store.join("zstd"), Enc::Zstd)));
    let mut raw = encs
        .contains(&Enc::Raw)
        .then(|| create_file(&spec.artifact(&store.join("raw"), Enc::Raw)));
    let mut stats = SessionStats {
        id: spec.id.clone(),
        plain: header.len() as u64,
        ..SessionStats::default()
    };
    let frame0 = encoders.frame(&header);
    stats.zstd += frame0.len() as u64;
    if let Some(out) = zstd.as_mut() {
        out.write_all(&frame0).expect("write");
    }
    if let Some(out) = raw.as_mut() {
        out.write_all(&header).expect("write");
    }
    let id: Arc<str> = Arc::from(spec.id.as_str());
    if let Some(db) = db {
        db.send(DbMessage::Begin(spec.header()))
            .expect("database writer");
    }
    // Rows go to the database thread in large messages: a message per batch
    // would spend more on waking that thread than on inserting.
    let mut pending = Vec::new();
    let generator = drive(spec, |batch| {
        let (plain, mut rows) = encoders.batch(batch, db.is_some());
        let frame = encoders.frame(&plain);
        stats.batches += 1;
        stats.plain += plain.len() as u64;
        stats.zstd += frame.len() as u64;
        if let Some(out) = zstd.as_mut() {
            out.write_all(&frame).expect("write");
        }
        if let Some(out) = raw.as_mut() {
            out.write_all(&plain).expect("write");
        }
        pending.append(&mut rows);
        if let Some(db) = db.filter(|_| pending.len() >= 4096) {
            db.send(DbMessage::Rows(id.clone(), std::mem::take(&mut pending)))
                .expect("database writer");
        }
        plain.len() as u64
    });
    stats.events = generator.emitted;
    for out in [zstd, raw].into_iter().flatten() {
        out.into_inner().expect("flush");
    }
    if let Some(db) = db {
        db.send(DbMessage::Rows(id.clone(), pending))
            .expect("database writer");
        db.send(DbMessage::End(id, stats.batches))
            .expect("database writer");
    }
    stats
}

/// A generated store: JSONL roots `zstd/` and `raw/` and the database `sqlite/sessions.db`.
pub struct Store {
    pub dir: PathBuf,
    pub sessions: Vec<SessionSpec>,
    pub stats: Vec<SessionStats>,
}

impl Store {
    pub fn root(&self, enc: Enc) -> PathBuf {
        match enc {
            Enc::Zstd => self.dir.join("zstd"),
            Enc::Raw => self.dir.join("raw"),
            Enc::Sqlite => self.dir.join("sqlite/sessions.db"),
        }
    }

    pub fn total(&self) -> SessionStats {
        let mut total = SessionStats::default();
        for s in &self.stats {
            total.events += s.events;
            total.batches += s.batches;
            total.plain += s.plain;
            total.zstd += s.zstd;
        }
        total
    }

    pub fn stats_of(&self, id: &str) -> &SessionStats {
        self.stats
            .iter()
            .find(|s| s.id == id)
            .expect("generated session")
    }
}

/// A stable hash of the parameters, for the cache directory name.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn read_stats(path: &Path) -> Option<Vec<SessionStats>> {
    let text = fs::read_to_string(path).ok()?;
    text.lines()
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            Some(SessionStats {
                id: f.first()?.to_string(),
                events: f.get(1)?.parse().ok()?,
                batches: f.get(2)?.parse().ok()?,
                plain: f.get(3)?.parse().ok()?,
                zstd: f.get(4)?.parse().ok()?,
            })
        })
        .collect()
}

fn write_stats(path: &Path, stats: &[SessionStats]) {
    let text: String = stats
        .iter()
        .map(|s| {
            format!(
                "{}\t{}\t{}\t{}\t{}\n",
                s.id, s.events, s.batches, s.plain, s.zstd
            )
        })
        .collect();
    fs::write(path, text).expect("write stats");
}

/// Generates (or finds cached) the store `name` holding `sessions` in `encs`.
/// Returns the store and the seconds spent generating (0 when cached).
pub fn build(
    base: &Path,
    name: &str,
    sessions: Vec<SessionSpec>,
    encs: &[Enc],
    regenerate: bool,
) -> (Store, f64) {
    let key = format!("{GEN_VERSION}:{sessions:?}");
    let dir = base.join(format!("{name}-{:016x}", fnv(&key)));
    let stats_path = dir.join("stats.tsv");
    let done = |enc: Enc| dir.join(format!("{}.done", enc.name()));
    let missing: Vec<Enc> = encs
        .iter()
        .copied()
        .filter(|&e| regenerate || !done(e).exists())
        .collect();
    if missing.is_empty()
        && let Some(stats) = read_stats(&stats_path)
    {
        return (
            Store {
                dir,
                sessions,
                stats,
            },
            0.0,
        );
    }
    let started = std::time::Instant::now();
    for enc in &missing {
        let _ = fs::remove_file(done(*enc));
        let root = match enc {
            Enc::Zstd => dir.join("zstd"),
            Enc::Raw => dir.join("raw"),
            Enc::Sqlite => dir.join("sqlite"),
        };
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).expect("create store directory");
    }
    let stats = generate(&dir, &sessions, &missing);
    write_stats(&stats_path, &stats);
    for enc in &missing {
        fs::write(done(*enc), "").expect("write marker");
    }
    (
        Store {
            dir,
            sessions,
            stats,
        },
        started.elapsed().as_secs_f64(),
    )
}

fn generate(dir: &Path, sessions: &[SessionSpec], encs: &[Enc]) -> Vec<SessionStats> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<SessionStats>>> = Mutex::new(vec![None; sessions.len()]);
    let (tx, rx) = mpsc::sync_channel::<DbMessage>(64);
    let db_path = dir.join("sqlite/sessions.db");
    let with_db = encs.contains(&Enc::Sqlite);
    std::thread::scope(|scope| {
        let writer = with_db.then(|| {
            let mut rng = Rng::derive(fnv(&db_path.display().to_string()), 1);
            scope.spawn(move || {
                let connection =
                    create_database(&db_path, &uuid(&mut rng)).expect("create database");
                connection.execute_batch("BEGIN").expect("begin");
                for message in rx {
                    match message {
                        DbMessage::Rows(id, rows) => {
                            insert_rows(&connection, &id, &rows).expect("insert rows")
                        }
                        DbMessage::Begin(header) => NewSession::new(&header, uuid(&mut rng), 0)
                            .expect("a valid header")
                            .insert(&connection)
                            .expect("insert session"),
                        DbMessage::End(id, revision) => {
                            let revision = revision as i64;
                            connection
                                .execute(
                                    "UPDATE sessions SET revision = ?2 WHERE id = ?1",
                                    params![&*id, revision],
                                )
                                .expect("update revision");
                        }
                    }
                }
                connection
                    .execute_batch("COMMIT; PRAGMA wal_checkpoint(TRUNCATE);")
                    .expect("commit");
            })
        });
        for _ in 0..threads {
            let tx = tx.clone();
            let (next, results) = (&next, &results);
            scope.spawn(move || {
                let mut encoders = Encoders::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(spec) = sessions.get(i) else { break };
                    let stats =
                        write_session(spec, dir, encs, &mut encoders, with_db.then_some(&tx));
                    results.lock().expect("results")[i] = Some(stats);
                }
            });
        }
        drop(tx);
        if let Some(writer) = writer {
            writer.join().expect("database writer");
        }
    });
    results
        .into_inner()
        .expect("results")
        .into_iter()
        .map(|s| s.expect("every session written"))
        .collect()
}
