//! `transcript.md` through the kernel's page cache.
//!
//! The transcript is the largest file of a session and only ever grows while
//! its log does, so unlike the rewritable views it can be served through the
//! page cache: warm reads never reach the daemon, and `mmap` works as on any
//! file system. Each lineage of the transcript is its own inode (see
//! [`super::inode`]), so within one inode bytes are only appended and the
//! kernel's one size per inode never disagrees with a descriptor's snapshot.
//!
//! When the cache drops a session's view, its transcript is *spilled*: the
//! bytes are handed to the kernel's page cache (`FUSE_NOTIFY_STORE`, sent by a
//! thread of the adapter, never from inside a request) and the slot keeps what
//! `stat` needs, valid while the stored log is unchanged. A glob that sizes
//! every transcript followed by a `grep` over them then reads each session
//! once, while the daemon holds no more than its cache budget; the kernel
//! reclaims spilled pages under memory pressure, and a read of a reclaimed
//! page reads the session again.

use std::sync::Mutex;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::SystemTime;

use super::SessionFs;
use super::inode::{Ino, Node};
use super::table::Slot;
use crate::bytes::Bytes;
use crate::store::Revision;
use crate::sync::lock;
use crate::view::SessionView;

/// What `stat` needs of a dropped view's transcript.
#[derive(Clone, Debug)]
pub(super) struct Spilled {
    revision: Revision,
    pub lineage: u64,
    pub size: u64,
    pub mtime: SystemTime,
}

/// Bytes for the kernel's page cache of one inode, from offset 0.
pub struct Spill {
    /// The transcript's inode.
    pub ino: u64,
    /// Its bytes from offset 0.
    pub bytes: Bytes,
}

/// Spills waiting for the adapter's thread. Bounded: when the kernel is slow to
/// take them, a spill is skipped (its reader reads the session again) rather
/// than held in the daemon's memory.
const SPILLS_QUEUED: usize = 8;

#[derive(Default)]
pub(super) struct Spills {
    sender: Mutex<Option<SyncSender<Spill>>>,
}

impl Spills {
    fn send(&self, spill: Spill) {
        let sender = lock(&self.sender).clone();
        if let Some(sender) = sender {
            match sender.try_send(spill) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => log::debug!("spill queue full: skipped"),
                Err(TrySendError::Disconnected(_)) => *lock(&self.sender) = None,
            }
        }
    }
}

/// The inode of a session's transcript in `lineage`.
pub(super) fn transcript_ino(number: u32, lineage: u64) -> u64 {
    Ino::Session(number, Node::Transcript(lineage as u32)).encode()
}

impl SessionFs {
    /// Transcripts to hand to the kernel's page cache, for the adapter's thread
    /// that holds the kernel connection. Without a receiver nothing is sent.
    pub fn spill_receiver(&self) -> Receiver<Spill> {
        let (sender, receiver) = sync_channel(SPILLS_QUEUED);
        *lock(&self.spills.sender) = Some(sender);
        receiver
    }

    /// Called with the view of `slot` locked, just before it is dropped.
    pub(super) fn spill(&self, slot: &Slot, view: &SessionView) {
        let Some(spilled) = view.spill_transcript() else {
            return;
        };
        *lock(&slot.spilled) = Some(Box::new(Spilled {
            revision: spilled.revision,
            lineage: spilled.lineage,
            size: spilled.bytes.len() as u64,
            mtime: spilled.mtime,
        }));
        if !spilled.bytes.is_empty() {
            self.spills.send(Spill {
                ino: transcript_ino(slot.number, spilled.lineage),
                bytes: spilled.bytes,
            });
        }
    }

    /// The spilled transcript of a session whose view is not loaded, while the
    /// stored log is unchanged since (a `stat` of the store, or one row).
    pub(super) fn spilled(&self, slot: &Slot) -> Option<Spilled> {
        let record = lock(&slot.spilled).as_deref().cloned()?;
        let loaded = slot.view.try_lock().map_or(true, |view| view.is_some());
        if loaded {
            return None;
        }
        let source = lock(&slot.listed).source.clone();
        if source.revision().ok().as_ref() != Some(&record.revision) {
            *lock(&slot.spilled) = None;
            return None;
        }
        Some(record)
    }
}
