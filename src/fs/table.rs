//! The session table: one slot per session the mount has shown, found by name
//! in O(1) and listed by position in O(entries returned).
//!
//! Slots are only ever appended and never reused while mounted, so a slot
//! number (and the inode numbers built from it) always names the same session,
//! and a listing position keeps naming the same entry while sessions appear. A
//! session removed from the store keeps its slot, marked gone: it leaves the
//! listing and lookups, while descriptors already open keep their snapshot.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::SessionFs;
use super::names::{NAME_MAX, id_of, mount_name, shown_name};
use super::paged::Spilled;
use crate::model::Refusal;
use crate::store::{Backend, Listing};
use crate::sync::lock;
use crate::view::{ScanProgress, SessionSource, SessionView};

/// What the table keeps of a listed session: enough to list it, date it and
/// place it under its parent. The header itself is read again when the
/// session is used, so an untouched session costs a few hundred bytes.
pub(super) struct Listed {
    /// Where the session is read from: paired with its store once, here.
    pub source: SessionSource,
    pub created_at: i64,
    pub parent: Option<Box<str>>,
    /// Why the listing could not read its header.
    pub unreadable: Option<Box<str>>,
    /// A fork child accepted but not yet durable: served from memory.
    pub pending: bool,
    /// The read bits of the stored file, once asked for.
    pub read_bits: Option<u16>,
}

impl Listed {
    /// A listing of `backend`'s; `pending` for a fork child not yet durable.
    pub fn of(listing: Listing, backend: Arc<dyn Backend>, pending: bool) -> Listed {
        let read_bits = listing.mode.map(|mode| (mode & 0o444) as u16);
        let (created_at, parent, unreadable) = match listing.header {
            Ok(header) => (
                header.created_at,
                header.parent_session.map(String::into_boxed_str),
                None,
            ),
            Err(why) => (0, None, Some(why.into_boxed_str())),
        };
        Listed {
            source: SessionSource::new(backend, listing.key),
            created_at,
            parent,
            unreadable,
            pending,
            read_bits,
        }
    }
}

pub(super) struct Slot {
    /// The slot's own number: its place in the table, part of its inodes.
    pub number: u32,
    pub name: String,
    pub id: String,
    pub listed: Mutex<Listed>,
    /// A reason found outside the log (a duplicate id) that overrides reading it.
    pub refusal: Mutex<Option<Refusal>>,
    pub view: Mutex<Option<Box<SessionView>>>,
    /// What `stat` needs of the transcript of a dropped view.
    pub spilled: Mutex<Option<Box<Spilled>>>,
    /// Event names published by the first scan while it runs.
    pub progress: Mutex<Option<Arc<ScanProgress>>>,
    pub checked: Mutex<Instant>,
    /// The session was removed from the store.
    pub gone: AtomicBool,
    /// The last listing of the store that held this session.
    pub seen: AtomicU32,
}

impl Slot {
    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
pub(super) struct Table {
    slots: Vec<Arc<Slot>>,
    by_name: HashMap<String, u32>,
    /// Fork children by parent id, so `children/` costs what it lists.
    children: HashMap<Box<str>, Vec<u32>>,
    listed_at: Option<Instant>,
    /// The store's listing revision at the last listing.
    listed_revision: Option<String>,
    /// Counts listings of the store, to tell which sessions the last one held.
    generation: u32,
}

impl Table {
    pub fn add(&mut self, name: String, id: &str, listed: Listed, refusal: Option<Refusal>) -> u32 {
        let number = self.slots.len() as u32;
        if let Some(parent) = &listed.parent {
            self.children
                .entry(parent.clone())
                .or_default()
                .push(number);
        }
        self.slots.push(Arc::new(Slot {
            number,
            name: name.clone(),
            id: id.to_string(),
            listed: Mutex::new(listed),
            refusal: Mutex::new(refusal),
            view: Mutex::new(None),
            spilled: Mutex::new(None),
            progress: Mutex::new(None),
            checked: Mutex::new(Instant::now()),
            gone: AtomicBool::new(false),
            seen: AtomicU32::new(self.generation),
        }));
        self.by_name.insert(name, number);
        number
    }

    /// Marks a session removed from the store: it leaves the listing and its
    /// name is free for a session created again under it.
    pub fn remove(&mut self, number: u32) {
        let Some(slot) = self.slots.get(number as usize) else {
            return;
        };
        slot.gone.store(true, Ordering::Relaxed);
        if self.by_name.get(&slot.name) == Some(&number) {
            self.by_name.remove(&slot.name);
        }
        let parent = lock(&slot.listed).parent.clone();
        if let Some(siblings) = parent.and_then(|p| self.children.get_mut(&p)) {
            siblings.retain(|&s| s != number);
        }
    }

    /// Marks a slot as held by the listing of `generation`.
    fn stamp(&self, number: u32, generation: u32) {
        if let Some(slot) = self.slots.get(number as usize) {
            slot.seen.store(generation, Ordering::Relaxed);
        }
    }

    pub fn get(&self, number: u32) -> Option<Arc<Slot>> {
        self.slots.get(number as usize).cloned()
    }

    pub fn by_name(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    pub fn children_of(&self, id: &str) -> &[u32] {
        self.children.get(id).map_or(&[], Vec::as_slice)
    }

    /// Up to `limit` sessions from slot `from` on, skipping those gone, each
    /// with the position a listing continues from after it.
    pub fn listed_from(&self, from: usize, limit: usize) -> Vec<(u32, Arc<Slot>)> {
        self.slots
            .iter()
            .enumerate()
            .skip(from)
            .filter(|(_, slot)| !slot.is_gone())
            .take(limit)
            .map(|(number, slot)| (number as u32, slot.clone()))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }
}

/// Why a session whose id is stored more than once is not shown.
fn duplicate(id: &str, keys: &[String]) -> Refusal {
    Refusal::Corrupt(format!(
        "session id {id:?} appears in {} artifacts: {}; rename or remove all but one",
        keys.len(),
        keys.join(" and ")
    ))
}

impl SessionFs {
    /// Lists the store again when the last listing is older than `max_age` and
    /// the store says its set of sessions may have changed.
    pub(super) fn relist(&self, max_age: Duration) {
        if self
            .table()
            .listed_at
            .is_some_and(|at| at.elapsed() < max_age)
        {
            return;
        }
        let revision = self.store.listing_revision();
        if revision.is_some() && revision == self.table().listed_revision {
            self.table_mut().listed_at = Some(Instant::now());
            return;
        }
        // One listing at a time: two at once would each take the other's
        // sessions for removed.
        let _listing = lock(&self.relisting);
        let generation = {
            let mut table = self.table_mut();
            table.generation = table.generation.wrapping_add(1);
            table.generation
        };
        let mut moved = Vec::new();
        let listed = self.store.list_parts(&mut |mut part| {
            // Grouped by id without copying ids: a duplicate id is refused.
            part.sort_by(|a, b| a.id.cmp(&b.id));
            let mut table = self.table_mut();
            let mut rest = part.into_iter().peekable();
            while let Some(first) = rest.next() {
                // A directory whose name is no valid id encoding (and whose header
                // cannot be read) is shown under that raw name, which no real id
                // maps to.
                if let Some(raw) = first.raw_name.clone() {
                    let number = match table.by_name(&raw) {
                        Some(number) => number,
                        None => {
                            let id = first.id.clone();
                            let listed = Listed::of(first, self.store.clone(), false);
                            table.add(raw, &id, listed, None)
                        }
                    };
                    table.stamp(number, generation);
                    continue;
                }
                let mut group = vec![first];
                while rest
                    .peek()
                    .is_some_and(|next| next.raw_name.is_none() && next.id == group[0].id)
                {
                    group.extend(rest.next());
                }
                let id = group[0].id.clone();
                self.admit(&mut table, &id, group, Some(generation), &mut moved);
            }
        });
        if let Err(refusal) = listed {
            // Not a verdict that every session is gone: remove nothing.
            log::warn!("cannot list the store now: {refusal}");
            drop(_listing);
            self.reread_moved(moved);
            return;
        }
        // Sessions removed from the store leave the listing; fork children not
        // yet durable are in no store listing and stay.
        let unseen = |slot: &Slot| {
            !slot.is_gone()
                && slot.seen.load(Ordering::Relaxed) != generation
                && !lock(&slot.listed).pending
        };
        let candidates: Vec<Arc<Slot>> = self
            .table()
            .slots
            .iter()
            .filter(|slot| unseen(slot))
            .cloned()
            .collect();
        // A fork child made durable while the store was listed is in neither
        // that listing nor pending any more: asked for by id, it is found.
        let removed: Vec<u32> = candidates
            .iter()
            .filter(|slot| self.store.find(&slot.id).is_empty())
            .map(|slot| slot.number)
            .collect();
        let mut table = self.table_mut();
        for number in removed {
            if !table.get(number).is_some_and(|slot| unseen(&slot)) {
                continue;
            }
            if let Some(slot) = table.get(number) {
                log::info!("session {:?} was removed from the store", slot.id);
                lock(&self.removed).push(slot.name.clone());
            }
            table.remove(number);
            self.follow.unwatch_session(number);
        }
        table.listed_at = Some(Instant::now());
        table.listed_revision = revision;
        drop(table);
        self.reread_moved(moved);
    }

    fn reread_moved(&self, moved: Vec<(Arc<Slot>, Listing)>) {
        for (slot, listing) in moved {
            Self::reread(&slot, Listed::of(listing, self.store.clone(), false));
        }
    }

    /// The store's directories changed: the next listing asks the store.
    pub(super) fn forget_listing_age(&self) {
        self.table_mut().listed_at = None;
    }

    /// Serves a slot from another stored artifact from now on. Listing and
    /// source change together under the view's lock, so no reader pairs one
    /// with the other.
    pub(super) fn reread(slot: &Slot, listed: Listed) {
        let mut view = lock(&slot.view);
        *lock(&slot.listed) = listed;
        *view = None;
    }

    /// Takes the store's listings of one id into the table: a new slot, or an
    /// update of the known one, stamped as held by listing `generation`.
    /// Returns its slot.
    fn admit(
        &self,
        table: &mut Table,
        id: &str,
        mut group: Vec<Listing>,
        generation: Option<u32>,
        moved_slots: &mut Vec<(Arc<Slot>, Listing)>,
    ) -> Option<u32> {
        let Some(name) = shown_name(id) else {
            let shown: String = id.chars().take(40).collect();
            log::warn!(
                "session {shown:?}… is not shown: its name would be longer than {NAME_MAX} bytes"
            );
            return None;
        };
        if group.is_empty() {
            return None;
        }
        if let Some(number) = table.by_name(&name) {
            let slot = table.get(number)?;
            let seen_in_this_listing =
                generation.is_some_and(|g| slot.seen.swap(g, Ordering::Relaxed) == g);
            if seen_in_this_listing {
                // The same id in another part of this listing: a duplicate.
                let mut keys = vec![lock(&slot.listed).source.key.describe()];
                keys.extend(group.iter().map(|l| l.key.describe()));
                *lock(&slot.refusal) = Some(duplicate(id, &keys));
                moved_slots.push((slot, group.remove(0)));
            } else if group.len() == 1 {
                let listing = group.remove(0);
                let mut listed = lock(&slot.listed);
                if listed.pending || listed.source.key != listing.key {
                    // Durable now, or stored again under another artifact: read
                    // it afresh, once the table is unlocked (a view is never
                    // awaited under it).
                    drop(listed);
                    moved_slots.push((slot, listing));
                } else {
                    *listed = Listed::of(listing, self.store.clone(), false);
                }
            }
            return Some(number);
        }
        let refusal = (group.len() > 1).then(|| {
            let keys: Vec<String> = group.iter().map(|l| l.key.describe()).collect();
            duplicate(id, &keys)
        });
        let listing = group.remove(0);
        let number = table.add(
            name,
            id,
            Listed::of(listing, self.store.clone(), false),
            refusal,
        );
        if let Some(generation) = generation {
            table.stamp(number, generation);
        }
        Some(number)
    }

    /// A name the table does not know: asks the store for that one session
    /// before answering that it does not exist, so a session created a moment
    /// ago is found by the first lookup. Costs one look in the store, never a
    /// listing of it.
    pub(super) fn find_new(&self, name: &str) -> Option<u32> {
        let id = id_of(name)?;
        let group = self.store.find(&id);
        let mut table = self.table_mut();
        if let Some(number) = table.by_name(name) {
            return Some(number);
        }
        self.admit(&mut table, &id, group, None, &mut Vec::new())
    }

    pub(super) fn slot(&self, number: u32) -> crate::error::Result<Arc<Slot>> {
        self.table()
            .get(number)
            .ok_or_else(|| crate::error::Error::NotFound(format!("no session slot {number}")))
    }

    pub(super) fn slot_by_name(&self, name: &str) -> Option<u32> {
        self.table().by_name(name)
    }

    pub(super) fn slot_by_id(&self, id: &str) -> Option<u32> {
        mount_name(id).and_then(|name| self.slot_by_name(&name))
    }
}
