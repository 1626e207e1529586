//! Marker files naming fork children whose rows are being written: next to
//! the database, `<database>-sessionfs-pending-<child id in hex>` (or, for an
//! id too long for a file name, `…-pending-h<64-bit hash of it>`), holding the
//! id, made durable before the first row and removed after the session row is
//! committed (see `pace`). The writing process holds an `flock` on its marker,
//! so another mount of the same database can tell a live write from one a
//! crash left. A marker is written and locked under a temporary name first and
//! then linked to its own, so no other process ever sees it empty or unlocked
//! while it is live. `flock` locks are not SQLite's POSIX locks, and the
//! marker is a file of its own, so opening and closing it never touches
//! SQLite's locks.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A marker this process holds for one child.
pub(super) struct Marker {
    path: PathBuf,
    _file: File,
}

/// The start of the names of the database's files of `kind` (`pending`, or
/// `claiming` for a marker still being written).
fn named(db: &Path, kind: &str) -> String {
    let name = db
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    format!("{name}-sessionfs-{kind}-")
}

fn prefix(db: &Path) -> String {
    named(db, "pending")
}

/// The part of a marker's name that names its child: the id in hex, or a
/// hash of it when the name would pass NAME_MAX (255 bytes).
fn child_part(db: &Path, id: &str) -> String {
    let hex: String = id.bytes().map(|b| format!("{b:02x}")).collect();
    if prefix(db).len() + hex.len() <= 255 {
        return hex;
    }
    // FNV-1a: stable across builds, unlike std's hasher.
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("h{hash:016x}")
}

/// A temporary name for a marker being written, unique in this process.
fn claiming_path(db: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let claiming = named(db, "claiming");
    db.with_file_name(format!("{claiming}{}-{n}", std::process::id()))
}

/// Takes the `flock` on `file` without waiting; false when another holds it.
fn try_lock(file: &File) -> io::Result<bool> {
    // SAFETY: a valid descriptor.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(false),
        _ => Err(error),
    }
}

fn sync_dir(db: &Path) -> io::Result<()> {
    match db.parent() {
        Some(dir) => File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

impl Marker {
    /// Creates and locks the marker for child `id`, durable before it returns.
    /// `AlreadyExists` when another process is writing that child now. The
    /// second value is true when a crashed write's marker for the child was
    /// taken over: its rows must be removed before new ones are written.
    pub(super) fn claim(db: &Path, id: &str) -> io::Result<(Marker, bool)> {
        let path = db.with_file_name(format!("{}{}", prefix(db), child_part(db, id)));
        let temporary = claiming_path(db);
        let mut file = OpenOptions::new()
            .create_new(true)
            .read(true)
            .write(true)
            .open(&temporary)?;
        let written = (|| {
            if !try_lock(&file)? {
                return Err(io::Error::other(
                    "a new marker file is locked by another process",
                ));
            }
            file.write_all(id.as_bytes())?;
            file.sync_all()?;
            std::fs::hard_link(&temporary, &path)
        })();
        let _ = std::fs::remove_file(&temporary);
        match written {
            Ok(()) => {
                sync_dir(db)?;
                Ok((Marker { path, _file: file }, false))
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let mut held = OpenOptions::new().read(true).write(true).open(&path)?;
                if !try_lock(&held)? {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!("another process is writing session {id:?} now"),
                    ));
                }
                // A crash left it: this process owns it now, naming `id`.
                held.set_len(0)?;
                held.write_all(id.as_bytes())?;
                held.sync_all()?;
                Ok((Marker { path, _file: held }, true))
            }
            Err(e) => Err(e),
        }
    }

    /// Removes the marker: the child is complete, or none of its rows is left.
    pub(super) fn release(self) -> io::Result<()> {
        std::fs::remove_file(&self.path)
    }
}

/// The markers no live process holds, with the child ids they name, locked
/// by this process until released. Reads only the database's directory.
pub(super) fn leftovers(db: &Path) -> Vec<(Marker, String)> {
    let (Some(dir), prefix) = (db.parent(), prefix(db)) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let claiming = named(db, "claiming");
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&claiming) {
            // A marker a crash left before it was linked: no row followed it.
            if let Ok(file) = File::open(entry.path())
                && try_lock(&file).unwrap_or(false)
            {
                let _ = std::fs::remove_file(entry.path());
            }
            continue;
        }
        if !name.starts_with(&prefix) {
            continue;
        }
        let path = entry.path();
        let Ok(mut file) = OpenOptions::new().read(true).write(true).open(&path) else {
            continue;
        };
        if !try_lock(&file).unwrap_or(false) {
            continue;
        }
        let mut id = String::new();
        if file.read_to_string(&mut id).is_err() || id.is_empty() {
            // Created but never written: no row can exist for it.
            let _ = std::fs::remove_file(&path);
            continue;
        }
        found.push((Marker { path, _file: file }, id));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database path in a fresh directory (the database itself is not needed).
    fn db(label: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("sessionfs-pending-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("sessions.db")
    }

    fn names(db: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(db.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_child_id_too_long_for_a_file_name_gets_a_hashed_marker() {
        let db = db("long");
        let id = "z".repeat(4200);
        let (marker, adopted) = Marker::claim(&db, &id).unwrap();
        assert!(!adopted);
        let listed = names(&db);
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert!(listed[0].len() <= 255 && listed[0].contains("-pending-h"));
        assert_eq!(
            std::fs::read_to_string(db.with_file_name(&listed[0])).unwrap(),
            id
        );
        marker.release().unwrap();
        assert!(names(&db).is_empty());
        let short = Marker::claim(&db, "kid").unwrap().0;
        assert_eq!(names(&db), ["sessions.db-sessionfs-pending-6b6964"]);
        short.release().unwrap();
    }

    #[test]
    fn a_live_marker_is_never_taken_and_a_crashed_one_is() {
        let db = db("live");
        let (live, _) = Marker::claim(&db, "kid").unwrap();
        let again = Marker::claim(&db, "kid").err().expect("held");
        assert_eq!(again.kind(), io::ErrorKind::AlreadyExists);
        assert!(leftovers(&db).is_empty(), "a held marker is not a leftover");
        // A crash: the descriptor closes, the name stays.
        drop(live);
        let found = leftovers(&db);
        assert_eq!(
            found.iter().map(|(_, id)| id.as_str()).collect::<Vec<_>>(),
            ["kid"]
        );
        drop(found);
        let (taken, adopted) = Marker::claim(&db, "kid").unwrap();
        assert!(adopted, "the crashed write's rows are to be removed first");
        taken.release().unwrap();
        assert!(names(&db).is_empty(), "{:?}", names(&db));
    }

    #[test]
    fn a_marker_a_crash_left_before_it_was_linked_is_removed() {
        let db = db("claiming");
        let stale = claiming_path(&db);
        std::fs::write(&stale, "kid").unwrap();
        assert!(leftovers(&db).is_empty());
        assert!(names(&db).is_empty(), "{:?}", names(&db));
    }
}
