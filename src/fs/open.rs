//! Opening and reading files: each open takes a snapshot of its file's bytes
//! ([`super::handles`]), and a file that only grew since moves its readers on.

use std::time::Duration;

use super::handles::{Caching, ReadData, is_control};
use super::inode::{Ino, Lists, Node};
use super::{Attr, SessionFs};
use crate::bytes::Bytes;
use crate::error::{Error, Result};
use crate::view::Content;

impl SessionFs {
    /// Opens a file; returns the handle and how the kernel may cache its bytes.
    pub fn open(&self, ino: u64, write: bool) -> Result<(u64, Caching)> {
        let decoded =
            Ino::decode(ino).ok_or_else(|| Error::NotFound(format!("unknown inode {ino}")))?;
        let control = is_control(decoded);
        if write && !control {
            return Err(Error::ReadOnly("generated files are read-only".into()));
        }
        if let (true, Some(why)) = (write, &self.config.read_only) {
            return Err(Error::ReadOnly(why.clone()));
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

    /// The attributes of a rewritten file's older inode (a transcript's
    /// lineage, another file's generation) while a descriptor still holds it
    /// (`fstat` comes without the descriptor): the size of what it holds.
    pub(super) fn held_attr(&self, ino: u64) -> Option<Attr> {
        let current = match Ino::decode(ino)? {
            Ino::Session(number, node)
                if matches!(node, Node::Transcript(_)) || node.rewritable().is_some() =>
            {
                Ino::Session(number, self.node_now(number, node).ok()?)
            }
            Ino::Lists(Lists::Catalog(_)) => Ino::Lists(Lists::Catalog(self.sessions.catalog().0)),
            _ => return None,
        };
        let content = self.handles.held(ino)?;
        if current.encode() == ino {
            return None;
        }
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
