//! The session table: one slot per session the mount has shown, found by name
//! in O(1) and listed by position in O(entries returned).
//!
//! Slots are only ever appended and never reused while mounted, so a slot
//! number (and the inode numbers built from it) always names the same session,
//! and a listing position keeps naming the same entry while sessions appear. A
//! session removed from the store keeps its slot, marked gone: it leaves the
//! listing and lookups, while descriptors already open keep their snapshot.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::control::ForkLog;
use super::{NAME_MAX, SessionFs, lock, mount_name};
use crate::model::Refusal;
use crate::model::ids::decode_segment;
use crate::store::{Listing, SessionKey};
use crate::view::SessionView;

/// Where a session's events come from.
#[derive(Clone, Debug)]
pub(super) enum Source {
    Store(SessionKey),
    /// A fork child accepted but not yet durable.
    Pending,
}

pub(super) struct Slot {
    /// The slot's own number: its place in the table, part of its inodes.
    pub number: u32,
    pub name: String,
    pub id: String,
    pub listing: Mutex<Listing>,
    pub source: Mutex<Source>,
    /// A reason found outside the log (a duplicate id) that overrides reading it.
    pub refusal: Option<Refusal>,
    pub view: Mutex<Option<SessionView>>,
    pub checked: Mutex<Instant>,
    pub control: Mutex<ForkLog>,
    /// The session was removed from the store.
    pub gone: AtomicBool,
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
    children: HashMap<String, Vec<u32>>,
    listed_at: Option<Instant>,
    /// The store's listing revision at the last listing.
    listed_revision: Option<String>,
}

impl Table {
    pub fn add(
        &mut self,
        name: String,
        listing: Listing,
        source: Source,
        refusal: Option<Refusal>,
    ) -> u32 {
        let number = self.slots.len() as u32;
        if let Some(parent) = listing
            .header
            .as_ref()
            .ok()
            .and_then(|h| h.parent_session.clone())
        {
            self.children.entry(parent).or_default().push(number);
        }
        self.slots.push(Arc::new(Slot {
            number,
            name: name.clone(),
            id: listing.id.clone(),
            listing: Mutex::new(listing),
            source: Mutex::new(source),
            refusal,
            view: Mutex::new(None),
            checked: Mutex::new(Instant::now()),
            control: Mutex::default(),
            gone: AtomicBool::new(false),
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
        let parent = lock(&slot.listing)
            .header
            .as_ref()
            .ok()
            .and_then(|h| h.parent_session.clone());
        if let Some(siblings) = parent.and_then(|p| self.children.get_mut(&p)) {
            siblings.retain(|&s| s != number);
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
        let listings = match self.store.try_list() {
            Ok(listings) => listings,
            Err(refusal) => {
                // Not a verdict that every session is gone: keep the table.
                log::warn!("cannot list the store now: {refusal}");
                return;
            }
        };
        let mut by_id: BTreeMap<String, Vec<Listing>> = BTreeMap::new();
        let mut by_path = Vec::new();
        for listing in listings {
            // A directory whose name is no valid id encoding (and whose header cannot
            // be read) is shown under that raw name, which no real id maps to.
            match &listing.raw_name {
                Some(_) => by_path.push(listing),
                None => by_id.entry(listing.id.clone()).or_default().push(listing),
            }
        }
        let mut table = self.table_mut();
        let mut present: HashSet<String> = HashSet::with_capacity(by_id.len() + by_path.len());
        for listing in by_path {
            let name = listing.raw_name.clone().unwrap_or_default();
            present.insert(name.clone());
            if table.by_name(&name).is_none() {
                let source = Source::Store(listing.key.clone());
                table.add(name, listing, source, None);
            }
        }
        let mut moved = Vec::new();
        for (id, group) in by_id {
            if let Some(name) = self.admit(&mut table, &id, group, &mut moved) {
                present.insert(name);
            }
        }
        // Sessions removed from the store leave the listing; fork children not
        // yet durable are in no store listing and stay.
        let removed: Vec<u32> = table
            .by_name
            .iter()
            .filter(|(name, _)| !present.contains(*name))
            .map(|(_, &number)| number)
            .filter(|&number| {
                table
                    .get(number)
                    .is_some_and(|slot| matches!(*lock(&slot.source), Source::Store(_)))
            })
            .collect();
        for number in removed {
            if let Some(slot) = table.get(number) {
                log::info!("session {:?} was removed from the store", slot.id);
            }
            table.remove(number);
            self.follow.unwatch_session(number);
        }
        table.listed_at = Some(Instant::now());
        table.listed_revision = revision;
        drop(table);
        for (slot, listing) in moved {
            Self::reread(&slot, listing);
        }
    }

    /// The store's directories changed: the next listing asks the store.
    pub(super) fn forget_listing_age(&self) {
        self.table_mut().listed_at = None;
    }

    /// Serves a slot from another stored artifact from now on. Listing and
    /// source change together under the view's lock, so no reader pairs one
    /// with the other.
    pub(super) fn reread(slot: &Slot, listing: Listing) {
        let mut view = lock(&slot.view);
        *lock(&slot.source) = Source::Store(listing.key.clone());
        *lock(&slot.listing) = listing;
        *view = None;
    }

    /// Takes the store's listings of one id into the table: a new slot, or an
    /// update of the known one. Returns the name it is shown under.
    fn admit(
        &self,
        table: &mut Table,
        id: &str,
        mut group: Vec<Listing>,
        moved_slots: &mut Vec<(Arc<Slot>, Listing)>,
    ) -> Option<String> {
        let Some(name) = mount_name(id).filter(|n| n.len() <= NAME_MAX) else {
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
            if group.len() == 1 {
                let listing = group.remove(0);
                let moved = match &*lock(&slot.source) {
                    Source::Store(key) => *key != listing.key,
                    Source::Pending => false,
                };
                if moved {
                    // Stored again under another artifact: read it afresh, once
                    // the table is unlocked (a view is never awaited under it).
                    moved_slots.push((slot, listing));
                } else {
                    *lock(&slot.listing) = listing;
                }
            }
            return Some(name);
        }
        let refusal = (group.len() > 1).then(|| {
            let paths: Vec<String> = group.iter().map(|l| l.key.describe()).collect();
            Refusal::Corrupt(format!(
                "session id {id:?} appears in {} artifacts: {}; rename or remove all but one",
                group.len(),
                paths.join(" and ")
            ))
        });
        let listing = group.remove(0);
        let source = Source::Store(listing.key.clone());
        table.add(name.clone(), listing, source, refusal);
        Some(name)
    }

    /// A name the table does not know: asks the store for that one session
    /// before answering that it does not exist, so a session created a moment
    /// ago is found by the first lookup. Costs one look in the store, never a
    /// listing of it.
    pub(super) fn find_new(&self, name: &str) -> Option<u32> {
        let id = match name {
            "~0066lush" => "flush".to_string(),
            _ => decode_segment(name)?,
        };
        if mount_name(&id).as_deref() != Some(name) {
            return None;
        }
        let group = self.store.find(&id);
        let mut table = self.table_mut();
        if let Some(number) = table.by_name(name) {
            return Some(number);
        }
        self.admit(&mut table, &id, group, &mut Vec::new())?;
        table.by_name(name)
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
