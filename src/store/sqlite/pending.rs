//! Marker files naming fork children whose rows are being written: next to
//! the database, `<database>-sessionfs-pending-<child id in hex>`, created
//! and made durable before the first row, removed after the session row is
//! committed (see `pace`). The writing process holds an `flock` on its marker,
//! so another mount of the same database can tell a live write from one a
//! crash left. `flock` locks are not SQLite's POSIX locks, and the marker is a
//! file of its own, so opening and closing it never touches SQLite's locks.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// A marker this process holds for one child.
pub(super) struct Marker {
    path: PathBuf,
    _file: File,
}

fn prefix(db: &Path) -> String {
    let name = db
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    format!("{name}-sessionfs-pending-")
}

fn hex(id: &str) -> String {
    id.bytes().map(|b| format!("{b:02x}")).collect()
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
    /// `AlreadyExists` when another process is writing that child now.
    pub(super) fn claim(db: &Path, id: &str) -> io::Result<Marker> {
        let path = db.with_file_name(format!("{}{}", prefix(db), hex(id)));
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)?;
        if !try_lock(&file)? {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("another process is writing session {id:?} now"),
            ));
        }
        file.set_len(0)?;
        file.write_all(id.as_bytes())?;
        file.sync_all()?;
        sync_dir(db)?;
        Ok(Marker { path, _file: file })
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
    let mut found = Vec::new();
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(&prefix) {
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
