//! The loaded views: one [`SessionView`] per session in use, loaded on first
//! use, brought up to date when a request finds it older than it may be, and
//! dropped least recently used first when the cache is over budget, its
//! transcript spilled to the kernel's page cache ([`super::paged`]). A watch
//! of a session's directory is added when its view is loaded and removed when
//! it is dropped ([`Follow`]), so following costs what the sessions in use
//! cost.
//!
//! Views meet the session table only at slot numbers: whoever asks for a view
//! says how to open it ([`Opening`]), and nothing here reads the table.
//!
//! Lock order: one view lock (a [`ViewSlot`]'s `view`) at a time, awaited
//! with no other lock held; eviction only `try_lock`s another view. Under a
//! view lock only leaves are taken: the slot's `spilled`, `progress` and
//! `checked`, `lru`, `stale`, `slots`, the spill queue and the follow state,
//! each held briefly and never while taking another.

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use super::cache::Lru;
use super::follow::{Follow, Watched};
use super::inode::{Rewritable, session_inodes};
use super::paged::{Spill, Spilled, Spills, transcript_ino};
use super::shown::Shown;
use crate::bytes::Bytes;
use crate::error::{Error, Result};
use crate::sync::lock;
use crate::view::{Refused, SavedScans, ScanProgress, SessionSource, SessionView, State};

/// One session's place in the cache.
#[derive(Default)]
struct ViewSlot {
    /// The view, when loaded: held while it is loaded, refreshed or rendered.
    view: Mutex<Option<Box<SessionView>>>,
    /// What `stat` needs of the transcript of a dropped view.
    spilled: Mutex<Option<Box<Spilled>>>,
    /// Event names published by the first scan while it runs.
    progress: Mutex<Option<Arc<ScanProgress>>>,
    /// When the view was last brought up to date with the store.
    checked: Mutex<Option<Instant>>,
    /// What was last shown of each rewritable file, kept while the session
    /// is mounted so its generations never go back.
    shown: Mutex<[Shown; 4]>,
}

/// How to open a session's view, from what the table knows of it.
pub(super) struct Opening {
    /// Where it is read from.
    pub source: SessionSource,
    /// Why it must not be read, when the table already knows.
    pub refused: Option<Refused>,
    /// What follows it while it is loaded; `None` for a session not in the
    /// store yet (a fork child not yet durable).
    pub watch: Option<Watched>,
}

/// A loaded view could not be had without waiting.
pub(super) struct Busy;

/// The loaded views and what they cost.
pub(super) struct Views {
    /// By slot number; an entry is made at the slot's first use and kept, so
    /// a view lock is always the same lock.
    slots: RwLock<Vec<Option<Arc<ViewSlot>>>>,
    lru: Mutex<Lru>,
    /// The bytes loaded views may hold together.
    budget: usize,
    /// How long an open turn may be quiet before it is shown repaired.
    grace: Duration,
    spills: Spills,
    /// Inodes whose content changed while a request refreshed them; the kernel
    /// is told to drop its caches of them by the follow thread, never from
    /// inside a request (that can deadlock).
    stale: Mutex<Vec<u64>>,
    follow: Follow,
    /// Where views save their scans for the next mount.
    saved_scans: Option<Arc<dyn SavedScans>>,
}

impl Views {
    /// No view loaded yet.
    pub fn new(
        follow: Follow,
        budget: usize,
        grace: Duration,
        saved_scans: Option<Arc<dyn SavedScans>>,
    ) -> Views {
        Views {
            slots: RwLock::default(),
            lru: Mutex::default(),
            budget,
            grace,
            spills: Spills::default(),
            stale: Mutex::default(),
            follow,
            saved_scans,
        }
    }

    /// What follows the store for the loaded views.
    pub fn follow(&self) -> &Follow {
        &self.follow
    }

    fn slot(&self, number: u32) -> Arc<ViewSlot> {
        let index = number as usize;
        if let Some(Some(slot)) = crate::sync::read(&self.slots).get(index) {
            return slot.clone();
        }
        let mut slots = crate::sync::write(&self.slots);
        if slots.len() <= index {
            slots.resize(index + 1, None);
        }
        slots[index].get_or_insert_with(Default::default).clone()
    }

    /// Runs `f` on the view of session `number` (id `id`), opening it as
    /// `open` says when it is not loaded, and bringing it up to date with the
    /// store first when it was last checked `max_age` ago or longer.
    pub fn with_view<T>(
        &self,
        number: u32,
        id: &str,
        max_age: Duration,
        open: impl FnOnce() -> Opening,
        f: impl FnOnce(&mut SessionView) -> T,
    ) -> Result<T> {
        let slot = self.slot(number);
        let mut guard = lock(&slot.view);
        match guard.as_mut() {
            None => {
                let opening = open();
                // Names are published while the scan runs (`streaming`); waiters
                // are released however the build ends.
                let progress = lock(&slot.progress)
                    .get_or_insert_with(Default::default)
                    .clone();
                let finished = FinishOnDrop(progress.clone());
                let view = SessionView::open(
                    opening.source,
                    id,
                    opening.refused,
                    self.grace,
                    Some(&progress),
                    self.saved_scans.clone(),
                );
                drop(finished);
                *lock(&slot.progress) = None;
                if let State::Unreadable(unreadable) = view.state() {
                    let reason = unreadable.reason.message();
                    log::warn!("session {id:?} cannot be read: {reason}");
                }
                *guard = Some(Box::new(view));
                *lock(&slot.spilled) = None;
                *lock(&slot.checked) = Some(Instant::now());
                self.follow.watch_session(number, opening.watch);
            }
            Some(view) => {
                let mut checked = lock(&slot.checked);
                if checked.is_none_or(|at| at.elapsed() >= max_age) {
                    *checked = Some(Instant::now());
                    drop(checked);
                    if view.refresh() {
                        let generations = self.generations(number);
                        lock(&self.stale).extend(session_inodes(number, view, generations));
                    }
                }
            }
        }
        let view = guard
            .as_mut()
            .ok_or_else(|| Error::NotFound("session vanished".into()))?;
        let result = f(view);
        let memory = view.memory();
        drop(guard);
        self.note_use(number, memory);
        Ok(result)
    }

    /// Records a use of a session's view and drops the least recently used
    /// others while the cache is over budget. O(1) per view dropped.
    fn note_use(&self, number: u32, memory: usize) {
        lock(&self.lru).record(number, memory);
        self.drop_beyond(self.budget_left(), number);
    }

    /// The bytes views may hold now: the budget less the scans queued to be
    /// saved, which are copies of views' contents held until written.
    fn budget_left(&self) -> usize {
        let queued = self.saved_scans.as_ref().map_or(0, |s| s.queued_bytes());
        self.budget.saturating_sub(queued)
    }

    /// Drops the least recently used views other than `keep` while the views
    /// hold more than `budget`.
    fn drop_beyond(&self, budget: usize, keep: u32) {
        // Views in use right now are put back as newest; each is tried once.
        let mut tries = lock(&self.lru).len();
        while tries > 0 {
            tries -= 1;
            let Some((victim, bytes)) = lock(&self.lru).pop_victim(budget, keep) else {
                break;
            };
            let slot = self.slot(victim);
            match slot.view.try_lock() {
                Ok(mut view) => {
                    if let Some(mut dropped) = view.take() {
                        dropped.save_unsaved();
                        self.spill(victim, &slot, &dropped);
                        lock(&slot.shown).iter_mut().for_each(Shown::let_go);
                    }
                    self.follow.unwatch_session(victim);
                }
                Err(_) => lock(&self.lru).record(victim, bytes),
            }
        }
    }

    /// Keeps what `stat` needs of a dropped view's transcript, and hands its
    /// bytes to the kernel's page cache.
    fn spill(&self, number: u32, slot: &ViewSlot, view: &SessionView) {
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
                ino: transcript_ino(number, spilled.lineage),
                bytes: spilled.bytes,
            });
        }
    }

    /// The spilled transcript of session `number` while its view is dropped
    /// and its stored log (read from `source`) is unchanged since.
    pub fn spilled(&self, number: u32, source: impl FnOnce() -> SessionSource) -> Option<Spilled> {
        let slot = self.slot(number);
        let record = lock(&slot.spilled).as_deref().cloned()?;
        let loaded = slot.view.try_lock().map_or(true, |view| view.is_some());
        if loaded {
            return None;
        }
        if source().revision().ok().as_ref() != Some(&record.revision) {
            *lock(&slot.spilled) = None;
            return None;
        }
        Some(record)
    }

    /// Drops the view of session `number` after running `change` under its
    /// lock, so no reader pairs the old view with what `change` replaced (the
    /// artifact it is read from).
    pub fn replace(&self, number: u32, change: impl FnOnce()) {
        let slot = self.slot(number);
        let mut view = lock(&slot.view);
        change();
        *view = None;
        lock(&slot.shown).iter_mut().for_each(Shown::let_go);
        drop(view);
        lock(&self.lru).remove(number);
        self.follow.unwatch_session(number);
    }

    /// Saves every loaded view's scan that went on past what was saved of it,
    /// as the mount ends. Each view is waited for.
    pub fn save_unsaved(&self) {
        let slots: Vec<Arc<ViewSlot>> = crate::sync::read(&self.slots)
            .iter()
            .flatten()
            .cloned()
            .collect();
        for slot in slots {
            if let Some(view) = lock(&slot.view).as_mut() {
                view.save_unsaved();
            }
        }
    }

    /// Session `number` left the store: it is no longer followed.
    pub fn forget(&self, number: u32) {
        self.follow.unwatch_session(number);
    }

    /// Runs `f` on the loaded view of session `number`, brought up to date by
    /// `f`, without waiting: `Err(Busy)` when a request holds it, `Ok(None)`
    /// when it is not loaded.
    pub fn refresh_loaded<T>(
        &self,
        number: u32,
        f: impl FnOnce(&mut SessionView) -> T,
    ) -> std::result::Result<Option<T>, Busy> {
        let slot = self.slot(number);
        let Ok(mut guard) = slot.view.try_lock() else {
            return Err(Busy);
        };
        let Some(view) = guard.as_mut() else {
            return Ok(None);
        };
        *lock(&slot.checked) = Some(Instant::now());
        Ok(Some(f(view)))
    }

    /// True when session `number`'s view is neither loaded nor held (by a
    /// build or a refresh) now.
    pub fn is_unloaded(&self, number: u32) -> bool {
        let slot = self.slot(number);
        slot.view.try_lock().is_ok_and(|view| view.is_none())
    }

    /// Makes room for one more view the size of the reader's (the largest
    /// loaded of `reader`, its session first), dropping least recently used
    /// views but never the reader's: a view built ahead then costs no memory
    /// beyond the budget. False, with nothing dropped, when the budget does
    /// not hold two views that size or none of `reader` is loaded.
    pub fn make_room_like(&self, reader: &[u32]) -> bool {
        let largest = {
            let lru = lock(&self.lru);
            reader.iter().filter_map(|&n| lru.bytes_of(n)).max()
        };
        let budget = self.budget_left();
        let Some(bytes) = largest.filter(|bytes| bytes.saturating_mul(2) <= budget) else {
            return false;
        };
        self.drop_beyond(budget - bytes, reader[0]);
        true
    }

    /// True when session `number`'s view is loaded and free now.
    pub fn is_loaded(&self, number: u32) -> bool {
        let slot = self.slot(number);
        slot.view.try_lock().is_ok_and(|view| view.is_some())
    }

    /// The published names of session `number`'s first scan, when one runs or
    /// should start: `None` when the view is loaded (or busy being refreshed),
    /// and `Some((progress, true))` when the caller must start the scan.
    pub fn scan_progress(&self, number: u32) -> Option<(Arc<ScanProgress>, bool)> {
        let slot = self.slot(number);
        let view = match slot.view.try_lock() {
            Ok(view) => view,
            // Held: by a first build (which published its progress) or a refresh.
            Err(_) => return lock(&slot.progress).clone().map(|p| (p, false)),
        };
        if view.is_some() {
            return None;
        }
        drop(view);
        let progress = lock(&slot.progress)
            .get_or_insert_with(Default::default)
            .clone();
        Some((progress, true))
    }

    /// True while session `number`'s first scan runs.
    pub fn is_scanning(&self, number: u32) -> bool {
        lock(&self.slot(number).progress).is_some()
    }

    /// Takes `bytes` as what session `number`'s `file` shows now, and returns
    /// the generation (the inode) that shows it: the same while each version
    /// extends the last one shown, the next when one does not.
    pub fn observe(&self, number: u32, file: Rewritable, bytes: &Bytes) -> u32 {
        lock(&self.slot(number).shown)[file.index()].observe(bytes)
    }

    /// The generations of session `number`'s rewritable files as last shown.
    pub fn generations(&self, number: u32) -> [u32; 4] {
        let slot = self.slot(number);
        let shown = lock(&slot.shown);
        Rewritable::ALL.map(|file| shown[file.index()].generation())
    }

    /// Inodes found changed by requests since the last call.
    pub fn take_stale(&self) -> Vec<u64> {
        std::mem::take(&mut *lock(&self.stale))
    }

    /// The sessions whose views are loaded.
    pub fn loaded(&self) -> Vec<u32> {
        lock(&self.lru).slots()
    }

    /// Loaded views and the bytes they hold, as the cache counts them.
    pub fn usage(&self) -> (usize, usize) {
        let lru = lock(&self.lru);
        (lru.len(), lru.total())
    }

    /// The spilled transcripts, for the thread that hands them to the kernel.
    pub fn spill_receiver(&self) -> std::sync::mpsc::Receiver<Spill> {
        self.spills.receiver()
    }
}

/// Releases a scan's waiters however the build ends (a panic included).
struct FinishOnDrop(Arc<ScanProgress>);

impl Drop for FinishOnDrop {
    fn drop(&mut self) {
        self.0.finish();
    }
}
