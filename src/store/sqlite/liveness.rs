//! Whether another connection has the database open, from the locks SQLite's
//! unix VFS holds (sqlite.org/walformat.html, os_unix.c): in WAL mode every
//! open connection holds a read lock on the `-shm` file's dead-man-switch
//! byte (offset 128, after the eight WAL-index locks at 120..128) and a
//! SHARED lock on the database file's shared range (0x40000002, 510 bytes),
//! for as long as it is open, idle or not. A writer in a transaction also
//! holds the WAL write lock (120) or the database's RESERVED and PENDING
//! bytes (0x40000000..0x40000002).
//!
//! The probe asks with `F_GETLK`, which reports only other processes' locks,
//! so sessionfs's own reader and fork writer never count. Its descriptors are
//! opened once and never closed while the store's connections are open:
//! closing any descriptor of a file drops every POSIX lock the process holds
//! on it, SQLite's own included.
//!
//! In a rollback-journal mode an idle connection holds no lock, so no lock
//! says nothing: the writer is then unknown.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::model::activity::WriterPresence;
use crate::sync::lock;

/// The database file's lock bytes: PENDING, RESERVED, then the shared range.
const DB_LOCKS: (i64, i64) = (0x4000_0000, 2 + 510);
/// The WAL-index's eight locks.
const WAL_INDEX_LOCKS: (i64, i64) = (120, 8);
/// The WAL write lock, the first of them.
const WAL_WRITE_LOCK: (i64, i64) = (120, 1);
/// The checkpointer's lock, the second.
const WAL_CKPT_LOCK: (i64, i64) = (121, 1);
/// The WAL-index's eight locks and its dead-man switch.
const SHM_LOCKS: (i64, i64) = (120, 9);

/// Probes for other connections to one database.
pub(super) struct WriterProbe {
    db_path: PathBuf,
    shm_path: PathBuf,
    /// Opened at the first probe and kept: see the module comment.
    files: Mutex<Option<Files>>,
}

struct Files {
    db: File,
    /// The `-shm` file, once there is one; replaced (never closed) when the
    /// path names another file.
    shm: Option<File>,
    /// Descriptors of files no longer at their path, kept open for the reason
    /// above.
    retired: Vec<File>,
}

impl WriterProbe {
    pub(super) fn new(db_path: &Path) -> WriterProbe {
        let mut shm = db_path.to_path_buf().into_os_string();
        shm.push("-shm");
        WriterProbe {
            db_path: db_path.to_path_buf(),
            shm_path: PathBuf::from(shm),
            files: Mutex::new(None),
        }
    }

    /// What the locks say of another connection now.
    pub(super) fn writer(&self) -> WriterPresence {
        let mut files = lock(&self.files);
        if files.is_none() {
            match File::open(&self.db_path) {
                Ok(db) => {
                    *files = Some(Files {
                        db,
                        shm: None,
                        retired: Vec::new(),
                    })
                }
                Err(e) => {
                    log::debug!("cannot probe {} for locks: {e}", self.db_path.display());
                    return WriterPresence::Unknown;
                }
            }
        }
        let Some(files) = files.as_mut() else {
            return WriterPresence::Unknown;
        };
        if locked_by_another(&files.db, DB_LOCKS).unwrap_or(false) {
            return WriterPresence::Connected;
        }
        if !is_wal(&files.db) {
            return WriterPresence::Unknown;
        }
        let Some(shm) = files.current_shm(&self.shm_path) else {
            // WAL mode and no -shm: nobody has the database open.
            return WriterPresence::Gone;
        };
        match locked_by_another(shm, SHM_LOCKS) {
            Ok(true) => WriterPresence::Connected,
            Ok(false) => WriterPresence::Gone,
            Err(_) => WriterPresence::Unknown,
        }
    }
}

impl WriterProbe {
    /// The WAL-index header (the first 48 bytes of `-shm`), which every commit
    /// to a WAL database rewrites (its frame count and checksums); `None` when
    /// there is no `-shm` to read.
    pub(super) fn wal_index_header(&self) -> Option<[u8; 48]> {
        let mut files = lock(&self.files);
        if files.is_none() {
            *files = Some(Files {
                db: File::open(&self.db_path).ok()?,
                shm: None,
                retired: Vec::new(),
            });
        }
        let shm = files.as_mut()?.current_shm(&self.shm_path)?;
        let mut header = [0u8; 48];
        shm.read_exact_at(&mut header, 0).ok()?;
        Some(header)
    }
}

impl WriterProbe {
    /// True when another process holds one of the WAL-index locks (the write
    /// lock, the checkpointer's, recovery's or a read mark): it is inside a
    /// transaction, and a Harness connection may be about to write.
    pub(super) fn others_in_transaction(&self) -> bool {
        self.shm_locked(WAL_INDEX_LOCKS)
    }

    /// True when another process holds the WAL write lock.
    pub(super) fn others_writing(&self) -> bool {
        self.shm_locked(WAL_WRITE_LOCK)
    }

    /// True when another process is checkpointing (holds the checkpointer's lock).
    pub(super) fn others_checkpointing(&self) -> bool {
        self.shm_locked(WAL_CKPT_LOCK)
    }

    fn shm_locked(&self, range: (i64, i64)) -> bool {
        let mut files = lock(&self.files);
        let Some(shm) = files
            .as_mut()
            .and_then(|files| files.current_shm(&self.shm_path))
        else {
            return false;
        };
        locked_by_another(shm, range).unwrap_or(false)
    }
}

impl Files {
    /// The `-shm` file now at `path`, opened when it is new.
    fn current_shm(&mut self, path: &Path) -> Option<&File> {
        let at_path = std::fs::metadata(path).ok()?;
        let same = |file: &File| {
            file.metadata()
                .is_ok_and(|m| m.dev() == at_path.dev() && m.ino() == at_path.ino())
        };
        if !self.shm.as_ref().is_some_and(same) {
            let opened = File::open(path).ok()?;
            if let Some(old) = self.shm.replace(opened) {
                self.retired.push(old);
            }
        }
        self.shm.as_ref()
    }
}

/// True when the database header says WAL mode (file format versions 2).
fn is_wal(db: &File) -> bool {
    let mut versions = [0u8; 2];
    db.read_exact_at(&mut versions, 18).is_ok() && versions == [2, 2]
}

/// True when a process other than this one holds a lock on bytes
/// `start..start + len` of `file`.
fn locked_by_another(file: &File, (start, len): (i64, i64)) -> io::Result<bool> {
    // SAFETY: an all-zero flock is a valid value to fill in.
    let mut probe: libc::flock = unsafe { std::mem::zeroed() };
    probe.l_type = libc::F_WRLCK as libc::c_short;
    probe.l_whence = libc::SEEK_SET as libc::c_short;
    probe.l_start = start;
    probe.l_len = len;
    // SAFETY: a valid descriptor and a flock for F_GETLK to fill in.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLK, &mut probe) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(probe.l_type != libc::F_UNLCK as libc::c_short)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    /// A copy of the schema-17 fixture database in a temp directory.
    struct Copy(PathBuf);

    impl Copy {
        fn new(label: &str) -> Copy {
            let dir = std::env::temp_dir()
                .join(format!("sessionfs-liveness-{label}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let db = dir.join("sessions.db");
            let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/stores/sqlite17/sessions.db");
            std::fs::copy(fixture, &db).unwrap();
            Copy(db)
        }
    }

    impl Drop for Copy {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(self.0.parent().unwrap());
        }
    }

    /// A child process holding a read lock on `len` bytes at `start` of
    /// `path`, as another SQLite connection would; killed when dropped.
    struct LockHolder(libc::pid_t);

    impl LockHolder {
        fn new(path: &Path, (start, len): (i64, i64)) -> LockHolder {
            let path = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
            let mut ready = [0; 2];
            // SAFETY: a two-descriptor array for pipe to fill.
            assert_eq!(unsafe { libc::pipe(ready.as_mut_ptr()) }, 0);
            // SAFETY: the child only makes async-signal-safe calls (open,
            // fcntl, write, pause) before it is killed.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork");
            if pid == 0 {
                // SAFETY: as above, on memory prepared before the fork.
                unsafe {
                    let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
                    let mut lock: libc::flock = std::mem::zeroed();
                    lock.l_type = libc::F_RDLCK as libc::c_short;
                    lock.l_whence = libc::SEEK_SET as libc::c_short;
                    lock.l_start = start;
                    lock.l_len = len;
                    let ok = u8::from(fd >= 0 && libc::fcntl(fd, libc::F_SETLK, &lock) == 0);
                    libc::write(ready[1], (&ok as *const u8).cast(), 1);
                    loop {
                        libc::pause();
                    }
                }
            }
            let mut ok = 0u8;
            // SAFETY: reading one byte from the pipe the child writes.
            unsafe {
                libc::close(ready[1]);
                libc::read(ready[0], (&mut ok as *mut u8).cast(), 1);
                libc::close(ready[0]);
            }
            let holder = LockHolder(pid);
            assert_eq!(ok, 1, "the child took its lock");
            holder
        }
    }

    impl Drop for LockHolder {
        fn drop(&mut self) {
            // SAFETY: our own child, killed and reaped.
            unsafe {
                libc::kill(self.0, libc::SIGKILL);
                libc::waitpid(self.0, std::ptr::null_mut(), 0);
            }
        }
    }

    #[test]
    fn this_process_own_connections_never_count() {
        let db = Copy::new("own");
        let reader = rusqlite::Connection::open(&db.0).unwrap();
        let _: i64 = reader
            .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
            .unwrap();
        let probe = WriterProbe::new(&db.0);
        assert_eq!(probe.writer(), WriterPresence::Gone);
        // Probing twice closes nothing: the connection's locks are still held,
        // so it still reads.
        assert_eq!(probe.writer(), WriterPresence::Gone);
        let _: i64 = reader
            .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .unwrap();
    }

    #[test]
    fn another_process_holding_the_wal_index_is_a_connected_writer() {
        let db = Copy::new("shm");
        let reader = rusqlite::Connection::open(&db.0).unwrap();
        let _: i64 = reader
            .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
            .unwrap();
        let probe = WriterProbe::new(&db.0);
        let shm = PathBuf::from(format!("{}-shm", db.0.display()));
        {
            // The dead-man switch every open connection holds.
            let _other = LockHolder::new(&shm, (128, 1));
            assert_eq!(probe.writer(), WriterPresence::Connected);
        }
        assert_eq!(probe.writer(), WriterPresence::Gone);
        {
            // A writer's SHARED lock on the database file.
            let _other = LockHolder::new(&db.0, (0x4000_0002, 510));
            assert_eq!(probe.writer(), WriterPresence::Connected);
        }
        assert_eq!(probe.writer(), WriterPresence::Gone);
    }

    #[test]
    fn the_write_lock_and_the_checkpointers_are_told_apart() {
        let db = Copy::new("ckpt");
        let reader = rusqlite::Connection::open(&db.0).unwrap();
        let _: i64 = reader
            .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
            .unwrap();
        let probe = WriterProbe::new(&db.0);
        // The probe opens its files at its first question, as the pacer asks.
        assert_eq!(probe.writer(), WriterPresence::Gone);
        let shm = PathBuf::from(format!("{}-shm", db.0.display()));
        {
            // SQLite's WAL write lock is byte 120 of -shm; its checkpointer's, 121.
            let _other = LockHolder::new(&shm, (121, 1));
            assert!(probe.others_checkpointing());
            assert!(!probe.others_writing());
        }
        {
            let _other = LockHolder::new(&shm, (120, 1));
            assert!(probe.others_writing());
            assert!(!probe.others_checkpointing());
        }
        assert!(!probe.others_checkpointing());
    }

    #[test]
    fn a_rollback_journal_database_cannot_tell() {
        let db = Copy::new("journal");
        rusqlite::Connection::open(&db.0)
            .unwrap()
            .execute_batch("PRAGMA journal_mode = DELETE")
            .unwrap();
        let probe = WriterProbe::new(&db.0);
        assert_eq!(probe.writer(), WriterPresence::Unknown);
        let _other = LockHolder::new(&db.0, (0x4000_0002, 510));
        assert_eq!(probe.writer(), WriterPresence::Connected);
    }

    #[test]
    fn a_wal_database_nobody_opened_has_no_writer() {
        let db = Copy::new("closed");
        assert_eq!(WriterProbe::new(&db.0).writer(), WriterPresence::Gone);
    }
}
