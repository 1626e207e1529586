//! Open files. Each handle holds a snapshot of its file's bytes, so a reader
//! never sees size and content disagree. A file that only grew since (same
//! lineage, old bytes a prefix of the new) moves its handles on to the newer
//! snapshot, so `tail -f` follows; a rewritten file keeps serving the snapshot
//! taken at open.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::inode::{Ino, Node};
use super::{Attr, ReadData, SessionFs, lock};
use crate::error::{Error, Result};
use crate::view::Content;

struct Handle {
    ino: u64,
    content: Content,
}

/// The handle table: a leaf lock, never held while a view is locked.
pub(super) struct Handles {
    open: Mutex<HashMap<u64, Handle>>,
    next: AtomicU64,
}

impl Default for Handles {
    fn default() -> Handles {
        Handles {
            open: Mutex::default(),
            next: AtomicU64::new(1),
        }
    }
}

impl Handles {
    fn insert(&self, ino: u64, content: Content) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.open).insert(fh, Handle { ino, content });
        fh
    }

    fn get(&self, fh: u64) -> Option<(u64, Content)> {
        lock(&self.open)
            .get(&fh)
            .map(|h| (h.ino, h.content.clone()))
    }

    fn advance(&self, fh: u64, content: Content) {
        if let Some(handle) = lock(&self.open).get_mut(&fh) {
            handle.content = content;
        }
    }

    fn remove(&self, fh: u64) {
        lock(&self.open).remove(&fh);
    }

    /// Open handles, for the tests of handle hygiene.
    pub(super) fn count(&self) -> usize {
        lock(&self.open).len()
    }
}

fn is_control(ino: Ino) -> bool {
    matches!(
        ino,
        Ino::RootFlush | Ino::Session(_, Node::Fork | Node::Flush)
    )
}

impl SessionFs {
    /// Opens a file; returns the handle and whether reads must bypass the page
    /// cache (control files, computed per read, and views that can be rewritten).
    pub fn open(&self, ino: u64, write: bool) -> Result<(u64, bool)> {
        let decoded =
            Ino::decode(ino).ok_or_else(|| Error::NotFound(format!("unknown inode {ino}")))?;
        let control = is_control(decoded);
        if write && !control {
            return Err(Error::ReadOnly("generated files are read-only".into()));
        }
        if write && self.config.read_only {
            return Err(Error::ReadOnly("the mount is read-only (-o ro)".into()));
        }
        let content = if control {
            Content {
                bytes: Arc::new(Vec::new()),
                lineage: 0,
            }
        } else {
            self.file_content(decoded)?
        };
        let fh = self.handles.insert(ino, content);
        // The page cache is shared by every open of an inode, so it could mix the
        // bytes of two snapshots; files that can be rewritten bypass it. Logged
        // events never change and keep the cache.
        Ok((fh, control || super::is_rewritable(ino)))
    }

    pub fn read(&self, fh: u64, offset: u64, size: u32) -> Result<ReadData> {
        let (ino, mut content) = self
            .handles
            .get(fh)
            .ok_or_else(|| Error::Invalid(format!("unknown file handle {fh}")))?;
        let decoded = Ino::decode(ino).ok_or_else(|| Error::NotFound("unknown inode".into()))?;
        if is_control(decoded) {
            // Control files show their status as of this read, at any offset.
            let status = self.control_status(decoded)?;
            return Ok(ReadData::new(Arc::new(status.into_bytes()), offset, size));
        }
        if offset + u64::from(size) > content.bytes.len() as u64 {
            content = self.follow_growth(fh, decoded, content);
        }
        Ok(ReadData::new(content.bytes, offset, size))
    }

    /// A file that only grew since it was opened may be read further (`tail -f`);
    /// a rewritten one keeps serving the snapshot taken at open.
    fn follow_growth(&self, fh: u64, ino: Ino, content: Content) -> Content {
        match self.file_content_now(ino) {
            Ok(current)
                if current.lineage == content.lineage
                    && current.bytes.len() > content.bytes.len()
                    && current.bytes.starts_with(&content.bytes) =>
            {
                self.handles.advance(fh, current.clone());
                current
            }
            _ => content,
        }
    }

    /// Attributes as seen through an open file: its size is the size of the
    /// snapshot that handle reads, so `fstat` and `read` never disagree.
    pub fn getattr_open(&self, ino: u64, fh: u64) -> Result<Attr> {
        let mut attr = self.getattr(ino)?;
        let held = self.handles.get(fh).filter(|(held, _)| *held == ino);
        if let (Some((_, content)), Some(decoded)) = (held, Ino::decode(ino))
            && !is_control(decoded)
        {
            attr.size = self.follow_growth(fh, decoded, content).bytes.len() as u64;
        }
        Ok(attr)
    }

    pub fn release(&self, fh: u64) {
        self.handles.remove(fh);
    }

    /// How many files are open (for tests and `statfs`-like reporting).
    pub fn open_handles(&self) -> usize {
        self.handles.count()
    }
}
