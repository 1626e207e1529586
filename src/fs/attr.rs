//! Attributes: one place decides each node's kind, size, mode and time. A
//! generated file's size is the length of the bytes a read returns
//! (`SessionFs::file`), control files included, so `cp`, `tar`,
//! `rsync` and `mmap` copy exactly what `cat` shows.

use std::time::SystemTime;

use super::clock::time_of;
use super::inode::{Ino, Lists, Node};
use super::names::mount_name;
use super::sessions::Slot;
use super::{Attr, Kind, SessionFs};
use crate::error::{Error, Result};
use crate::sync::lock;
use crate::view::SessionView;

/// A directory readable by a class can also be searched by it.
pub(super) fn dir_perm(read_bits: u16) -> u16 {
    read_bits | (read_bits >> 2)
}

impl SessionFs {
    pub(super) fn make_attr(
        &self,
        ino: u64,
        kind: Kind,
        size: u64,
        perm: u16,
        mtime: SystemTime,
    ) -> Attr {
        let nlink = if kind == Kind::Dir { 2 } else { 1 };
        Attr {
            ino,
            kind,
            size,
            perm,
            nlink,
            mtime,
            uid: self.config.uid,
            gid: self.config.gid,
        }
    }

    /// The read bits a session's files show: those of the file that stores it
    /// (a Harness session is private, 0600: its files show 0400), or fixed by
    /// `-o umask=`. A fork child not yet durable will be stored private.
    fn read_bits(&self, slot: &Slot) -> u16 {
        if let Some(umask) = self.config.umask {
            return 0o444 & !umask;
        }
        let (known, source, pending) = {
            let listed = lock(&slot.listed);
            (listed.read_bits, listed.source.clone(), listed.pending)
        };
        if let Some(bits) = known {
            return bits;
        }
        let bits = match pending {
            true => 0o400,
            false => source
                .backend
                .mode(&source.key)
                .map_or(0o444, |mode| (mode & 0o444) as u16),
        };
        lock(&slot.listed).read_bits = Some(bits);
        bits
    }

    pub(super) fn root_read_bits(&self) -> u16 {
        match self.config.umask {
            Some(umask) => 0o444 & !umask,
            None => self.config.store_read_bits,
        }
    }

    /// Control files: readable as the session is, writable by the owner.
    fn control_perm(&self, read_bits: u16) -> u16 {
        if self.config.read_only.is_some() {
            read_bits
        } else {
            read_bits | 0o200
        }
    }

    /// The attributes of `ino` as they are now.
    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        match Ino::decode(ino).ok_or_else(|| Error::NotFound(format!("unknown inode {ino}")))? {
            Ino::Root => {
                let perm = dir_perm(self.root_read_bits());
                Ok(self.make_attr(ino, Kind::Dir, 0, perm, self.started))
            }
            Ino::RootFlush => {
                let size = self.control_status(Ino::RootFlush)?.len() as u64;
                let perm = self.control_perm(self.root_read_bits());
                Ok(self.make_attr(ino, Kind::File, size, perm, self.started))
            }
            Ino::Lists(entry) => match self.lists_attr(entry) {
                Err(Error::Stale(why)) => self.held_attr(ino).ok_or(Error::Stale(why)),
                attr => attr,
            },
            Ino::Session(number, node) => match self.session_attr(number, node) {
                Err(Error::Stale(why)) => self.held_attr(ino).ok_or(Error::Stale(why)),
                attr => attr,
            },
        }
    }

    fn session_attr(&self, number: u32, node: Node) -> Result<Attr> {
        let slot = self.slot(number)?;
        let ino = Ino::Session(number, node).encode();
        let read_bits = self.read_bits(&slot);
        if node == Node::Dir {
            // A session directory's time is the session's creation: known from the
            // listing alone (listing the root reads no logs), and it never changes
            // while a reader walks the directory (tar checks that).
            let created = lock(&slot.listed).created_at;
            let perm = dir_perm(read_bits);
            return Ok(self.make_attr(ino, Kind::Dir, 0, perm, time_of(created)));
        }
        if matches!(node, Node::Fork | Node::Flush) {
            let mtime = self.with_view(&slot, |view| {
                self.present(&slot, view, node).then(|| view.mtime())
            })?;
            let mtime =
                mtime.ok_or_else(|| Error::NotFound(format!("{} has no such file", slot.name)))?;
            let size = self.control_status(Ino::Session(number, node))?.len() as u64;
            let perm = self.control_perm(read_bits);
            return Ok(self.make_attr(ino, Kind::File, size, perm, mtime));
        }
        if node == Node::Events
            && let Some(last) = self.streamed_events_time(&slot)
        {
            // Shown while the session's first scan runs (`streaming`).
            return Ok(self.make_attr(ino, Kind::Dir, 0, dir_perm(read_bits), time_of(last)));
        }
        if let Node::Transcript(lineage) = node
            && let Some(spilled) = self.spilled(&slot)
            && spilled.lineage as u32 == lineage
        {
            // A dropped view's transcript: sized without reading the log again.
            return Ok(self.make_attr(ino, Kind::File, spilled.size, read_bits, spilled.mtime));
        }
        self.with_view(&slot, |view| {
            if !self.present(&slot, view, node) {
                return Err(Error::NotFound(format!("{} has no such file", slot.name)));
            }
            Self::check_current(&slot, view, node)?;
            let mtime = view.mtime();
            match node {
                Node::Events | Node::Children | Node::Steps | Node::Call(_) => {
                    let time = self.dir_time(&slot, view, node).map_or(mtime, time_of);
                    Ok(self.make_attr(ino, Kind::Dir, 0, dir_perm(read_bits), time))
                }
                Node::Parent | Node::Child(_) => {
                    let target = self.symlink_target(view, node)?;
                    Ok(self.make_attr(ino, Kind::Symlink, target.len() as u64, 0o777, mtime))
                }
                _ => {
                    let which = super::file_id(node)
                        .ok_or_else(|| Error::IsDir("not a regular file".into()))?;
                    let missing = || Error::NotFound(format!("{} has no such file", slot.name));
                    let size = match node.rewritable() {
                        // Rendered anyway to be sized: shown, so a rewrite moves it.
                        Some(_) => {
                            let content = view.file(which).ok_or_else(missing)??;
                            self.shown(&slot, node, content)?.bytes.len() as u64
                        }
                        // An event's size is kept from the scan: nothing is rendered.
                        None => view.file_size(which).ok_or_else(missing)??,
                    };
                    let mtime = match node {
                        Node::Event(seq) => view
                            .indexed()
                            .and_then(|i| i.event_time(seq))
                            .map_or(mtime, time_of),
                        _ => mtime,
                    };
                    Ok(self.make_attr(ino, Kind::File, size, read_bits, mtime))
                }
            }
        })?
    }

    /// A directory's time: that of the last change to its entries, so a
    /// directory whose entries did not change keeps its time while the log
    /// grows (tar checks that). `events/` moves with every event; `children/`
    /// with its newest child, `steps/` with its last model call, a call's
    /// directory with its call; the session's creation while they are empty.
    fn dir_time(&self, slot: &Slot, view: &SessionView, node: Node) -> Option<i64> {
        let created = || lock(&slot.listed).created_at;
        let indexed = view.indexed();
        let call_time = |call: usize| {
            let indexed = indexed?;
            indexed.event_time(indexed.call(call)?.boundary_seq)
        };
        match node {
            Node::Events => None,
            Node::Children => Some(
                self.sessions
                    .children_of(&slot.id)
                    .into_iter()
                    .filter_map(|child| self.slot(child).ok())
                    .map(|child| lock(&child.listed).created_at)
                    .max()
                    .unwrap_or_else(created),
            ),
            Node::Steps => {
                let calls = indexed.map_or(0, |i| i.call_count());
                Some(match calls {
                    0 => created(),
                    n => call_time(n - 1).unwrap_or_else(created),
                })
            }
            Node::Call(call) => call_time(call as usize),
            _ => None,
        }
    }

    /// Whether a node exists in this session's directory.
    pub(super) fn present(&self, slot: &Slot, view: &SessionView, node: Node) -> bool {
        let readable = view.indexed().is_some();
        match node {
            Node::Dir | Node::Children | Node::Flush | Node::Status(_) => true,
            Node::Header(_) => view.header().is_some(),
            Node::Events | Node::Surface(_) | Node::Transcript(_) | Node::Index(_) | Node::Fork => {
                readable
            }
            Node::Error => !readable,
            Node::Parent => view
                .header()
                .and_then(|h| h.parent_session.as_ref())
                .is_some(),
            Node::Event(seq) => seq < view.event_count(),
            Node::Child(child) => self.sessions.is_child(&slot.id, child),
            Node::Steps | Node::Call(_) | Node::CallFile(..) => {
                Self::steps_node_present(view, node)
            }
        }
    }

    pub(super) fn symlink_target(&self, view: &SessionView, node: Node) -> Result<String> {
        match node {
            Node::Parent => {
                let parent = view
                    .header()
                    .and_then(|h| h.parent_session.clone())
                    .ok_or_else(|| Error::NotFound("no parent".into()))?;
                Ok(format!("../{}", mount_name(&parent)))
            }
            Node::Child(child) => Ok(format!("../../{}", self.slot(child)?.name)),
            _ => Err(Error::Invalid("not a symlink".into())),
        }
    }

    /// The target of a `parent` or `children/` link.
    pub fn readlink(&self, ino: u64) -> Result<String> {
        match Ino::decode(ino) {
            Some(Ino::Lists(Lists::Link(number))) => {
                self.lists_attr(Lists::Link(number))?;
                return Ok(Self::link_target(&self.slot(number)?.name));
            }
            Some(Ino::Lists(entry @ (Lists::Latest | Lists::ProjectLatest(_)))) => {
                return Ok(self.latest_target(entry)?.1);
            }
            _ => {}
        }
        let Some(Ino::Session(number, node @ (Node::Parent | Node::Child(_)))) = Ino::decode(ino)
        else {
            return Err(Error::Invalid("not a symlink".into()));
        };
        let slot = self.slot(number)?;
        self.with_view(&slot, |view| self.symlink_target(view, node))?
    }
}
