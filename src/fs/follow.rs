//! Following the store while mounted: which sessions changed, found by inotify
//! where it works and by polling where it cannot.
//!
//! Watched: the store's own directories (JSONL: the root and each project
//! directory; SQLite: the database's directory, whose database and WAL hold
//! every session) and, for JSONL, the directory of each session whose view is
//! loaded: a watch is added when a view is loaded and removed when it is
//! dropped, so watches cost what the sessions in use cost. An idle mount
//! sleeps until the kernel reports a change.
//!
//! Polled instead, every [`POLL_EVERY`]: every loaded view when the store
//! cannot be watched (`-o poll`, a network or FUSE filesystem, no inotify),
//! or only those whose watch could not be added (the watch limit reached).
//! Either way the cost is that of the sessions in use, never of the store.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::SessionFs;
use super::names::mount_name;
use super::table::Slot;
use crate::model::ids::decode_segment;
use crate::store::Backend;
use crate::store::watch::Watcher;
use crate::sync::lock;

/// How often polled sessions are checked.
pub const POLL_EVERY: Duration = Duration::from_millis(500);

/// How long the follow thread sleeps at most when nothing is polled: inodes a
/// request found changed are passed on to the kernel at the latest then.
const IDLE_WAKE: Duration = Duration::from_secs(1);

/// What the kernel must be told after a round of following.
#[derive(Debug, Default)]
pub struct Changes {
    /// Inodes whose content changed: their cached pages and attributes go.
    pub inodes: Vec<u64>,
    /// Names in the root that no longer lead where they did: their cached
    /// lookups go.
    pub root_names: Vec<String>,
    /// Names in a directory (its inode, the name) that appeared or went, as
    /// when a session's log became readable again: their cached lookups go.
    pub names: Vec<(u64, String)>,
}

#[derive(Default)]
struct Watches {
    /// Watches of the store's directories.
    dirs: HashSet<i32>,
    /// Watches of session directories, and the slots each serves.
    sessions: HashMap<i32, Vec<u32>>,
    of_slot: HashMap<u32, i32>,
    /// Loaded sessions that have no watch and are polled.
    polled: HashSet<u32>,
    /// Sessions a round could not refresh (a request held the view).
    retry: HashSet<u32>,
    last_poll: Option<Instant>,
}

/// The follow state: a leaf lock, never held while taking another lock.
pub(super) struct Follow {
    /// `None`: the store is polled.
    watcher: Option<Watcher>,
    watches: Mutex<Watches>,
}

impl Follow {
    pub fn new(store: &dyn Backend, force_poll: bool) -> Follow {
        let dirs = store.watch_dirs();
        let why_not = if force_poll {
            Some("-o poll".to_string())
        } else if dirs.is_empty() {
            Some("the store has no directories to watch".into())
        } else if dirs.iter().any(|d| crate::store::watch::is_remote(d)) {
            Some("the store is on a network or FUSE filesystem".into())
        } else {
            None
        };
        let watcher = match why_not {
            Some(why) => {
                log::info!("polling used sessions every {POLL_EVERY:?}: {why}");
                None
            }
            None => match Watcher::new() {
                Ok(watcher) => Some(watcher),
                Err(e) => {
                    log::warn!("inotify is not available ({e}); polling used sessions instead");
                    None
                }
            },
        };
        let follow = Follow {
            watcher,
            watches: Mutex::default(),
        };
        follow.watch_dirs(store);
        follow
    }

    /// Watches the store's directories (again: a new project directory).
    fn watch_dirs(&self, store: &dyn Backend) {
        let Some(watcher) = &self.watcher else { return };
        let mut watches = lock(&self.watches);
        for dir in store.watch_dirs() {
            match watcher.watch(&dir) {
                Ok(wd) => {
                    watches.dirs.insert(wd);
                }
                Err(e) => log::warn!(
                    "cannot watch {} ({e}); sessions it adds show at the next listing",
                    dir.display()
                ),
            }
        }
    }

    /// A session's view was loaded: watch its directory, or poll it.
    pub fn watch_session(&self, store: &dyn Backend, slot: &Slot) {
        let key = {
            let listed = lock(&slot.listed);
            if listed.pending {
                return;
            }
            listed.source.key.clone()
        };
        let dir = store.session_dir(&key);
        let mut watches = lock(&self.watches);
        Self::forget(&mut watches, self.watcher.as_ref(), slot.number);
        let Some(watcher) = &self.watcher else {
            watches.polled.insert(slot.number);
            return;
        };
        // Covered by the store's own directories (SQLite).
        let Some(dir) = dir else { return };
        match watcher.watch(&dir) {
            Ok(wd) => {
                watches.sessions.entry(wd).or_default().push(slot.number);
                watches.of_slot.insert(slot.number, wd);
            }
            Err(e) => {
                log::info!(
                    "cannot watch {} ({e}); polling it every {POLL_EVERY:?}",
                    dir.display()
                );
                watches.polled.insert(slot.number);
            }
        }
    }

    /// A session's view was dropped: stop watching or polling it.
    pub fn unwatch_session(&self, number: u32) {
        Self::forget(&mut lock(&self.watches), self.watcher.as_ref(), number);
    }

    fn forget(watches: &mut Watches, watcher: Option<&Watcher>, number: u32) {
        watches.polled.remove(&number);
        watches.retry.remove(&number);
        let Some(wd) = watches.of_slot.remove(&number) else {
            return;
        };
        let slots = watches.sessions.entry(wd).or_default();
        slots.retain(|&s| s != number);
        if slots.is_empty() {
            watches.sessions.remove(&wd);
            if let Some(watcher) = watcher {
                watcher.unwatch(wd);
            }
        }
    }
}

impl SessionFs {
    /// One round of following: waits until the store reports a change (at
    /// most a second, less while sessions are polled), brings the views it
    /// concerns up to date and returns what the kernel must forget.
    pub fn follow_changes(&self) -> Changes {
        let polling = self.follow.watcher.is_none() || self.config.repair;
        let (wait, retry) = {
            let watches = lock(&self.follow.watches);
            let wait = if !watches.retry.is_empty() {
                Duration::from_millis(100)
            } else if polling || !watches.polled.is_empty() {
                POLL_EVERY
            } else {
                IDLE_WAKE
            };
            (wait, watches.retry.clone())
        };
        let events = match &self.follow.watcher {
            Some(watcher) => watcher.wait(wait),
            None => {
                std::thread::sleep(wait);
                Vec::new()
            }
        };
        let mut due: HashSet<u32> = retry;
        let mut everything = false;
        let mut root_events = Vec::new();
        {
            let mut watches = lock(&self.follow.watches);
            for event in events {
                if event.overflow {
                    everything = true;
                } else if watches.dirs.contains(&event.watch) {
                    if self.store.is_data_change(&event.name) {
                        everything = true;
                    } else {
                        root_events.push(event.name);
                    }
                } else if let Some(slots) = watches.sessions.get(&event.watch) {
                    due.extend(slots.iter().copied());
                }
            }
            let poll_due = watches
                .last_poll
                .is_none_or(|at| at.elapsed() >= POLL_EVERY);
            if poll_due && (polling || !watches.polled.is_empty()) {
                watches.last_poll = Some(Instant::now());
                match polling {
                    true => everything = true,
                    false => due.extend(watches.polled.iter().copied()),
                }
            }
            watches.retry.clear();
        }
        let mut changes = Changes {
            inodes: std::mem::take(&mut *lock(&self.stale)),
            // Sessions a listing found removed.
            root_names: self.take_removed(),
            names: Vec::new(),
        };
        if !root_events.is_empty() {
            self.store_dirs_changed(&root_events, &mut due, &mut changes);
        }
        if everything {
            due.extend(lock(&self.lru).slots());
        }
        for number in due {
            self.refresh_loaded(number, &mut changes);
        }
        changes
    }

    /// Sessions may have been added to or removed from the store: the next
    /// listing asks the store, and a session whose directory went is checked
    /// at once, so it leaves the listing and its name leads nowhere.
    fn store_dirs_changed(&self, names: &[String], due: &mut HashSet<u32>, changes: &mut Changes) {
        self.forget_listing_age();
        // A new project directory is watched from now on.
        self.follow.watch_dirs(self.store.as_ref());
        let mut seen = HashSet::new();
        for name in names {
            if !seen.insert(name) {
                continue;
            }
            let Some(id) = decode_segment(name) else {
                continue;
            };
            let Some(shown) = mount_name(&id) else {
                continue;
            };
            let Some(number) = self.slot_by_name(&shown) else {
                continue;
            };
            let Ok(slot) = self.slot(number) else {
                continue;
            };
            if lock(&slot.listed).pending {
                continue;
            }
            if self.store.find(&id).is_empty() {
                log::info!("session {id:?} was removed from the store");
                self.table_mut().remove(number);
                self.follow.unwatch_session(number);
                changes.root_names.push(shown);
            } else if slot.view.try_lock().is_ok_and(|view| view.is_some()) {
                // Its directory may have been made anew: watch that one.
                self.follow.watch_session(self.store.as_ref(), &slot);
                due.insert(number);
            }
        }
    }

    /// Brings one loaded view up to date; a view in use by a request is
    /// retried next round.
    fn refresh_loaded(&self, number: u32, changes: &mut Changes) {
        let Some(slot) = self.table().get(number) else {
            return;
        };
        if lock(&slot.refusal).is_some() || slot.is_gone() {
            return;
        }
        let Ok(mut guard) = slot.view.try_lock() else {
            lock(&self.follow.watches).retry.insert(number);
            return;
        };
        let Some(view) = guard.as_mut() else { return };
        *lock(&slot.checked) = Instant::now();
        let was_readable = view.indexed().is_some();
        let mut refreshed = view.refresh();
        if self.config.repair && !lock(&slot.listed).pending {
            refreshed |= self.repair(&slot, view);
        }
        if refreshed {
            changes.inodes.extend(Self::session_inodes(number, view));
        }
        if view.indexed().is_some() != was_readable {
            // `error` and the views swap places: cached names would lie.
            changes.names.extend(Self::session_names(number));
        }
    }
}
