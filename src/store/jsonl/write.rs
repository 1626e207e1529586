//! Writing into a JSONL root: fork children materialised atomically (a
//! private temp file hard-linked into place, spec §10.8, or renamed where the
//! store has no hard links, never over a file), and crash repairs
//! appended as a durable batch.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::{JsonlStore, RAW_NAME, ZSTD_NAME, is_zstd};
use crate::json::JsonMap;
use crate::model::chunk_rows::pack;
use crate::model::header::SessionHeader;
use crate::model::ids::{encode_segment, project_dir};
use crate::store::zstd_frames::encode_frame;
use crate::store::{Catalog, Revision, ScanPoint, SessionKey, Source, Writer};

/// The encoding new sessions are written in, chosen once for the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Encoding {
    /// `session.jsonl`.
    Raw,
    /// `session.jsonl.zstd`.
    Zstd,
}

impl JsonlStore {
    /// The encoding the store's first listing chose; a store written to before
    /// it was ever listed is listed once now.
    fn new_encoding(&self) -> Encoding {
        if let Some(encoding) = self.new_encoding.get() {
            return *encoding;
        }
        let _ = self.list();
        self.new_encoding.get().copied().unwrap_or(Encoding::Zstd)
    }

    /// A new session's project directory and its own directory inside it.
    fn new_session_dirs(&self, header: &SessionHeader) -> io::Result<(PathBuf, PathBuf)> {
        let segment = encode_segment(&header.id)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty session id"))?;
        let project = self.root.join(project_dir(header.cwd.as_deref()));
        let session_dir = project.join(&segment);
        Ok((project, session_dir))
    }

    fn materialise(
        &self,
        header: &SessionHeader,
        events: &[JsonMap],
        zstd: bool,
    ) -> io::Result<PathBuf> {
        let (project, session_dir) = self.new_session_dirs(header)?;
        make_private_dir(&project, &self.root)?;
        make_private_dir(&session_dir, &project)?;
        let final_path = session_dir.join(if zstd { ZSTD_NAME } else { RAW_NAME });
        ensure_free(&final_path)?;
        let header_line = format!("{}\n", header.to_jsonl_line());
        let mut batch = String::new();
        for record in pack(events, usize::MAX) {
            batch.push_str(&serde_json::to_string(&record).map_err(io::Error::other)?);
            batch.push('\n');
        }
        let content = if zstd {
            let mut bytes = encode_frame(header_line.as_bytes())?;
            bytes.extend(encode_frame(batch.as_bytes())?);
            bytes
        } else {
            format!("{header_line}{batch}").into_bytes()
        };
        let tmp = session_dir.join(format!(
            "{}.{}.tmp",
            final_path.file_name().unwrap_or_default().to_string_lossy(),
            crate::random::hex(12)?
        ));
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        let written = file.write_all(&content).and_then(|_| file.sync_all());
        drop(file);
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        let placed = place_without_replacing(&tmp, &final_path);
        if placed.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        placed?;
        File::open(&session_dir)?.sync_all()?;
        // The session's directory may be a reservation made without a sync.
        File::open(&project)?.sync_all()?;
        Ok(final_path)
    }
}

/// Gives the written `tmp` its final name, never replacing a file there.
fn place_without_replacing(tmp: &Path, final_path: &Path) -> io::Result<()> {
    // A hard link fails if something got there first.
    match std::fs::hard_link(tmp, final_path) {
        Ok(()) => {
            // Placed: a temporary name left behind is litter, not a failure.
            let _ = std::fs::remove_file(tmp);
            return Ok(());
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Err(e),
        // Many FUSE and network stores have no hard links (rclone answers EIO).
        Err(_) => {}
    }
    match rename_no_replace(tmp, final_path) {
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
            ) =>
        {
            // No exclusive rename either (rclone). The session's directory was
            // made by this process's reservation, so nothing else writes there:
            // checking first, then renaming, replaces nothing.
            ensure_free(final_path)?;
            std::fs::rename(tmp, final_path)
        }
        other => other,
    }
}

/// EEXIST unless nothing is at `path`.
fn ensure_free(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} already exists", path.display()),
        )),
        Err(_) => Ok(()),
    }
}

/// `renameat2(RENAME_NOREPLACE)`: fails with EEXIST if `to` exists.
fn rename_no_replace(from: &Path, to: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let path = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a path"))
    };
    let (from, to) = (path(from)?, path(to)?);
    // SAFETY: both are NUL-terminated paths that outlive the call.
    let answer = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if answer == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Appends one batch and fsyncs it; on failure the file is cut back to its prior
/// length, so a half-written batch never reaches a later reader (spec §10.8).
fn append_durably(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new().append(true).open(path)?;
    let prior = file.metadata()?.len();
    let written = file.write_all(bytes).and_then(|_| file.sync_all());
    if let Err(error) = written {
        drop(file);
        let rollback = OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|f| f.set_len(prior).and_then(|_| f.sync_all()));
        return Err(match rollback {
            Ok(()) => error,
            Err(also) => io::Error::other(format!(
                "{error}; rolling back to {prior} bytes also failed: {also}"
            )),
        });
    }
    Ok(())
}

/// `mkdir` with mode 0700, then fsync the parent so the new entry is durable.
/// An existing directory is used only if it is a real one: never write through a
/// symlink out of the store.
fn make_private_dir(dir: &Path, parent: &Path) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => File::open(parent)?.sync_all(),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            if std::fs::symlink_metadata(dir)?.is_dir() {
                Ok(())
            } else {
                Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{} exists and is not a directory (a symlink is not followed)",
                        dir.display()
                    ),
                ))
            }
        }
        Err(e) => Err(e),
    }
}

impl Writer for JsonlStore {
    fn create(&self, header: &SessionHeader, events: &[JsonMap]) -> io::Result<SessionKey> {
        if self.contains(&header.id) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("session {:?} already exists in the store", header.id),
            ));
        }
        let zstd = self.new_encoding() == Encoding::Zstd;
        self.materialise(header, events, zstd).map(SessionKey::File)
    }

    /// The session's directory, made now with `mkdir`, which the store's file
    /// system does atomically even over sshfs or NFS: of two processes that
    /// fork one name into a shared store, the second is refused here.
    fn reserve(&self, header: &SessionHeader) -> io::Result<()> {
        let (project, session_dir) = self.new_session_dirs(header)?;
        make_private_dir(&project, &self.root)?;
        match std::fs::DirBuilder::new().mode(0o700).create(&session_dir) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} already exists: a session of that id is being written by another \
                     process sharing this store, or one that was killed left the directory \
                     (if it is empty and nothing writes it, rmdir it)",
                    session_dir.display()
                ),
            )),
            other => other,
        }
    }

    fn release(&self, header: &SessionHeader) {
        // Only an empty directory goes: a log written there by anyone stays.
        if let Ok((_, session_dir)) = self.new_session_dirs(header) {
            let _ = std::fs::remove_dir(session_dir);
        }
    }

    fn repair(
        &self,
        key: &SessionKey,
        keep: &ScanPoint,
        expected: &Revision,
        tail: &[JsonMap],
    ) -> io::Result<()> {
        let SessionKey::File(path) = key else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a JSONL session",
            ));
        };
        if self.revision(key).ok().as_ref() != Some(expected) {
            return Err(io::Error::other(format!(
                "{} changed since it was read; not repairing it",
                path.display()
            )));
        }
        // Truncate the torn tail, then append like any durable batch: raw lines, or
        // one frame of the records packed as the Harness packs them.
        let truncate = OpenOptions::new().write(true).open(path)?;
        truncate.set_len(keep.offset)?;
        truncate.sync_all()?;
        drop(truncate);
        if tail.is_empty() {
            return Ok(());
        }
        let records = if is_zstd(path) {
            pack(tail, usize::MAX)
        } else {
            tail.to_vec()
        };
        let mut batch = Vec::new();
        for record in &records {
            serde_json::to_writer(&mut batch, record).map_err(io::Error::other)?;
            batch.push(b'\n');
        }
        let bytes = if is_zstd(path) {
            encode_frame(&batch)?
        } else {
            batch
        };
        append_durably(path, &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_takes_the_name_once_and_only_an_empty_one_is_given_back() {
        let root = std::env::temp_dir().join(format!("sessionfs-reserve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let store = JsonlStore::open(&root).unwrap();
        let header = SessionHeader::new("kid", 1);
        store.reserve(&header).unwrap();
        let again = store.reserve(&header).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AlreadyExists, "{again}");
        // The reservation is no session, and its owner writes into it.
        assert!(!store.contains("kid") && store.list().is_empty());
        store.create(&header, &[]).unwrap();
        store.release(&header);
        assert!(store.contains("kid"), "a written log is never given back");
        let other = SessionHeader::new("other", 1);
        store.reserve(&other).unwrap();
        store.release(&other);
        store.reserve(&other).expect("given back, so free again");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn an_exclusive_rename_never_replaces_a_file() {
        let dir = std::env::temp_dir().join(format!("sessionfs-rename-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (from, to) = (dir.join("from"), dir.join("to"));
        std::fs::write(&from, b"new").unwrap();
        std::fs::write(&to, b"theirs").unwrap();
        let refused = rename_no_replace(&from, &to).unwrap_err();
        assert_eq!(refused.raw_os_error(), Some(libc::EEXIST));
        assert_eq!(std::fs::read(&to).unwrap(), b"theirs");
        std::fs::remove_file(&to).unwrap();
        rename_no_replace(&from, &to).unwrap();
        assert_eq!(std::fs::read(&to).unwrap(), b"new");
        assert!(!from.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
