//! `events/` listed while its session is still being read.
//!
//! The first scan of a session publishes its event names as it goes
//! ([`ScanProgress`]). When `events/` of a session that is not loaded is looked
//! up or listed, the session is built on a thread of its own, and the listing
//! is answered from the published names, batch by batch, while the scan runs:
//! `ls events | head` of a session of a million events answers in the time of
//! its first batch. The entry past the last published name, and every listing
//! once the scan has ended, come from the built view as before (synthetic
//! closers included).
//!
//! `events/` is shown once the scan has read its first batch cleanly. A log
//! found damaged further on is then shown as unreadable, as before: `events/`
//! goes and `error` takes its place.

use std::sync::Arc;

use super::inode::{Ino, Node};
use super::sessions::Slot;
use super::{DirEntry, Kind, SessionFs};
use crate::sync::lock;
use crate::view::ScanProgress;

impl SessionFs {
    /// The published names of a session whose first scan is running, starting
    /// that scan on a thread of its own when the session is not loaded. `None`
    /// when the view is loaded (or busy otherwise): the caller uses the view.
    pub(super) fn streaming(&self, slot: &Arc<Slot>) -> Option<Arc<ScanProgress>> {
        if lock(&slot.refusal).is_some() {
            return None;
        }
        let (progress, start) = self.views.scan_progress(slot.number)?;
        if !start {
            return Some(progress);
        }
        let build = {
            let fs = self.this.upgrade();
            let slot = slot.clone();
            move || {
                if let Some(fs) = fs {
                    let _ = fs.with_view(&slot, |_| ());
                }
            }
        };
        if let Err(e) = std::thread::Builder::new()
            .name("build".into())
            .spawn(build)
        {
            log::warn!("cannot start a thread to read {:?}: {e}", slot.id);
            progress.finish();
            return None;
        }
        Some(progress)
    }

    /// Entries of `events/` from `offset` while the session's first scan runs:
    /// `None` when the built view must answer.
    pub(super) fn streamed_events(
        &self,
        slot: &Arc<Slot>,
        offset: u64,
        limit: usize,
    ) -> Option<Vec<DirEntry>> {
        let names = self.streaming(slot)?.names(offset, limit)?;
        Some(
            names
                .into_iter()
                .map(|(seq, name)| DirEntry {
                    ino: Ino::Session(slot.number, Node::Event(seq)).encode(),
                    kind: Kind::File,
                    name,
                    next: seq + 1,
                })
                .collect(),
        )
    }

    /// The time of the last event scanned so far when `events/` can be shown
    /// before its session's first scan ends; `None` when the view answers.
    pub(super) fn streamed_events_time(&self, slot: &Arc<Slot>) -> Option<i64> {
        self.streaming(slot)?.started()
    }

    /// True while the session of `ino` is in its first scan: an event's size
    /// then waits for the scan, so `readdirplus` gives no attributes for it.
    pub(super) fn is_building(&self, ino: u64) -> bool {
        let Some(Ino::Session(number, Node::Event(_))) = Ino::decode(ino) else {
            return false;
        };
        self.views.is_scanning(number)
    }
}
