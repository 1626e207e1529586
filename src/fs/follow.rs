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
//!
//! For `latest` alone, the directories of up to [`WRITES_WATCHED`] JSONL
//! sessions written recently are watched too, the oldest watch given up
//! first: a write to one that no one uses moves `latest` at once. A session
//! quiet for longer is seen written at the next listing.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::store::Backend;
use crate::store::watch::Watcher;
use crate::sync::lock;

/// The most session directories watched only so that a write to a session
/// not in use moves `latest`.
pub const WRITES_WATCHED: usize = 1024;

/// How often polled sessions are checked.
pub const POLL_EVERY: Duration = Duration::from_millis(500);

/// How soon the store's data is asked again after a write was seen landing.
const DATA_RECHECK: Duration = Duration::from_millis(30);

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
    /// Watches of session directories that had no log at the last listing
    /// (the Harness makes the directory, then links its log in): a change in
    /// one may be a new session.
    awaiting: HashMap<i32, PathBuf>,
    /// Watches of session directories, and the slots each serves.
    sessions: HashMap<i32, Vec<u32>>,
    of_slot: HashMap<u32, i32>,
    /// Watches kept for `latest` alone, and the slot each is for; the order
    /// they were added in, oldest first.
    written: HashMap<i32, u32>,
    written_order: VecDeque<(u32, i32)>,
    written_slots: HashSet<u32>,
    /// Loaded sessions that have no watch and are polled.
    polled: HashSet<u32>,
    /// Sessions a round could not refresh (a request held the view).
    retry: HashSet<u32>,
    /// The store's data is to be asked again soon (a write was seen while it
    /// landed).
    data_recheck: bool,
    /// The watch limit was reached and said so in the log.
    limit_reported: bool,
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
    pub fn watch_dirs(&self, store: &dyn Backend) {
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

    /// A session's view was loaded: watch its directory `dir`, or poll it.
    /// `None`: a session not in the store yet (a fork child not yet durable),
    /// followed by no one.
    pub fn watch_session(&self, number: u32, dir: Option<Watched>) {
        let Some(dir) = dir else { return };
        let mut watches = lock(&self.watches);
        Self::forget(&mut watches, self.watcher.as_ref(), number);
        let Some(watcher) = &self.watcher else {
            watches.polled.insert(number);
            return;
        };
        // Covered by the store's own directories (SQLite).
        let Watched::Dir(dir) = dir else { return };
        match watcher.watch(&dir) {
            Ok(wd) => {
                watches.sessions.entry(wd).or_default().push(number);
                watches.of_slot.insert(number, wd);
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                // Said once: past the limit every further session would say it.
                if !std::mem::replace(&mut watches.limit_reported, true) {
                    log::warn!(
                        "the inotify watch limit (fs.inotify.max_user_watches) is reached: \
                         sessions in use beyond it are polled every {POLL_EVERY:?}"
                    );
                }
                watches.polled.insert(number);
            }
            Err(e) => {
                log::info!(
                    "cannot watch {} ({e}); polling it every {POLL_EVERY:?}",
                    dir.display()
                );
                watches.polled.insert(number);
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
            if let Some(watcher) = watcher
                && !watches.written.contains_key(&wd)
            {
                watcher.unwatch(wd);
            }
        }
    }

    /// Watches the directories of `sessions` (slot, directory), written
    /// recently, for writes alone: a write moves `latest`. A session watched
    /// so already costs nothing; past [`WRITES_WATCHED`] the oldest such
    /// watch is given up.
    pub fn watch_writes(&self, sessions: Vec<(u32, PathBuf)>) {
        let Some(watcher) = &self.watcher else { return };
        let mut watches = lock(&self.watches);
        for (number, dir) in sessions {
            if watches.written_slots.contains(&number) {
                continue;
            }
            let Ok(wd) = watcher.watch(&dir) else {
                // The watch limit: the next listing sees the write.
                continue;
            };
            watches.written.insert(wd, number);
            watches.written_order.push_back((number, wd));
            watches.written_slots.insert(number);
            while watches.written_order.len() > WRITES_WATCHED {
                let Some((oldest, wd)) = watches.written_order.pop_front() else {
                    break;
                };
                watches.written_slots.remove(&oldest);
                if watches.written.get(&wd) == Some(&oldest) {
                    watches.written.remove(&wd);
                }
                let shared = watches.dirs.contains(&wd)
                    || watches.sessions.contains_key(&wd)
                    || watches.awaiting.contains_key(&wd)
                    || watches.written.contains_key(&wd);
                if !shared {
                    watcher.unwatch(wd);
                }
            }
        }
    }

    /// Waits until the store reports a change (at most a second, less while
    /// sessions are polled) and says which sessions it concerns. `repair`:
    /// every loaded session is polled, to repair those that went quiet.
    pub fn wait(&self, store: &dyn Backend, repair: bool) -> Round {
        let polling = self.watcher.is_none() || repair;
        let (wait, retry) = {
            let watches = lock(&self.watches);
            let wait = if watches.data_recheck {
                DATA_RECHECK
            } else if !watches.retry.is_empty() {
                Duration::from_millis(100)
            } else if polling || !watches.polled.is_empty() {
                POLL_EVERY
            } else {
                IDLE_WAKE
            };
            (wait, watches.retry.clone())
        };
        let events = match &self.watcher {
            Some(watcher) => watcher.wait(wait),
            None => {
                std::thread::sleep(wait);
                Vec::new()
            }
        };
        let mut watches = lock(&self.watches);
        let mut round = Round {
            due: retry,
            data_recheck: std::mem::take(&mut watches.data_recheck),
            ..Round::default()
        };
        for event in events {
            if event.overflow {
                round.everything = true;
                round.sessions_may_differ = true;
            } else if watches.awaiting.contains_key(&event.watch) {
                round.sessions_may_differ = true;
            } else if watches.dirs.contains(&event.watch) {
                if store.is_data_change(&event.name) {
                    round.everything = true;
                    round.data_changed = true;
                } else {
                    round.store_names.push(event.name);
                }
            } else if let Some(slots) = watches.sessions.get(&event.watch) {
                round.due.extend(slots.iter().copied());
            }
            if let Some(&number) = watches.written.get(&event.watch) {
                round.written.insert(number);
            }
        }
        let poll_due = watches
            .last_poll
            .is_none_or(|at| at.elapsed() >= POLL_EVERY);
        if poll_due && (polling || !watches.polled.is_empty()) {
            watches.last_poll = Some(Instant::now());
            match polling {
                true => round.everything = true,
                false => round.due.extend(watches.polled.iter().copied()),
            }
        }
        watches.retry.clear();
        round
    }

    /// Watches `dirs`, the session directories the last listing found
    /// without a log, instead of those it watched for that before.
    pub fn watch_awaiting(&self, dirs: Vec<PathBuf>) {
        let Some(watcher) = &self.watcher else { return };
        let mut watches = lock(&self.watches);
        let wanted: HashSet<&PathBuf> = dirs.iter().collect();
        let gone: Vec<i32> = watches
            .awaiting
            .iter()
            .filter(|(_, dir)| !wanted.contains(dir))
            .map(|(&wd, _)| wd)
            .collect();
        for wd in gone {
            watches.awaiting.remove(&wd);
            // A watch another use shares (the same directory) stays.
            if !watches.dirs.contains(&wd)
                && !watches.sessions.contains_key(&wd)
                && !watches.written.contains_key(&wd)
            {
                watcher.unwatch(wd);
            }
        }
        let known: HashSet<PathBuf> = watches.awaiting.values().cloned().collect();
        for dir in dirs.into_iter().filter(|dir| !known.contains(dir)) {
            match watcher.watch(&dir) {
                Ok(wd) => {
                    watches.awaiting.insert(wd, dir);
                }
                Err(e) => log::info!(
                    "cannot watch {} ({e}); its session shows at the next listing",
                    dir.display()
                ),
            }
        }
    }

    /// Asks the next round, in [`DATA_RECHECK`], to look at the store's data
    /// again though no change is reported.
    pub fn recheck_data(&self) {
        lock(&self.watches).data_recheck = true;
    }

    /// A session could not be refreshed this round (a request held its view):
    /// it is tried again soon.
    pub fn retry(&self, number: u32) {
        lock(&self.watches).retry.insert(number);
    }
}

/// What a session's loaded view is followed by.
pub enum Watched {
    /// Its own directory in the store (JSONL).
    Dir(PathBuf),
    /// The store's directories, watched already (SQLite).
    Store,
}

/// What one wait found.
#[derive(Default)]
pub struct Round {
    /// Loaded sessions whose files changed.
    pub due: HashSet<u32>,
    /// Sessions written to, seen by the watches kept for `latest`.
    pub written: HashSet<u32>,
    /// Every loaded session may have changed (the store's data, an overflow,
    /// a poll of everything).
    pub everything: bool,
    /// Names in the store's own directories that changed: sessions (or
    /// project directories) that may have been added or removed.
    pub store_names: Vec<String>,
    /// A directory awaiting its log changed, or events were lost: the next
    /// listing must ask the store.
    pub sessions_may_differ: bool,
    /// The store's data files were written (SQLite), which may have added a
    /// session.
    pub data_changed: bool,
    /// A round asked to look at the store's data again (`Follow::recheck_data`).
    pub data_recheck: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_watched_for_the_newest_sessions_only() {
        let root = std::env::temp_dir().join(format!("sessionfs-writes-{}", std::process::id()));
        let dirs: Vec<PathBuf> = (0..WRITES_WATCHED + 6)
            .map(|n| root.join("project").join(format!("s{n}")))
            .collect();
        for dir in &dirs {
            std::fs::create_dir_all(dir).unwrap();
        }
        let store = crate::store::jsonl::JsonlStore::open(&root).unwrap();
        let follow = Follow::new(&store, false);
        let numbered = |range: std::ops::Range<usize>| {
            range
                .map(|n| (n as u32, dirs[n].clone()))
                .collect::<Vec<_>>()
        };
        follow.watch_writes(numbered(0..dirs.len()));
        // Asked again, a watched session costs nothing and changes nothing.
        follow.watch_writes(numbered(dirs.len() - 3..dirs.len()));
        {
            let watches = lock(&follow.watches);
            assert_eq!(watches.written_order.len(), WRITES_WATCHED);
            assert!(!watches.written_slots.contains(&5), "the oldest given up");
            assert!(watches.written_slots.contains(&6));
        }
        let write = |n: usize| std::fs::write(dirs[n].join("session.jsonl"), b"x").unwrap();
        write(2);
        write(dirs.len() - 1);
        let round = follow.wait(&store, false);
        assert_eq!(
            round.written,
            HashSet::from([dirs.len() as u32 - 1]),
            "a write to a session still watched, and only that"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
