//! Open files. Each handle holds a snapshot of its file's bytes, so a reader
//! never sees size and content disagree. A file that only grew since (same
//! lineage, old bytes a prefix of the new) moves its handles on to the newer
//! snapshot, so `tail -f` follows; a rewritten file keeps serving the snapshot
//! taken at open. A spilled transcript ([`super::paged`]) is opened without
//! one: the kernel may hold all its pages, and the first read it cannot answer
//! takes the snapshot.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::inode::{Ino, Node};
use crate::bytes::{Bytes, Slice};
use crate::sync::lock;
use crate::view::Content;

struct Handle {
    ino: u64,
    /// `None` until the first read of a spilled transcript.
    content: Option<Content>,
}

/// How the kernel may cache an open file's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caching {
    /// Every read reaches the daemon (control files, rewritable views).
    Direct,
    /// The page cache, dropped at each open (logged events).
    PageCache,
    /// The page cache, kept across opens (`transcript.md`).
    KeepPageCache,
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
    pub(super) fn insert(&self, ino: u64, content: Option<Content>) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.open).insert(fh, Handle { ino, content });
        fh
    }

    pub(super) fn get(&self, fh: u64) -> Option<(u64, Option<Content>)> {
        lock(&self.open)
            .get(&fh)
            .map(|h| (h.ino, h.content.clone()))
    }

    pub(super) fn advance(&self, fh: u64, content: Content) {
        if let Some(handle) = lock(&self.open).get_mut(&fh) {
            handle.content = Some(content);
        }
    }

    /// The snapshot some open handle of `ino` holds.
    pub(super) fn held(&self, ino: u64) -> Option<Content> {
        lock(&self.open)
            .values()
            .find(|h| h.ino == ino)
            .and_then(|h| h.content.clone())
    }

    pub(super) fn remove(&self, fh: u64) {
        lock(&self.open).remove(&fh);
    }

    /// Open handles, for the tests of handle hygiene.
    pub(super) fn count(&self) -> usize {
        lock(&self.open).len()
    }
}

/// The control files: written to, and read as their status now.
pub(super) fn is_control(ino: Ino) -> bool {
    matches!(
        ino,
        Ino::RootFlush | Ino::Session(_, Node::Fork | Node::Flush)
    )
}

/// The bytes a read returns: a range of a shared snapshot, so a large read is
/// answered without copying the file (a read across two segments copies itself).
pub struct ReadData(Slice);

impl ReadData {
    pub(super) fn new(bytes: &Bytes, offset: u64, size: u32) -> ReadData {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        let end = start.saturating_add(size as usize).min(bytes.len());
        ReadData(bytes.slice(start..end))
    }

    /// The bytes, as one slice.
    pub fn as_slice(&self) -> &[u8] {
        self.0.as_slice()
    }
}
