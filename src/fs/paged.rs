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
//! thread of the adapter, never from inside a request) and the view's slot keeps what
//! `stat` needs, valid while the stored log is unchanged. A glob that sizes
//! every transcript followed by a `grep` over them then reads each session
//! once, while the daemon holds no more than its cache budget; the kernel
//! reclaims spilled pages under memory pressure, and a read of a reclaimed
//! page reads the session again.

use std::sync::Mutex;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::SystemTime;

use super::inode::{Ino, Node};
use crate::bytes::Bytes;
use crate::store::Revision;
use crate::sync::lock;

/// What `stat` needs of a dropped view's transcript.
#[derive(Clone, Debug)]
pub(super) struct Spilled {
    /// The stored log's revision when the view was dropped.
    pub revision: Revision,
    /// The transcript's lineage then.
    pub lineage: u64,
    /// Its size.
    pub size: u64,
    /// Its modification time.
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
    /// A new queue for the adapter's thread; spills sent before are dropped.
    pub fn receiver(&self) -> Receiver<Spill> {
        let (sender, receiver) = sync_channel(SPILLS_QUEUED);
        *lock(&self.sender) = Some(sender);
        receiver
    }

    /// Queues a spill, or skips it when the queue is full.
    pub fn send(&self, spill: Spill) {
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
