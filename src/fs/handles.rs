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
use std::time::Duration;

use super::inode::{Ino, Node};
use super::{Attr, ReadData, SessionFs};
use crate::bytes::Bytes;
use crate::error::{Error, Result};
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
    fn insert(&self, ino: u64, content: Option<Content>) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.open).insert(fh, Handle { ino, content });
        fh
    }

    fn get(&self, fh: u64) -> Option<(u64, Option<Content>)> {
        lock(&self.open)
            .get(&fh)
            .map(|h| (h.ino, h.content.clone()))
    }

    fn advance(&self, fh: u64, content: Content) {
        if let Some(handle) = lock(&self.open).get_mut(&fh) {
            handle.content = Some(content);
        }
    }

    /// The snapshot some open handle of `ino` holds.
    fn held(&self, ino: u64) -> Option<Content> {
        lock(&self.open)
            .values()
            .find(|h| h.ino == ino)
            .and_then(|h| h.content.clone())
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
    /// Opens a file; returns the handle and how the kernel may cache its bytes.
    pub fn open(&self, ino: u64, write: bool) -> Result<(u64, Caching)> {
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
            Some(Content {
                bytes: Bytes::default(),
                lineage: 0,
            })
        } else if self.is_spilled(decoded) {
            None
        } else {
            Some(self.file(decoded, self.config.recheck)?)
        };
        let fh = self.handles.insert(ino, content);
        // The page cache is shared by every open of an inode, so it could mix the
        // bytes of two snapshots; files that can be rewritten in place bypass it.
        // Logged events never change; each transcript inode only grows.
        let caching = if super::is_paged(ino) {
            Caching::KeepPageCache
        } else if control || super::is_rewritable(ino) {
            Caching::Direct
        } else {
            Caching::PageCache
        };
        Ok((fh, caching))
    }

    /// True for the transcript of a dropped view, sized without reading it.
    fn is_spilled(&self, ino: Ino) -> bool {
        let Ino::Session(number, Node::Transcript(lineage)) = ino else {
            return false;
        };
        let spilled = self.slot(number).ok().and_then(|slot| self.spilled(&slot));
        spilled.is_some_and(|s| s.lineage as u32 == lineage)
    }

    /// Up to `size` bytes from `offset` of the file open as `fh`.
    pub fn read(&self, fh: u64, offset: u64, size: u32) -> Result<ReadData> {
        let (ino, held) = self
            .handles
            .get(fh)
            .ok_or_else(|| Error::Invalid(format!("unknown file handle {fh}")))?;
        let decoded = Ino::decode(ino).ok_or_else(|| Error::NotFound("unknown inode".into()))?;
        if is_control(decoded) {
            // Control files show their status as of this read, at any offset.
            let status = self.control_status(decoded)?;
            return Ok(ReadData::new(
                &Bytes::from(status.into_bytes()),
                offset,
                size,
            ));
        }
        let mut content = match held {
            Some(content) => content,
            None => {
                let content = self.file(decoded, self.config.recheck)?;
                self.handles.advance(fh, content.clone());
                content
            }
        };
        if offset + u64::from(size) > content.bytes.len() as u64 {
            content = self.follow_growth(fh, decoded, content);
        }
        Ok(ReadData::new(&content.bytes, offset, size))
    }

    /// A file that only grew since it was opened may be read further (`tail -f`),
    /// whatever happened to the session's other files; a rewritten one keeps
    /// serving the snapshot taken at open. The prefix check skips the segments
    /// both snapshots share, so following a large transcript reads only the
    /// tail it held. A transcript's lineage is its inode, whose pages the
    /// kernel keeps, so it reads on only within its lineage.
    fn follow_growth(&self, fh: u64, ino: Ino, content: Content) -> Content {
        // A spilled transcript's log is unchanged since its view was dropped:
        // nothing grew, and the session is not read again to learn that (the
        // kernel asks at every `read` of a page-cached file).
        if self.is_spilled(ino) {
            return content;
        }
        match self.file(ino, Duration::ZERO) {
            Ok(current)
                if (current.lineage == content.lineage || !super::is_paged(ino.encode()))
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
        let held = self.handles.get(fh).filter(|(held, _)| *held == ino);
        let (Some((_, Some(content))), Some(decoded)) = (held, Ino::decode(ino)) else {
            return self.getattr(ino);
        };
        if is_control(decoded) {
            return self.getattr(ino);
        }
        let content = self.follow_growth(fh, decoded, content);
        let mut attr = self.getattr(ino)?;
        attr.size = content.bytes.len() as u64;
        Ok(attr)
    }

    /// The attributes of a rewritten transcript's older lineage while a
    /// descriptor still holds it (`fstat` comes without the descriptor).
    pub(super) fn held_transcript_attr(&self, ino: u64) -> Option<Attr> {
        let Some(Ino::Session(number, Node::Transcript(_))) = Ino::decode(ino) else {
            return None;
        };
        let content = self.handles.held(ino)?;
        let current = Ino::Session(number, self.transcript_node(number).ok()?);
        Some(Attr {
            ino,
            size: content.bytes.len() as u64,
            ..self.getattr(current.encode()).ok()?
        })
    }

    /// Closes `fh`.
    pub fn release(&self, fh: u64) {
        self.handles.remove(fh);
    }

    /// How many files are open (for tests and `statfs`-like reporting).
    pub fn open_handles(&self) -> usize {
        self.handles.count()
    }
}
