//! Event names published while a session's first scan runs, so `events/` can
//! be listed before the scan ends: `ls events | head` of a session of a million
//! events answers in the time of its first batch, not of the whole build.
//!
//! A stored event's name depends only on its seq and type, both known the
//! moment it is scanned, and the scan never renames an event it has passed:
//! names published here are the names the built view lists.

use std::sync::{Condvar, Mutex, MutexGuard};

use crate::render::event_file;
use crate::sync;

/// How many events the scan folds between two publications.
pub const PUBLISH_EVERY: usize = 8192;

#[derive(Default)]
struct Published {
    /// Each published event's type, as an index into `parts`.
    types: Vec<u32>,
    /// Each type's part of an event file name.
    parts: Vec<String>,
    /// The time of the last published event, in Unix milliseconds.
    last_time: Option<i64>,
    finished: bool,
}

#[derive(Default)]
/// Event names published by a session's first scan while it runs (see the module doc).
pub struct ScanProgress {
    published: Mutex<Published>,
    changed: Condvar,
}

impl ScanProgress {
    fn lock(&self) -> MutexGuard<'_, Published> {
        sync::lock(&self.published)
    }

    /// Publishes the events scanned since the last call: their types (indices
    /// into `parts`, every type seen so far) and the last one's time.
    pub fn publish(&self, types: impl Iterator<Item = u32>, parts: &[String], last_time: i64) {
        let mut published = self.lock();
        published.types.extend(types);
        if published.parts.len() < parts.len() {
            let known = published.parts.len();
            published.parts.extend_from_slice(&parts[known..]);
        }
        published.last_time = Some(last_time);
        drop(published);
        self.changed.notify_all();
    }

    /// How many events are published.
    pub fn published(&self) -> u64 {
        self.lock().types.len() as u64
    }

    /// The scan ended (read through, refused or failed): waiters go to the view.
    pub fn finish(&self) {
        self.lock().finished = true;
        self.changed.notify_all();
    }

    /// Waits until the scan published its first events or ended; returns the
    /// time of the last published event, or `None` when the scan ended first.
    pub fn started(&self) -> Option<i64> {
        let mut published = self.lock();
        while published.types.is_empty() && !published.finished {
            published = sync::wait(&self.changed, published);
        }
        match published.finished {
            true => None,
            false => published.last_time,
        }
    }

    /// The names of events `from..from + limit`, waiting until they are all
    /// published or the scan ended; `None` when the scan ended before event
    /// `from` was published (the built view then has the rest, closers
    /// included).
    pub fn names(&self, from: u64, limit: usize) -> Option<Vec<(u64, String)>> {
        let want = from.saturating_add(limit as u64);
        let mut published = self.lock();
        while (published.types.len() as u64) < want && !published.finished {
            published = sync::wait(&self.changed, published);
        }
        let end = (published.types.len() as u64).min(want);
        if from >= end || published.finished {
            return None;
        }
        Some(
            (from..end)
                .map(|seq| {
                    let part = &published.parts[published.types[seq as usize] as usize];
                    (seq, event_file::name_with(seq, part, false))
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_wait_for_their_batch_and_give_way_to_the_view_when_the_scan_ends() {
        let progress = std::sync::Arc::new(ScanProgress::default());
        let parts = vec!["turn.start".to_string(), "user.message".to_string()];
        progress.publish([0, 1].into_iter(), &parts, 7);
        assert_eq!(progress.started(), Some(7));
        let names = progress.names(0, 2).expect("published");
        assert_eq!(names[0].1, event_file::name_with(0, "turn.start", false));
        assert_eq!(names[1].1, event_file::name_with(1, "user.message", false));

        // A batch not yet published is awaited.
        let writer = progress.clone();
        let more = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            writer.publish([1, 1].into_iter(), &parts, 9);
        });
        let names = progress.names(2, 2).expect("published later");
        assert_eq!(names.len(), 2);
        more.join().expect("publisher");

        // Once the scan ended, the built view answers.
        progress.finish();
        assert_eq!(progress.names(4, 2), None);
        assert_eq!(progress.names(0, 2), None);
        assert_eq!(progress.started(), None);
    }
}
