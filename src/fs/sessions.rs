//! The sessions shown: one slot per session the mount has shown, found by name
//! in O(1) and listed by position in O(entries returned), and the listings of
//! the store that add and remove them. [`Sessions`] never touches a view: what a
//! listing finds moved to another artifact it hands back for the caller to
//! re-read.
//!
//! Slots are only ever appended and never reused while mounted, so a slot
//! number (and the inode numbers built from it) always names the same session,
//! and a listing position keeps naming the same entry while sessions appear. A
//! session removed from the store keeps its slot, marked gone: it leaves the
//! listing and lookups, while descriptors already open keep their snapshot.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use super::groups::{By, Groups, NO_SLOT};
use super::names::{id_of, mount_name};
use super::shown::Shown;
use crate::bytes::Bytes;
use crate::error::{Error, Result};
use crate::model::Refusal;
use crate::model::catalog::{project_name, utc_day};
use crate::store::{Backend, Listing, SessionKey, StoredFile};
use crate::sync::lock;
use crate::view::SessionSource;

/// What the table keeps of a listed session: enough to list it, date it and
/// place it under its parent. The header itself is read again when the
/// session is used, so an untouched session costs a few hundred bytes.
pub(super) struct Listed {
    /// Where the session is read from: paired with its store once, here.
    pub source: SessionSource,
    pub created_at: i64,
    pub parent: Option<Box<str>>,
    /// What `sessions.jsonl` shows beyond that: the header's cwd and
    /// delegation depth, and the stored log's size and last write.
    pub cwd: Option<Box<str>>,
    pub delegation_depth: Option<u64>,
    pub stored: Option<StoredFile>,
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
        let stored = listing.stored;
        let (created_at, parent, cwd, delegation_depth, unreadable) = match listing.header {
            Ok(header) => (
                header.created_at,
                header.parent_session.map(String::into_boxed_str),
                header.cwd.map(String::into_boxed_str),
                header.delegation_depth,
                None,
            ),
            Err(why) => (0, None, None, None, Some(why.into_boxed_str())),
        };
        Listed {
            source: SessionSource::new(backend, listing.key),
            created_at,
            parent,
            cwd,
            delegation_depth,
            stored,
            unreadable,
            pending,
            read_bits,
        }
    }
}

/// One session shown. Its view lives in [`super::views::Views`], under the
/// same number.
pub(super) struct Slot {
    /// The slot's own number: its place in the table, part of its inodes.
    pub number: u32,
    /// Its directory's name in the mount.
    pub name: String,
    /// The session's id.
    pub id: String,
    /// What the last listing said of it; a leaf lock.
    pub listed: Mutex<Listed>,
    /// A reason found outside the log (a duplicate id) that overrides reading
    /// it; a leaf lock.
    pub refusal: Mutex<Option<Refusal>>,
    /// Its groups in `by-project/` and `by-date/`, fixed when it is first
    /// listed; `None` when its header could not be read then.
    pub project: Option<u32>,
    pub day: Option<u32>,
    /// The time of its last write as far as the mount knows (ms): its log's
    /// modification time from the listing and from following it (SQLite
    /// stores no such time: its creation, then the time of the database's
    /// newest event row when that is this session's).
    newest: AtomicI64,
    /// The session was removed from the store.
    gone: AtomicBool,
    /// The last listing of the store that held this session.
    seen: AtomicU32,
}

impl Slot {
    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
    }
}

struct Table {
    slots: Vec<Arc<Slot>>,
    by_name: HashMap<String, u32>,
    /// Fork children by parent id, so `children/` costs what it lists.
    children: HashMap<Box<str>, Vec<u32>>,
    listed_at: Option<Instant>,
    /// The store's listing revision at the last listing.
    listed_revision: Option<String>,
    /// Counts listings of the store, to tell which sessions the last one held.
    generation: u32,
    /// Sessions by project and by day of creation.
    projects: Groups,
    days: Groups,
    /// Moves at every change of what the table shows, for `sessions.jsonl`.
    version: u64,
    /// The session with the newest event, for `latest` ([`NO_SLOT`]: none).
    latest: AtomicU32,
}

impl Default for Table {
    fn default() -> Table {
        Table {
            slots: Vec::new(),
            by_name: HashMap::new(),
            children: HashMap::new(),
            listed_at: None,
            listed_revision: None,
            generation: 0,
            projects: Groups::default(),
            days: Groups::default(),
            version: 0,
            latest: AtomicU32::new(NO_SLOT),
        }
    }
}

impl Table {
    fn groups(&self, by: By) -> &Groups {
        match by {
            By::Project => &self.projects,
            By::Day => &self.days,
        }
    }

    fn add(&mut self, name: String, id: &str, listed: Listed, refusal: Option<Refusal>) -> u32 {
        let number = self.slots.len() as u32;
        if let Some(parent) = &listed.parent {
            self.children
                .entry(parent.clone())
                .or_default()
                .push(number);
        }
        let (project, day) = match listed.unreadable {
            Some(_) => (None, None),
            None => (
                Some(
                    self.projects
                        .join(project_name(listed.cwd.as_deref()), number),
                ),
                Some(self.days.join(utc_day(listed.created_at), number)),
            ),
        };
        self.version += 1;
        let time = listed_time(&listed);
        self.slots.push(Arc::new(Slot {
            number,
            name: name.clone(),
            id: id.to_string(),
            listed: Mutex::new(listed),
            refusal: Mutex::new(refusal),
            project,
            day,
            newest: AtomicI64::new(i64::MIN),
            gone: AtomicBool::new(false),
            seen: AtomicU32::new(self.generation),
        }));
        self.by_name.insert(name, number);
        self.note_time(number, time);
        number
    }

    /// Session `number` has an event at `time`: it becomes `latest` (of the
    /// root and of its project) when that is newer than theirs. Atomics only,
    /// so a read lock of the table suffices.
    fn note_time(&self, number: u32, time: i64) {
        let Some(slot) = self.slots.get(number as usize) else {
            return;
        };
        if slot.newest.fetch_max(time, Ordering::Relaxed) >= time || slot.is_gone() {
            return;
        }
        // Ties go to the greater name, so every mount of a store agrees.
        let older = |holder: u32| {
            self.slots.get(holder as usize).is_none_or(|other| {
                (other.newest.load(Ordering::Relaxed), other.name.as_str())
                    < (time, slot.name.as_str())
            })
        };
        let project = slot.project.map(|project| self.projects.latest(project));
        for holder in std::iter::once(&self.latest).chain(project) {
            let mut current = holder.load(Ordering::Relaxed);
            while current == NO_SLOT || (current != number && older(current)) {
                match holder.compare_exchange(current, number, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => break,
                    Err(now) => current = now,
                }
            }
        }
    }

    /// After a removal: `latest` (of the root and of `project`) is chosen
    /// again when it was the removed session. Walks the sessions only then.
    fn rechoose_latest(&self, removed: u32, project: Option<u32>) {
        let best = |members: &mut dyn Iterator<Item = u32>| {
            members
                .filter_map(|n| Some((n, self.slots.get(n as usize)?)))
                .filter(|(_, slot)| !slot.is_gone())
                .max_by(|(_, a), (_, b)| {
                    (a.newest.load(Ordering::Relaxed), a.name.as_str())
                        .cmp(&(b.newest.load(Ordering::Relaxed), b.name.as_str()))
                })
                .map_or(NO_SLOT, |(n, _)| n)
        };
        if self.latest.load(Ordering::Relaxed) == removed {
            let all = best(&mut (0..self.slots.len() as u32));
            self.latest.store(all, Ordering::Relaxed);
        }
        if let Some(project) = project
            && self.projects.latest(project).load(Ordering::Relaxed) == removed
        {
            let members = best(&mut self.projects.members(project).iter().copied());
            self.projects
                .latest(project)
                .store(members, Ordering::Relaxed);
        }
    }

    /// Marks a session removed from the store: it leaves the listing and its
    /// name is free for a session created again under it.
    fn remove(&mut self, number: u32) {
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
        if let Some(project) = slot.project {
            self.projects.leave(project, number);
        }
        if let Some(day) = slot.day {
            self.days.leave(day, number);
        }
        let project = slot.project;
        self.rechoose_latest(number, project);
        self.version += 1;
    }

    /// Marks a slot as held by the listing of `generation`.
    fn stamp(&self, number: u32, generation: u32) {
        if let Some(slot) = self.slots.get(number as usize) {
            slot.seen.store(generation, Ordering::Relaxed);
        }
    }

    fn get(&self, number: u32) -> Option<Arc<Slot>> {
        self.slots.get(number as usize).cloned()
    }

    fn by_name(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    fn children_of(&self, id: &str) -> &[u32] {
        self.children.get(id).map_or(&[], Vec::as_slice)
    }

    /// Up to `limit` sessions from slot `from` on, skipping those gone, each
    /// with the position a listing continues from after it.
    fn listed_from(&self, from: usize, limit: usize) -> Vec<(u32, Arc<Slot>)> {
        self.slots
            .iter()
            .enumerate()
            .skip(from)
            .filter(|(_, slot)| !slot.is_gone())
            .take(limit)
            .map(|(number, slot)| (number as u32, slot.clone()))
            .collect()
    }

    fn len(&self) -> usize {
        self.slots.len()
    }
}

/// The newest time a listing gives a session: its log's last write, else its
/// creation.
fn listed_time(listed: &Listed) -> i64 {
    listed.stored.map_or(listed.created_at, |stored| {
        stored.modified_ms.max(listed.created_at)
    })
}

/// Why a session whose id is stored more than once is not shown.
fn duplicate(id: &str, keys: &[String]) -> Refusal {
    Refusal::Corrupt(format!(
        "session id {id:?} appears in {} artifacts: {}; rename or remove all but one",
        keys.len(),
        keys.join(" and ")
    ))
}

/// The sessions shown, and the listings of the store that change them.
///
/// Lock order: `relisting`, then `table`, then the leaves (`removed`, a
/// slot's `listed` and `refusal`). No view is ever awaited under `table`.
/// `streaming` is taken before `table` (a reader waiting for slots), and the
/// listing takes it with nothing held, only to wake those readers.
pub(super) struct Sessions {
    store: Arc<dyn Backend>,
    table: RwLock<Table>,
    /// Held while the store is listed: two listings at once would each take
    /// the other's sessions for removed.
    relisting: Mutex<()>,
    /// True while the mount's first listing runs on a thread of its own: the
    /// root's readdir answers from the parts it took in so far.
    streaming: Mutex<bool>,
    /// Signalled when that listing takes in a part, and when it ends.
    part_taken: Condvar,
    /// Names of sessions removed from the store, for the kernel to forget.
    removed: Mutex<Vec<String>>,
    /// The store's mark of added sessions as of the last listing (SQLite: the
    /// highest rowid), so a write that added none lists nothing.
    added: Mutex<Option<i64>>,
    /// `sessions.jsonl` as last rendered; taken before `table`.
    catalog: Mutex<Catalog>,
}

/// `sessions.jsonl` as last rendered, and what it showed.
#[derive(Default)]
struct Catalog {
    /// The table's version it was rendered at.
    version: Option<u64>,
    bytes: Bytes,
    shown: Shown,
}

/// Whether a first listing is streamed.
pub(super) enum Streaming {
    /// Begun now: the caller runs it.
    Begun,
    /// Already running on its thread.
    Running,
    /// The store was listed before: list it as usual.
    No,
}

/// What a listing of the store changed that the caller must act on.
#[derive(Default)]
pub(super) struct Relisted {
    /// The store was listed.
    pub listed: bool,
    /// Slots removed from the store: stop following them.
    pub removed: Vec<u32>,
    /// Slots now stored under another artifact (or made durable): their views
    /// must be read afresh from this listing.
    pub moved: Vec<(Arc<Slot>, Listing)>,
}

impl Sessions {
    /// No sessions yet, over `store`.
    pub fn new(store: Arc<dyn Backend>) -> Sessions {
        Sessions {
            store,
            table: RwLock::default(),
            relisting: Mutex::default(),
            streaming: Mutex::default(),
            part_taken: Condvar::new(),
            removed: Mutex::default(),
            added: Mutex::default(),
            catalog: Mutex::default(),
        }
    }

    fn table(&self) -> RwLockReadGuard<'_, Table> {
        crate::sync::read(&self.table)
    }

    fn table_mut(&self) -> RwLockWriteGuard<'_, Table> {
        crate::sync::write(&self.table)
    }

    /// What the table keeps of a listing of the store's.
    pub fn listed(&self, listing: Listing) -> Listed {
        Listed::of(listing, self.store.clone(), false)
    }

    /// Lists the store again when the last listing is older than `max_age` and
    /// the store says its set of sessions may have changed.
    pub fn relist(&self, max_age: Duration) -> Relisted {
        if self
            .table()
            .listed_at
            .is_some_and(|at| at.elapsed() < max_age)
        {
            return Relisted::default();
        }
        let revision = self.store.listing_revision();
        if revision.is_some() && revision == self.table().listed_revision {
            self.table_mut().listed_at = Some(Instant::now());
            return Relisted::default();
        }
        let _listing = lock(&self.relisting);
        // A listing that ended while this one waited for it is as fresh.
        if self
            .table()
            .listed_at
            .is_some_and(|at| at.elapsed() < max_age)
        {
            return Relisted::default();
        }
        // Taken before listing: a session added meanwhile moves it again.
        let added = self.store.added_mark();
        let generation = {
            let mut table = self.table_mut();
            table.generation = table.generation.wrapping_add(1);
            table.generation
        };
        let mut relisted = Relisted {
            listed: true,
            ..Relisted::default()
        };
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
                            let listed = self.listed(first);
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
                self.admit(
                    &mut table,
                    &id,
                    group,
                    Some(generation),
                    &mut relisted.moved,
                );
            }
            drop(table);
            self.wake_readers();
        });
        if let Err(refusal) = listed {
            // Not a verdict that every session is gone: remove nothing.
            log::warn!("cannot list the store now: {refusal}");
            return relisted;
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
            if table.get(number).is_some_and(|slot| unseen(&slot)) {
                self.remove_from(&mut table, number);
                relisted.removed.push(number);
            }
        }
        table.listed_at = Some(Instant::now());
        table.listed_revision = revision;
        // What the listing said of known sessions may have changed.
        table.version += 1;
        *lock(&self.added) = added;
        relisted
    }

    /// Marks the mount's first listing as streamed, when no listing has
    /// ended yet and none is streamed: the caller then runs it on a thread
    /// of its own and calls [`Self::end_streaming`] when it ends.
    pub fn begin_streaming(&self) -> Streaming {
        let mut streaming = lock(&self.streaming);
        if *streaming {
            return Streaming::Running;
        }
        if self.table().listed_at.is_some() {
            return Streaming::No;
        }
        *streaming = true;
        Streaming::Begun
    }

    /// The streamed listing ended (or was never started).
    pub fn end_streaming(&self) {
        *lock(&self.streaming) = false;
        self.part_taken.notify_all();
    }

    fn wake_readers(&self) {
        let _streaming = lock(&self.streaming);
        self.part_taken.notify_all();
    }

    /// Waits while a streamed listing runs and the table holds fewer than
    /// `slots` slots. True when no streamed listing runs: every slot that
    /// listing adds is then in the table.
    pub fn wait_for_slots(&self, slots: usize) -> bool {
        let mut streaming = lock(&self.streaming);
        loop {
            if !*streaming {
                return true;
            }
            if self.table().len() >= slots {
                return false;
            }
            // Timed only as a backstop: every part taken in wakes the readers.
            streaming = self
                .part_taken
                .wait_timeout(streaming, Duration::from_secs(1))
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// True when the store has added a session since the last listing, as
    /// far as it can tell cheaply (SQLite: one indexed read).
    pub fn added_since_listing(&self) -> bool {
        let now = self.store.added_mark();
        now.is_some() && now != *lock(&self.added)
    }

    /// Session directories the last listing found without a log.
    pub fn awaiting_dirs(&self) -> Vec<std::path::PathBuf> {
        self.store.awaiting_dirs()
    }

    /// A session whose directory went from the store: removed when the store
    /// no longer has it by id. True when it was removed.
    pub fn remove_if_gone(&self, number: u32) -> bool {
        let Ok(slot) = self.get(number) else {
            return false;
        };
        if lock(&slot.listed).pending || !self.store.find(&slot.id).is_empty() {
            return false;
        }
        self.remove_from(&mut self.table_mut(), number);
        true
    }

    /// The one way a session leaves: out of the listing and lookups, its name
    /// queued for the kernel to forget.
    fn remove_from(&self, table: &mut Table, number: u32) {
        let Some(slot) = table.get(number) else {
            return;
        };
        log::info!("session {:?} was removed from the store", slot.id);
        lock(&self.removed).push(slot.name.clone());
        table.remove(number);
    }

    /// Root names of sessions removed since the last call.
    pub fn take_removed(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.removed))
    }

    /// The store's directories changed: the next listing asks the store.
    pub fn forget_listing_age(&self) {
        self.table_mut().listed_at = None;
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
        let name = mount_name(id);
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
                    *listed = self.listed(listing);
                    let time = listed_time(&listed);
                    drop(listed);
                    table.note_time(number, time);
                }
            }
            return Some(number);
        }
        let refusal = (group.len() > 1).then(|| {
            let keys: Vec<String> = group.iter().map(|l| l.key.describe()).collect();
            duplicate(id, &keys)
        });
        let listing = group.remove(0);
        let number = table.add(name, id, self.listed(listing), refusal);
        if let Some(generation) = generation {
            table.stamp(number, generation);
        }
        Some(number)
    }

    /// A name the table does not know: asks the store for that one session
    /// before answering that it does not exist, so a session created a moment
    /// ago is found by the first lookup. Costs one look in the store, never a
    /// listing of it.
    pub fn find_new(&self, name: &str) -> Option<u32> {
        let id = id_of(name)?;
        let group = self.store.find(&id);
        let mut table = self.table_mut();
        if let Some(number) = table.by_name(name) {
            return Some(number);
        }
        self.admit(&mut table, &id, group, None, &mut Vec::new())
    }

    /// Adds a session the mount made (a fork child), shown at once.
    pub fn add(&self, name: String, id: &str, listed: Listed) -> u32 {
        self.table_mut().add(name, id, listed, None)
    }

    /// The slot numbered `number`.
    pub fn get(&self, number: u32) -> Result<Arc<Slot>> {
        self.table()
            .get(number)
            .ok_or_else(|| Error::NotFound(format!("no session slot {number}")))
    }

    /// The slot shown under `name`.
    pub fn by_name(&self, name: &str) -> Option<u32> {
        self.table().by_name(name)
    }

    /// The slot of the session `id`.
    pub fn by_id(&self, id: &str) -> Option<u32> {
        self.by_name(&mount_name(id))
    }

    /// The parent a listed session's header names.
    pub fn parent_of(&self, id: &str) -> Option<String> {
        let slot = self.get(self.by_id(id)?).ok()?;
        let parent = lock(&slot.listed).parent.clone();
        parent.map(String::from)
    }

    /// The fork children of session `id` shown now, oldest first.
    pub fn children_of(&self, id: &str) -> Vec<u32> {
        self.table().children_of(id).to_vec()
    }

    /// Whether slot `child` is a fork child of session `id`.
    pub fn is_child(&self, id: &str, child: u32) -> bool {
        self.table().children_of(id).contains(&child)
    }

    /// Up to `limit` sessions shown from slot `from` on.
    pub fn listed_from(&self, from: usize, limit: usize) -> Vec<(u32, Arc<Slot>)> {
        self.table().listed_from(from, limit)
    }

    /// Session `number` has an event at `time` (ms): `latest` may move to it.
    pub fn note_time(&self, number: u32, time: i64) {
        self.table().note_time(number, time);
    }

    /// The sessions stored as files whose last write known is at `since` (ms)
    /// or later: the newest `limit` of them, oldest first.
    pub fn written_since(&self, since: i64, limit: usize) -> Vec<(u32, SessionKey)> {
        let table = self.table();
        let mut recent: Vec<(i64, u32)> = table
            .slots
            .iter()
            .filter(|slot| !slot.is_gone())
            .map(|slot| (slot.newest.load(Ordering::Relaxed), slot.number))
            .filter(|&(newest, _)| newest >= since)
            .collect();
        recent.sort_unstable();
        let skip = recent.len().saturating_sub(limit);
        recent
            .into_iter()
            .skip(skip)
            .filter_map(|(_, number)| {
                let key = lock(&table.get(number)?.listed).source.key.clone();
                matches!(key, SessionKey::File(_)).then_some((number, key))
            })
            .collect()
    }

    /// The session `latest` leads to: of the whole store, or of `project`.
    pub fn latest(&self, project: Option<u32>) -> Option<Arc<Slot>> {
        let table = self.table();
        let number = match project {
            None => Some(table.latest.load(Ordering::Relaxed)).filter(|&n| n != NO_SLOT),
            Some(project) => table.projects.latest_of(project),
        }?;
        table.get(number).filter(|slot| !slot.is_gone())
    }

    /// `sessions.jsonl` now, with its generation: one line per session shown,
    /// sorted by name (so two mounts of one store, or of a copy, show the same
    /// file), from what the listing knows (no log is read). Kept while the
    /// table is unchanged.
    pub fn catalog(&self) -> (u32, Bytes) {
        let mut catalog = lock(&self.catalog);
        let table = self.table();
        if catalog.version != Some(table.version) {
            let mut shown: Vec<&Arc<Slot>> = table.slots.iter().filter(|s| !s.is_gone()).collect();
            shown.sort_unstable_by(|a, b| a.name.cmp(&b.name));
            catalog.version = Some(table.version);
            catalog.bytes = Bytes::from(super::catalog::render(&shown));
        }
        let bytes = catalog.bytes.clone();
        let generation = catalog.shown.observe(&bytes);
        (generation, bytes)
    }

    /// The generation of `sessions.jsonl` last shown.
    pub fn catalog_generation(&self) -> u32 {
        lock(&self.catalog).shown.generation()
    }

    /// Up to `limit` groups with sessions shown, from group `from` on, with
    /// their numbers.
    pub fn groups_from(&self, by: By, from: usize, limit: usize) -> Vec<(u32, String)> {
        self.table().groups(by).listed_from(from, limit)
    }

    /// The group named `name`, when it has sessions.
    pub fn group_by_name(&self, by: By, name: &str) -> Option<u32> {
        self.table().groups(by).by_name(name)
    }

    /// Up to `limit` sessions shown of group `number`, from its member `from`
    /// on, each with its place among the members.
    pub fn members_from(
        &self,
        by: By,
        number: u32,
        from: usize,
        limit: usize,
    ) -> Vec<(usize, Arc<Slot>)> {
        let table = self.table();
        table
            .groups(by)
            .members(number)
            .iter()
            .enumerate()
            .skip(from)
            .filter_map(|(k, &slot)| Some((k, table.get(slot)?)))
            .filter(|(_, slot)| !slot.is_gone())
            .take(limit)
            .collect()
    }

    /// The creation time of group `number`'s newest session, when it has one.
    pub fn newest_created(&self, by: By, number: u32) -> Option<i64> {
        let table = self.table();
        table
            .groups(by)
            .members(number)
            .iter()
            .filter_map(|&slot| table.get(slot))
            .map(|slot| lock(&slot.listed).created_at)
            .max()
    }

    /// Slots in the table, removed sessions included.
    pub fn len(&self) -> usize {
        self.table().len()
    }
}
