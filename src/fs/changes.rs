//! One round of following the store, for the adapter's follow thread: the
//! loaded views a change concerns are brought up to date, sessions whose
//! directory went are removed, and what the kernel must forget is returned.

use std::collections::HashSet;

use super::SessionFs;
use super::follow::{Changes, Watched};
use super::inode::session_inodes;
use super::names::mount_name;
use crate::model::ids::decode_segment;
use crate::sync::lock;

impl SessionFs {
    /// One round of following: waits until the store reports a change (at
    /// most a second, less while sessions are polled), brings the views it
    /// concerns up to date and returns what the kernel must forget.
    pub fn follow_changes(&self) -> Changes {
        let follow = self.views.follow();
        let round = follow.wait(self.store.as_ref(), self.config.repair);
        let mut due = round.due;
        let mut changes = Changes {
            inodes: self.views.take_stale(),
            // Sessions a listing found removed.
            root_names: self.sessions.take_removed(),
            names: Vec::new(),
        };
        // A session added a moment ago is listed by the next `ls`. A write
        // is seen while it lands (the WAL grows before its commit), so the
        // store is asked once more shortly after the writes stop.
        let added =
            (round.data_changed || round.data_recheck) && self.sessions.added_since_listing();
        if round.sessions_may_differ || added {
            self.sessions.forget_listing_age();
        } else if round.data_changed {
            follow.recheck_data();
        }
        if !round.store_names.is_empty() {
            self.store_dirs_changed(&round.store_names, &mut due, &mut changes);
        }
        // A write to a session no one uses may make it `latest`.
        for number in round.written.difference(&due) {
            self.note_written(*number);
        }
        if round.data_changed
            && let Some((id, time)) = self.store.last_written()
            && let Some(number) = self.sessions.by_id(&id)
        {
            self.sessions.note_time(number, time);
        }
        if round.everything {
            due.extend(self.views.loaded());
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
        self.sessions.forget_listing_age();
        // A new project directory is watched from now on.
        self.views.follow().watch_dirs(self.store.as_ref());
        let mut seen = HashSet::new();
        for name in names {
            if !seen.insert(name) {
                continue;
            }
            let Some(shown) = decode_segment(name).map(|id| mount_name(&id)) else {
                continue;
            };
            let Some(number) = self.sessions.by_name(&shown) else {
                continue;
            };
            let Ok(slot) = self.sessions.get(number) else {
                continue;
            };
            let key = {
                let listed = lock(&slot.listed);
                if listed.pending {
                    continue;
                }
                listed.source.key.clone()
            };
            if self.sessions.remove_if_gone(number) {
                self.views.forget(number);
                changes.root_names.extend(self.sessions.take_removed());
            } else if self.views.is_loaded(number)
                && let Some(dir) = self.store.session_dir(&key)
            {
                // Its directory may have been made anew: watch that one.
                self.views
                    .follow()
                    .watch_session(number, Some(Watched::Dir(dir)));
                due.insert(number);
            }
        }
    }

    /// Brings one loaded view up to date; a view in use by a request is
    /// retried next round.
    fn refresh_loaded(&self, number: u32, changes: &mut Changes) {
        let Ok(slot) = self.sessions.get(number) else {
            return;
        };
        if lock(&slot.refusal).is_some() || slot.is_gone() {
            return;
        }
        let pending = lock(&slot.listed).pending;
        let refreshed = self.views.refresh_loaded(number, |view| {
            let was_readable = view.indexed().is_some();
            let mut refreshed = view.refresh();
            if self.config.repair && !pending {
                refreshed |= self.repair(&slot, view);
            }
            if refreshed {
                let generations = self.views.generations(number);
                changes
                    .inodes
                    .extend(session_inodes(number, view, generations));
            }
            if view.indexed().is_some() != was_readable {
                // `error` and the views swap places: cached names would lie.
                changes.names.extend(Self::session_names(number));
            }
            refreshed
        });
        // A log written to may be the newest now: `latest` goes by the time
        // of the last write, as the listing does.
        if let Ok(Some(true)) = refreshed {
            self.note_written(number);
        }
        if refreshed.is_err() {
            self.views.follow().retry(number);
        }
    }

    /// Session `number`'s log was written: `latest` goes by the time of its
    /// last write, as the listing does.
    fn note_written(&self, number: u32) {
        let Ok(slot) = self.sessions.get(number) else {
            return;
        };
        let source = lock(&slot.listed).source.clone();
        if let Some(written) = super::written_at(&source) {
            self.sessions.note_time(number, written);
        }
    }
}
