//! The threads that tell the kernel what changed behind its caches, through
//! fuser's `Notifier`. They run apart from every request: libfuse warns that a
//! notification sent from inside a related request can deadlock, as the
//! kernel may wait on a page or a name that request holds.

use std::ffi::OsStr;
use std::io;
use std::sync::Arc;

use fuser::{INodeNo, Notifier};

use crate::fs::SessionFs;
use crate::fs::inode::ROOT;
use crate::fs::paged::Spill;

/// Starts the notifier threads of one mount: `spill` hands transcripts of
/// dropped views to the page cache, `follow` follows the store and drops what
/// the kernel cached of files that changed and of names that went. Both end
/// once the filesystem is gone.
pub fn start(fs: &Arc<SessionFs>, notifier: Notifier) -> io::Result<()> {
    let spills = fs.spill_receiver();
    let spill_notifier = notifier.clone();
    std::thread::Builder::new()
        .name("spill".into())
        .spawn(move || {
            for spill in spills {
                store_pages(&spill_notifier, &spill);
            }
        })?;
    let watched = Arc::downgrade(fs);
    std::thread::Builder::new()
        .name("follow".into())
        .spawn(move || {
            // Each round waits for changes (inotify, or polling where it cannot
            // work), so changes show within a second.
            while let Some(fs) = watched.upgrade() {
                let changes = fs.follow_changes();
                drop(fs);
                for ino in changes.inodes {
                    let _ = notifier.inval_inode(INodeNo(ino), 0, -1);
                }
                for name in changes.root_names {
                    let _ = notifier.inval_entry(INodeNo(ROOT), OsStr::new(&name));
                }
                for (dir, name) in changes.names {
                    let _ = notifier.inval_entry(INodeNo(dir), OsStr::new(&name));
                }
            }
        })?;
    Ok(())
}

/// Hands a spilled transcript to the kernel's page cache, segment by segment
/// and at most 1 MiB at a time, so nothing is copied to send it.
/// An inode the kernel no longer knows is refused (ENOENT): nothing to keep.
fn store_pages(notifier: &Notifier, spill: &Spill) {
    const PIECE: usize = 1 << 20;
    let mut offset = 0u64;
    for piece in spill
        .bytes
        .pieces()
        .flat_map(|segment| segment.chunks(PIECE))
    {
        if let Err(e) = notifier.store(INodeNo(spill.ino), offset, piece) {
            log::debug!("page cache of inode {} not filled: {e}", spill.ino);
            return;
        }
        offset += piece.len() as u64;
    }
}
