//! The filesystem model: inodes, lookups, listings, reads and control files, in
//! plain Rust types. It knows nothing of fuser; the adapter turns kernel requests
//! into calls here and [`Error`]s into errnos.

pub mod control;
pub mod inode;
mod steps;
pub mod writeback;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant, SystemTime};

use crate::error::{Error, Result};
use crate::model::Refusal;
use crate::model::ids::encode_segment;
use crate::render::event_file;
use crate::store::memory::MemoryStore;
use crate::store::{Backend, Listing, SessionKey};
use crate::view::{Content, SessionView, ViewFile};
use inode::{Ino, Node};
use writeback::Writeback;

/// How the mount presents files.
#[derive(Clone, Debug)]
pub struct FsConfig {
    pub uid: u32,
    pub gid: u32,
    /// `-o ro`: control files refuse writes.
    pub read_only: bool,
    /// How long a session whose last turn is open must be quiet before it is
    /// shown repaired (closed with synthetic events).
    pub grace: Duration,
    /// Memory for indexed sessions and rendered files; least recently used
    /// sessions are dropped beyond it (and re-read when used again).
    pub cache_bytes: usize,
    /// The write-behind window for fork children.
    pub write_window: Duration,
    /// How often a used session's store revision is checked.
    pub recheck: Duration,
    /// `-o repair`: make the crash repair of quiet sessions durable in the store.
    pub repair: bool,
}

impl Default for FsConfig {
    fn default() -> FsConfig {
        FsConfig {
            uid: 0,
            gid: 0,
            read_only: false,
            grace: Duration::from_secs(10),
            cache_bytes: 1 << 30,
            write_window: Duration::from_millis(200),
            recheck: Duration::from_millis(250),
            repair: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
}

/// The attributes of one node, in the adapter's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub kind: Kind,
    pub size: u64,
    pub perm: u16,
    pub nlink: u32,
    pub mtime: SystemTime,
    pub uid: u32,
    pub gid: u32,
}

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub ino: u64,
    pub kind: Kind,
    pub name: String,
}

/// An entry of `readdirplus`.
pub struct EntryPlus {
    pub entry: DirEntry,
    pub attr: Attr,
    /// False when `attr` is a stand-in that must not be cached.
    pub cacheable: bool,
}

/// Where a session's events come from.
#[derive(Clone, Debug)]
enum Source {
    Store(SessionKey),
    /// A fork child accepted but not yet durable.
    Pending,
}

struct Slot {
    name: String,
    id: String,
    listing: Mutex<Listing>,
    source: Mutex<Source>,
    /// A reason found outside the log (a duplicate id) that overrides reading it.
    refusal: Option<Refusal>,
    view: Mutex<Option<SessionView>>,
    checked: Mutex<Instant>,
    last_used: AtomicU64,
    control: Mutex<control::ForkLog>,
}

#[derive(Default)]
struct Table {
    slots: Vec<Arc<Slot>>,
    by_name: BTreeMap<String, u32>,
    listed_at: Option<Instant>,
    /// The store's listing revision at the last listing.
    listed_revision: Option<String>,
}

/// An open file: a snapshot of its bytes, so a reader never sees size and content
/// disagree. Generated files that only grow may move on to a newer snapshot.
struct Handle {
    ino: u64,
    content: Content,
}

pub struct SessionFs {
    store: Arc<dyn Backend>,
    memory: Arc<MemoryStore>,
    writeback: Arc<Writeback>,
    config: FsConfig,
    table: RwLock<Table>,
    handles: Mutex<HashMap<u64, Handle>>,
    next_handle: AtomicU64,
    clock: AtomicU64,
    started: SystemTime,
    /// Inodes whose content changed while a request refreshed them; the kernel is
    /// told to drop its caches of them by the follow thread, never from inside a
    /// request (that can deadlock).
    stale: Mutex<Vec<u64>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

const SESSION_FILES: [(&str, Node); 9] = [
    ("header.json", Node::Header),
    ("events", Node::Events),
    ("surface.jsonl", Node::Surface),
    ("transcript.md", Node::Transcript),
    ("index.jsonl", Node::Index),
    ("fork", Node::Fork),
    ("flush", Node::Flush),
    ("children", Node::Children),
    ("steps", Node::Steps),
];

impl SessionFs {
    pub fn new(store: Box<dyn Backend>, config: FsConfig) -> Arc<SessionFs> {
        let store: Arc<dyn Backend> = Arc::from(store);
        let memory = Arc::new(MemoryStore::default());
        let writeback = Writeback::new(store.clone(), memory.clone(), config.write_window);
        let fs = Arc::new(SessionFs {
            store,
            memory,
            writeback: writeback.clone(),
            config,
            table: RwLock::default(),
            handles: Mutex::default(),
            next_handle: AtomicU64::new(1),
            clock: AtomicU64::new(0),
            started: SystemTime::now(),
            stale: Mutex::default(),
        });
        let weak = Arc::downgrade(&fs);
        writeback.set_durable_hook(Box::new(move |id, key| {
            if let Some(fs) = weak.upgrade() {
                fs.made_durable(id, key);
            }
        }));
        fs
    }

    pub fn writeback(&self) -> Arc<Writeback> {
        self.writeback.clone()
    }

    // ---- the session table -------------------------------------------------

    /// Lists the store again when the last listing is older than `max_age`.
    fn relist(&self, max_age: Duration) {
        if let Some(at) = self
            .table
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .listed_at
            && at.elapsed() < max_age
        {
            return;
        }
        let revision = self.store.listing_revision();
        let unchanged = revision.is_some()
            && revision
                == self
                    .table
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .listed_revision;
        if unchanged {
            self.table
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .listed_at = Some(Instant::now());
            return;
        }
        let listings = self.store.list();
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
        let mut table = self.table.write().unwrap_or_else(|p| p.into_inner());
        for listing in by_path {
            let name = listing.raw_name.clone().unwrap_or_default();
            if !table.by_name.contains_key(&name) {
                let source = Source::Store(listing.key.clone());
                Self::add_slot(&mut table, name, listing.id.clone(), listing, source, None);
            }
        }
        for (id, mut group) in by_id {
            let Some(name) = mount_name(&id).filter(|n| n.len() <= NAME_MAX) else {
                let shown: String = id.chars().take(40).collect();
                log::warn!(
                    "session {shown:?}… is not shown: its name would be longer than {NAME_MAX} bytes"
                );
                continue;
            };
            if let Some(&slot) = table.by_name.get(&name) {
                // Known: a pending child may have become durable meanwhile.
                if group.len() == 1 {
                    let slot = table.slots[slot as usize].clone();
                    *lock(&slot.listing) = group.remove(0);
                }
                continue;
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
            Self::add_slot(&mut table, name, id, listing, source, refusal);
        }
        table.listed_at = Some(Instant::now());
        table.listed_revision = revision;
    }

    fn add_slot(
        table: &mut Table,
        name: String,
        id: String,
        listing: Listing,
        source: Source,
        refusal: Option<Refusal>,
    ) -> u32 {
        let number = table.slots.len() as u32;
        table.slots.push(Arc::new(Slot {
            name: name.clone(),
            id,
            listing: Mutex::new(listing),
            source: Mutex::new(source),
            refusal,
            view: Mutex::new(None),
            checked: Mutex::new(Instant::now()),
            last_used: AtomicU64::new(0),
            control: Mutex::default(),
        }));
        table.by_name.insert(name, number);
        number
    }

    fn slot(&self, number: u32) -> Result<Arc<Slot>> {
        let table = self.table.read().unwrap_or_else(|p| p.into_inner());
        table
            .slots
            .get(number as usize)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("no session slot {number}")))
    }

    fn slot_by_name(&self, name: &str) -> Option<u32> {
        self.table
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .by_name
            .get(name)
            .copied()
    }

    fn slot_by_id(&self, id: &str) -> Option<u32> {
        mount_name(id).and_then(|name| self.slot_by_name(&name))
    }

    fn backend_of(&self, slot: &Slot) -> (Arc<dyn Backend>, SessionKey) {
        match &*lock(&slot.source) {
            Source::Store(key) => (self.store.clone(), key.clone()),
            Source::Pending => (
                self.memory.clone() as Arc<dyn Backend>,
                SessionKey::Row(slot.id.clone()),
            ),
        }
    }

    /// A pending child became durable: serve it from the store from now on.
    fn made_durable(&self, id: &str, key: SessionKey) {
        let Some(number) = self.slot_by_id(id) else {
            return;
        };
        let Ok(slot) = self.slot(number) else { return };
        // Listing and source change together, so no reader pairs one with the other.
        let listing = match self.store.header(&key) {
            Ok(header) => Listing::of(header, key.clone()),
            Err(reason) => Listing {
                id: id.to_string(),
                key: key.clone(),
                header: Err(reason.to_string()),
                raw_name: None,
            },
        };
        let mut view = lock(&slot.view);
        *lock(&slot.listing) = listing;
        *lock(&slot.source) = Source::Store(key);
        *view = None;
    }

    /// The inodes of a session whose content may have changed.
    fn session_inodes(number: u32) -> impl Iterator<Item = u64> {
        [
            Node::Dir,
            Node::Header,
            Node::Events,
            Node::Surface,
            Node::Transcript,
            Node::Index,
            Node::Steps,
        ]
        .into_iter()
        .map(move |node| Ino::Session(number, node).encode())
    }

    /// The session's view, loaded (and kept current) on demand.
    fn view<'a>(&self, slot: &'a Slot) -> MutexGuard<'a, Option<SessionView>> {
        slot.last_used.store(
            self.clock.fetch_add(1, Ordering::Relaxed),
            Ordering::Relaxed,
        );
        loop {
            let mut guard = lock(&slot.view);
            let (backend, _) = self.backend_of(slot);
            match guard.as_mut() {
                None => {
                    let listing = lock(&slot.listing).clone();
                    let view = match &slot.refusal {
                        Some(reason) => SessionView::refused(&listing, reason.clone()),
                        None => SessionView::load(backend.as_ref(), &listing, self.config.grace),
                    };
                    if let Some(reason) = view_refusal(&view) {
                        log::warn!("session {:?} cannot be read: {reason}", slot.id);
                    }
                    *guard = Some(view);
                    *lock(&slot.checked) = Instant::now();
                    drop(guard);
                    // Other views may be dropped to stay in budget. This one may be
                    // dropped meanwhile too (a fork child became durable): load again.
                    self.evict_beyond_budget(slot);
                }
                Some(view) => {
                    let mut checked = lock(&slot.checked);
                    if checked.elapsed() >= self.config.recheck && slot.refusal.is_none() {
                        *checked = Instant::now();
                        if view.refresh(backend.as_ref())
                            && let Some(number) = self.slot_by_name(&slot.name)
                        {
                            lock(&self.stale).extend(Self::session_inodes(number));
                        }
                    }
                    drop(checked);
                    return guard;
                }
            }
        }
    }

    fn all_slots(&self) -> Vec<Arc<Slot>> {
        self.table
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .slots
            .clone()
    }

    /// Drops the least recently used views while the cache is over budget.
    fn evict_beyond_budget(&self, keep: &Slot) {
        let mut loaded: Vec<(u64, usize, Arc<Slot>)> = self
            .all_slots()
            .into_iter()
            .filter_map(|s| {
                let memory = s.view.try_lock().ok()?.as_ref()?.memory();
                Some((s.last_used.load(Ordering::Relaxed), memory, s))
            })
            .collect();
        let mut total: usize = loaded.iter().map(|(_, m, _)| m).sum();
        loaded.sort_by_key(|(used, _, _)| *used);
        for (_, memory, slot) in loaded {
            if total <= self.config.cache_bytes {
                break;
            }
            if std::ptr::eq(slot.as_ref(), keep) {
                continue;
            }
            if let Ok(mut view) = slot.view.try_lock() {
                *view = None;
                total -= memory;
            }
        }
    }

    /// Re-checks every loaded session against the store and returns the inodes
    /// whose content changed, so the adapter can tell the kernel to drop its caches.
    pub fn poll_changes(&self) -> Vec<u64> {
        let slots: Vec<(u32, Arc<Slot>)> = {
            let table = self.table.read().unwrap_or_else(|p| p.into_inner());
            table
                .slots
                .iter()
                .cloned()
                .enumerate()
                .map(|(i, s)| (i as u32, s))
                .collect()
        };
        let mut changed = std::mem::take(&mut *lock(&self.stale));
        for (number, slot) in slots {
            if slot.refusal.is_some() {
                continue;
            }
            let (backend, _) = self.backend_of(&slot);
            let Ok(mut guard) = slot.view.try_lock() else {
                continue;
            };
            let Some(view) = guard.as_mut() else { continue };
            *lock(&slot.checked) = Instant::now();
            let mut refreshed = view.refresh(backend.as_ref());
            if self.config.repair && matches!(*lock(&slot.source), Source::Store(_)) {
                refreshed |= self.repair(&slot, view);
            }
            if refreshed {
                changed.extend(Self::session_inodes(number));
            }
        }
        changed
    }

    /// Writes a quiet session's crash repair into the store (`-o repair`), the way
    /// the Harness's own load would, so the Harness later resumes it balanced.
    fn repair(&self, slot: &Slot, view: &mut SessionView) -> bool {
        let Some((keep, revision, tail)) = view.repair_plan(self.store.as_ref()) else {
            return false;
        };
        match self.store.repair(&view.key, &keep, &revision, &tail) {
            Ok(()) => {
                log::info!(
                    "repaired session {:?}: kept {} stored events, appended {} events",
                    slot.id,
                    keep.events,
                    tail.len()
                );
                view.refresh(self.store.as_ref())
            }
            Err(e) => {
                log::warn!("could not repair session {:?}: {e}", slot.id);
                false
            }
        }
    }

    // ---- attributes ------------------------------------------------------------

    fn attr(&self, ino: u64, kind: Kind, size: u64, perm: u16, mtime: SystemTime) -> Attr {
        let nlink = if kind == Kind::Dir { 2 } else { 1 };
        Attr {
            ino,
            kind,
            size,
            perm,
            nlink,
            mtime,
            uid: self.config.uid,
            gid: self.config.gid,
        }
    }

    fn control_perm(&self) -> u16 {
        if self.config.read_only { 0o444 } else { 0o644 }
    }

    fn root_mtime(&self) -> SystemTime {
        self.started
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        match Ino::decode(ino).ok_or_else(|| Error::NotFound(format!("unknown inode {ino}")))? {
            Ino::Root => Ok(self.attr(ino, Kind::Dir, 0, 0o555, self.root_mtime())),
            Ino::RootFlush => {
                Ok(self.attr(ino, Kind::File, 0, self.control_perm(), self.root_mtime()))
            }
            Ino::Session(number, node) => self.session_attr(number, node),
        }
    }

    fn session_attr(&self, number: u32, node: Node) -> Result<Attr> {
        let slot = self.slot(number)?;
        let ino = Ino::Session(number, node).encode();
        if node == Node::Dir {
            // A session directory's time is the session's creation: known from the
            // listing alone (listing the root reads no logs), and it never changes
            // while a reader walks the directory (tar checks that).
            let created = lock(&slot.listing)
                .header
                .as_ref()
                .map(|h| h.created_at)
                .unwrap_or(0);
            let mtime =
                SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(created).unwrap_or(0));
            return Ok(self.attr(ino, Kind::Dir, 0, 0o555, mtime));
        }
        let mut guard = self.view(&slot);
        let view = guard
            .as_mut()
            .ok_or_else(|| Error::NotFound("session vanished".into()))?;
        let mtime = view.mtime();
        let present = self.node_present(&slot, view, node);
        if !present {
            return Err(Error::NotFound(format!("{} has no such file", slot.name)));
        }
        let (backend, key) = self.backend_of(&slot);
        let size_of = |content: Content| content.bytes.len() as u64;
        let attr = match node {
            Node::Dir | Node::Events | Node::Children => self.attr(ino, Kind::Dir, 0, 0o555, mtime),
            Node::Steps | Node::Call(_) | Node::CallFile(..) => {
                self.steps_attr(&slot, view, ino, node, mtime)?
            }
            Node::Parent | Node::Child(_) => {
                let target = self.symlink_target(&slot, view, node)?;
                self.attr(ino, Kind::Symlink, target.len() as u64, 0o777, mtime)
            }
            Node::Fork | Node::Flush => self.attr(ino, Kind::File, 0, self.control_perm(), mtime),
            Node::Error => self.attr(
                ino,
                Kind::File,
                view.error_text().map_or(0, |t| t.len() as u64),
                0o444,
                mtime,
            ),
            Node::Header => {
                let size = match view.indexed_mut() {
                    Some(indexed) => {
                        size_of(indexed.file(backend.as_ref(), &key, ViewFile::Header)?)
                    }
                    None => crate::render::header_json(
                        view.header()
                            .ok_or_else(|| Error::NotFound("no header".into()))?,
                        None,
                    )
                    .len() as u64,
                };
                self.attr(ino, Kind::File, size, 0o444, mtime)
            }
            Node::Surface | Node::Transcript | Node::Index => {
                let indexed = view
                    .indexed_mut()
                    .ok_or_else(|| Error::NotFound("no such view".into()))?;
                let size = size_of(indexed.file(backend.as_ref(), &key, view_file(node))?);
                self.attr(ino, Kind::File, size, 0o444, mtime)
            }
            Node::Event(seq) => {
                let indexed = view
                    .indexed()
                    .ok_or_else(|| Error::NotFound("no events".into()))?;
                let event = indexed.event(backend.as_ref(), &key, seq)?;
                let time = indexed.event_time(seq).map_or(mtime, |ms| {
                    SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
                });
                self.attr(
                    ino,
                    Kind::File,
                    event_file::content(&event).len() as u64,
                    0o444,
                    time,
                )
            }
        };
        Ok(attr)
    }

    /// Whether a node exists in this session's directory.
    fn node_present(&self, slot: &Slot, view: &SessionView, node: Node) -> bool {
        let readable = view.indexed().is_some();
        match node {
            Node::Dir | Node::Children => true,
            Node::Header => view.header().is_some(),
            Node::Events | Node::Surface | Node::Transcript | Node::Index | Node::Fork => readable,
            Node::Flush => true,
            Node::Error => !readable,
            Node::Parent => view
                .header()
                .and_then(|h| h.parent_session.as_ref())
                .is_some(),
            Node::Event(seq) => seq < view.event_count(),
            Node::Child(child) => self.children_of(&slot.id).contains(&child),
            Node::Steps | Node::Call(_) | Node::CallFile(..) => {
                Self::steps_node_present(view, node)
            }
        }
    }

    fn symlink_target(&self, _slot: &Slot, view: &SessionView, node: Node) -> Result<String> {
        match node {
            Node::Parent => {
                let parent = view
                    .header()
                    .and_then(|h| h.parent_session.clone())
                    .ok_or_else(|| Error::NotFound("no parent".into()))?;
                Ok(format!("../{}", mount_name(&parent).unwrap_or_default()))
            }
            Node::Child(child) => Ok(format!("../../{}", self.slot(child)?.name)),
            _ => Err(Error::Invalid("not a symlink".into())),
        }
    }

    /// Slots whose header names `parent_id` as their parent.
    fn children_of(&self, parent_id: &str) -> Vec<u32> {
        self.all_slots()
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                lock(&s.listing)
                    .header
                    .as_ref()
                    .is_ok_and(|h| h.parent_session.as_deref() == Some(parent_id))
            })
            .map(|(i, _)| i as u32)
            .collect()
    }

    // ---- lookup and listing ------------------------------------------------------

    pub fn lookup(&self, parent: u64, name: &str) -> Result<Attr> {
        match Ino::decode(parent)
            .ok_or_else(|| Error::NotFound(format!("unknown inode {parent}")))?
        {
            Ino::Root => {
                if name == "flush" {
                    return self.getattr(inode::ROOT_FLUSH);
                }
                // New sessions must appear at once: re-list on a miss.
                let number = match self.slot_by_name(name) {
                    Some(n) => n,
                    None => {
                        self.relist(Duration::from_millis(100));
                        self.slot_by_name(name)
                            .ok_or_else(|| Error::NotFound(format!("no session named {name}")))?
                    }
                };
                self.getattr(Ino::Session(number, Node::Dir).encode())
            }
            Ino::Session(number, Node::Dir) => {
                let node = match name {
                    "error" => Node::Error,
                    "parent" => Node::Parent,
                    _ => SESSION_FILES
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map(|(_, node)| *node)
                        .ok_or_else(|| Error::NotFound(format!("no file {name}")))?,
                };
                self.getattr(Ino::Session(number, node).encode())
            }
            Ino::Session(number, Node::Events) => {
                let seq = event_file::seq_of(name)
                    .ok_or_else(|| Error::NotFound(format!("no event file {name}")))?;
                let slot = self.slot(number)?;
                let expected = {
                    let guard = self.view(&slot);
                    guard
                        .as_ref()
                        .and_then(|v| v.indexed())
                        .and_then(|i| i.event_name(seq))
                };
                if expected.as_deref() != Some(name) {
                    return Err(Error::NotFound(format!("no event file {name}")));
                }
                self.getattr(Ino::Session(number, Node::Event(seq)).encode())
            }
            Ino::Session(number, Node::Children) => {
                let child = self
                    .slot_by_name(name)
                    .ok_or_else(|| Error::NotFound(format!("no child {name}")))?;
                let slot = self.slot(number)?;
                if !self.children_of(&slot.id).contains(&child) {
                    return Err(Error::NotFound(format!(
                        "{name} is not a child of {}",
                        slot.name
                    )));
                }
                self.getattr(Ino::Session(number, Node::Child(child)).encode())
            }
            Ino::Session(number, node @ (Node::Steps | Node::Call(_))) => {
                self.steps_lookup(number, node, name)
            }
            _ => Err(Error::NotDir(format!("inode {parent} is not a directory"))),
        }
    }

    /// The number of entries of a directory (for listing by offset).
    pub fn readdir(&self, ino: u64, offset: u64, limit: usize) -> Result<Vec<DirEntry>> {
        let decoded =
            Ino::decode(ino).ok_or_else(|| Error::NotFound(format!("unknown inode {ino}")))?;
        if let Ino::Session(number, Node::Events) = decoded {
            // events/ can be huge: entries are generated by index, never all at once.
            let slot = self.slot(number)?;
            let guard = self.view(&slot);
            let indexed = guard
                .as_ref()
                .and_then(|v| v.indexed())
                .ok_or_else(|| Error::NotFound("no events".into()))?;
            let total = indexed.stored_count() + indexed.closers().len() as u64;
            return Ok((offset..total.min(offset.saturating_add(limit as u64)))
                .filter_map(|seq| {
                    Some(DirEntry {
                        ino: Ino::Session(number, Node::Event(seq)).encode(),
                        kind: Kind::File,
                        name: indexed.event_name(seq)?,
                    })
                })
                .collect());
        }
        let all = self.list_dir(decoded)?;
        Ok(all.into_iter().skip(offset as usize).take(limit).collect())
    }

    /// Entries with their attributes (`readdirplus`), so that `ls -l` of a large
    /// directory needs no lookup per entry. A generated view's size costs a
    /// render, so its attributes are given as already stale instead: the kernel
    /// asks for them again before any use, as it does after a plain `readdir`.
    pub fn readdir_plus(&self, ino: u64, offset: u64, limit: usize) -> Result<Vec<EntryPlus>> {
        Ok(self
            .readdir(ino, offset, limit)?
            .into_iter()
            .map(|entry| {
                let known = match is_rewritable(entry.ino) {
                    true => None,
                    false => self.getattr(entry.ino).ok(),
                };
                let cacheable = known.is_some();
                let attr = known.unwrap_or_else(|| {
                    self.attr(entry.ino, entry.kind, 0, 0o444, SystemTime::UNIX_EPOCH)
                });
                EntryPlus {
                    entry,
                    attr,
                    cacheable,
                }
            })
            .collect())
    }

    fn list_dir(&self, ino: Ino) -> Result<Vec<DirEntry>> {
        match ino {
            Ino::Root => {
                self.relist(Duration::from_secs(1));
                let table = self.table.read().unwrap_or_else(|p| p.into_inner());
                let mut entries = vec![DirEntry {
                    ino: inode::ROOT_FLUSH,
                    kind: Kind::File,
                    name: "flush".into(),
                }];
                // Slot order: slots are only ever appended, so a listing offset keeps
                // naming the same entry while sessions appear mid-listing.
                entries.extend(
                    table
                        .slots
                        .iter()
                        .enumerate()
                        .map(|(number, slot)| DirEntry {
                            ino: Ino::Session(number as u32, Node::Dir).encode(),
                            kind: Kind::Dir,
                            name: slot.name.clone(),
                        }),
                );
                Ok(entries)
            }
            Ino::Session(number, Node::Dir) => {
                let slot = self.slot(number)?;
                let guard = self.view(&slot);
                let view = guard
                    .as_ref()
                    .ok_or_else(|| Error::NotFound("session vanished".into()))?;
                let mut entries = Vec::new();
                let mut push = |name: &str, node: Node, kind: Kind| {
                    if self.node_present(&slot, view, node) {
                        entries.push(DirEntry {
                            ino: Ino::Session(number, node).encode(),
                            kind,
                            name: name.to_string(),
                        });
                    }
                };
                for (name, node) in SESSION_FILES {
                    let kind = if matches!(node, Node::Events | Node::Children | Node::Steps) {
                        Kind::Dir
                    } else {
                        Kind::File
                    };
                    push(name, node, kind);
                }
                push("error", Node::Error, Kind::File);
                push("parent", Node::Parent, Kind::Symlink);
                Ok(entries)
            }
            Ino::Session(number, Node::Children) => {
                let slot = self.slot(number)?;
                Ok(self
                    .children_of(&slot.id)
                    .into_iter()
                    .filter_map(|child| {
                        let name = self.slot(child).ok()?.name.clone();
                        Some(DirEntry {
                            ino: Ino::Session(number, Node::Child(child)).encode(),
                            kind: Kind::Symlink,
                            name,
                        })
                    })
                    .collect())
            }
            Ino::Session(number, node @ (Node::Steps | Node::Call(_))) => {
                self.steps_list(number, node)
            }
            _ => Err(Error::NotDir("not a directory".into())),
        }
    }

    pub fn readlink(&self, ino: u64) -> Result<String> {
        let Some(Ino::Session(number, node @ (Node::Parent | Node::Child(_)))) = Ino::decode(ino)
        else {
            return Err(Error::Invalid("not a symlink".into()));
        };
        let slot = self.slot(number)?;
        let guard = self.view(&slot);
        let view = guard
            .as_ref()
            .ok_or_else(|| Error::NotFound("session vanished".into()))?;
        self.symlink_target(&slot, view, node)
    }

    // ---- open, read, write ------------------------------------------------------

    /// Opens a file; returns the handle and whether reads must bypass the page
    /// cache (control files, computed per read, and views that can be rewritten).
    pub fn open(&self, ino: u64, write: bool) -> Result<(u64, bool)> {
        let decoded =
            Ino::decode(ino).ok_or_else(|| Error::NotFound(format!("unknown inode {ino}")))?;
        let is_control = matches!(
            decoded,
            Ino::RootFlush | Ino::Session(_, Node::Fork | Node::Flush)
        );
        if write && !is_control {
            return Err(Error::ReadOnly("generated files are read-only".into()));
        }
        if write && self.config.read_only {
            return Err(Error::ReadOnly("the mount is read-only (-o ro)".into()));
        }
        let content = if is_control {
            Content {
                bytes: Arc::new(Vec::new()),
                lineage: 0,
            }
        } else {
            self.content(decoded)?
        };
        let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
        lock(&self.handles).insert(fh, Handle { ino, content });
        // The page cache is shared by every open of an inode, so it could mix the
        // bytes of two snapshots; files that can be rewritten bypass it. Logged
        // events never change and keep the cache.
        Ok((fh, is_control || is_rewritable(ino)))
    }

    /// The current bytes of a generated file.
    fn content(&self, ino: Ino) -> Result<Content> {
        let Ino::Session(number, node) = ino else {
            return Err(Error::IsDir("not a file".into()));
        };
        let slot = self.slot(number)?;
        let mut guard = self.view(&slot);
        let view = guard
            .as_mut()
            .ok_or_else(|| Error::NotFound("session vanished".into()))?;
        if !self.node_present(&slot, view, node) {
            return Err(Error::NotFound(format!("{} has no such file", slot.name)));
        }
        let (backend, key) = self.backend_of(&slot);
        let static_content = |bytes: Vec<u8>| Content {
            bytes: Arc::new(bytes),
            lineage: 0,
        };
        match node {
            Node::Header if view.indexed().is_none() => {
                let header = view
                    .header()
                    .ok_or_else(|| Error::NotFound("no header".into()))?;
                Ok(static_content(crate::render::header_json(header, None)))
            }
            Node::Header | Node::Surface | Node::Transcript | Node::Index => {
                let indexed = view
                    .indexed_mut()
                    .ok_or_else(|| Error::NotFound("no such view".into()))?;
                let content = indexed.file(backend.as_ref(), &key, view_file(node))?;
                drop(guard);
                // A rendered file adds to what the cache holds.
                self.evict_beyond_budget(&slot);
                Ok(content)
            }
            Node::Error => Ok(static_content(view.error_text().unwrap_or_default())),
            Node::CallFile(call, file) => {
                let content = self.call_content(&slot, view, call, file)?;
                drop(guard);
                self.evict_beyond_budget(&slot);
                Ok(content)
            }
            Node::Event(seq) => {
                let indexed = view
                    .indexed()
                    .ok_or_else(|| Error::NotFound("no events".into()))?;
                Ok(static_content(event_file::content(&indexed.event(
                    backend.as_ref(),
                    &key,
                    seq,
                )?)))
            }
            _ => Err(Error::IsDir("not a regular file".into())),
        }
    }

    pub fn read(&self, fh: u64, offset: u64, size: u32) -> Result<ReadData> {
        let (ino, mut content) = {
            let handles = lock(&self.handles);
            let handle = handles
                .get(&fh)
                .ok_or_else(|| Error::Invalid(format!("unknown file handle {fh}")))?;
            (handle.ino, handle.content.clone())
        };
        let decoded = Ino::decode(ino).ok_or_else(|| Error::NotFound("unknown inode".into()))?;
        let status = match decoded {
            Ino::RootFlush => Some(self.writeback.status(None)),
            Ino::Session(number, Node::Flush) => {
                let slot = self.slot(number)?;
                Some(self.writeback.status(Some(&slot.id)))
            }
            Ino::Session(number, Node::Fork) => {
                let slot = self.slot(number)?;
                Some(lock(&slot.control).status(&slot.id))
            }
            _ => None,
        };
        if let Some(status) = status {
            return Ok(ReadData::new(Arc::new(status.into_bytes()), offset, size));
        }
        if offset + u64::from(size) > content.bytes.len() as u64 {
            content = self.follow_growth(fh, decoded, content);
        }
        Ok(ReadData::new(content.bytes, offset, size))
    }

    /// A file that only grew since it was opened may be read further (`tail -f`);
    /// a rewritten one keeps serving the snapshot taken at open.
    fn follow_growth(&self, fh: u64, ino: Ino, content: Content) -> Content {
        match self.content(ino) {
            Ok(current)
                if current.lineage == content.lineage
                    && current.bytes.len() > content.bytes.len()
                    && current.bytes.starts_with(&content.bytes) =>
            {
                if let Some(handle) = lock(&self.handles).get_mut(&fh) {
                    handle.content = current.clone();
                }
                current
            }
            _ => content,
        }
    }

    /// Attributes as seen through an open file: its size is the size of the
    /// snapshot that handle reads, so `fstat` and `read` never disagree.
    pub fn getattr_open(&self, ino: u64, fh: u64) -> Result<Attr> {
        let mut attr = self.getattr(ino)?;
        let held = lock(&self.handles)
            .get(&fh)
            .filter(|h| h.ino == ino)
            .map(|h| h.content.clone());
        if let (Some(content), Some(decoded)) = (held, Ino::decode(ino))
            && !matches!(
                decoded,
                Ino::RootFlush | Ino::Session(_, Node::Fork | Node::Flush)
            )
        {
            attr.size = self.follow_growth(fh, decoded, content).bytes.len() as u64;
        }
        Ok(attr)
    }

    pub fn release(&self, fh: u64) {
        lock(&self.handles).remove(&fh);
    }

    /// A write to a control file: one write is one command, acted on before the
    /// write returns, so the write's status is the command's status.
    pub fn write(&self, ino: u64, data: &[u8]) -> Result<usize> {
        if self.config.read_only {
            return Err(Error::ReadOnly("the mount is read-only (-o ro)".into()));
        }
        match Ino::decode(ino) {
            Some(Ino::RootFlush) => self.flush_command(None, data),
            Some(Ino::Session(number, Node::Flush)) => {
                let slot = self.slot(number)?;
                self.flush_command(Some(&slot.id), data)
            }
            Some(Ino::Session(number, Node::Fork)) => self.fork_command(number, data),
            _ => Err(Error::ReadOnly(
                "only the fork and flush control files can be written".into(),
            )),
        }
    }

    /// `setattr` with a size: the `O_TRUNC` of `echo N > fork` is a no-op on
    /// control files; generated files cannot be changed.
    pub fn truncate(&self, ino: u64) -> Result<Attr> {
        match Ino::decode(ino) {
            Some(Ino::RootFlush | Ino::Session(_, Node::Fork | Node::Flush))
                if !self.config.read_only =>
            {
                self.getattr(ino)
            }
            _ => Err(Error::ReadOnly("generated files are read-only".into())),
        }
    }

    fn flush_command(&self, session: Option<&str>, data: &[u8]) -> Result<usize> {
        control::parse_flush_command(data).map_err(Error::Invalid)?;
        match self.writeback.flush(session) {
            Ok(_) => Ok(data.len()),
            Err(why) => Err(Error::Io {
                errno: libc::EIO,
                message: why,
            }),
        }
    }

    fn fork_command(&self, number: u32, data: &[u8]) -> Result<usize> {
        let slot = self.slot(number)?;
        // The reason names the session: the adapter logs it, and `cat fork` shows it.
        let result = self.fork(&slot, data).map_err(|e| match e {
            Error::Invalid(m) => Error::Invalid(format!("fork of {:?} refused: {m}", slot.id)),
            Error::Exists(m) => Error::Exists(format!("fork of {:?} refused: {m}", slot.id)),
            Error::NameTooLong(m) => {
                Error::NameTooLong(format!("fork of {:?} refused: {m}", slot.id))
            }
            other => other,
        });
        let mut log = lock(&slot.control);
        match &result {
            Ok(child) => log.record_success(child.clone()),
            Err(e) => log.record_error(e.to_string()),
        }
        result.map(|_| data.len())
    }

    fn fork(&self, slot: &Slot, data: &[u8]) -> Result<control::ForkRecord> {
        let (boundary, name) =
            crate::model::fork::parse_fork_command(data).map_err(Error::Invalid)?;
        let (backend, key) = self.backend_of(slot);
        let (parent_header, seed) = {
            let guard = self.view(slot);
            let view = guard
                .as_ref()
                .ok_or_else(|| Error::NotFound("session vanished".into()))?;
            let indexed = view.indexed().ok_or_else(|| {
                Error::Invalid(format!(
                    "session {:?} cannot be read, so it cannot be forked",
                    slot.id
                ))
            })?;
            // The boundary is checked against the stored events, never the repaired view.
            indexed
                .fold()
                .turns()
                .check(boundary)
                .map_err(|refusal| Error::Invalid(refusal.to_string()))?;
            let seed = (0..=boundary)
                .map(|seq| indexed.event(backend.as_ref(), &key, seq))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            (indexed.header().clone(), seed)
        };
        let child_id = match name {
            Some(name) => {
                if self.store.contains(&name)
                    || self.memory.contains(&name)
                    || self.slot_by_id(&name).is_some()
                {
                    return Err(Error::Exists(format!(
                        "a session named {name:?} already exists in the store"
                    )));
                }
                name
            }
            None => loop {
                let uuid = crate::random::uuid_v4().map_err(|e| Error::Io {
                    errno: libc::EIO,
                    message: format!("cannot make a child id: {e}"),
                })?;
                let id = format!("session-{uuid}");
                if !self.store.contains(&id) && self.slot_by_id(&id).is_none() {
                    break id;
                }
            },
        };
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as i64;
        let header = crate::model::fork::child_header(&parent_header, &child_id, boundary, now);
        let events = crate::model::fork::child_events(seed, now);
        let name = mount_name(&child_id)
            .ok_or_else(|| Error::Invalid("the child name is empty".into()))?;
        // The store keeps one directory per session, named by the encoded id.
        if encode_segment(&child_id).is_some_and(|segment| segment.len() > NAME_MAX) {
            return Err(Error::NameTooLong(format!(
                "the child name {child_id:?} encodes to more than {NAME_MAX} bytes"
            )));
        }
        let listing = Listing::of(header.clone(), SessionKey::Row(child_id.clone()));
        self.writeback.submit(header, events);
        {
            let mut table = self.table.write().unwrap_or_else(|p| p.into_inner());
            Self::add_slot(
                &mut table,
                name,
                child_id.clone(),
                listing,
                Source::Pending,
                None,
            );
        }
        log::info!(
            "forked session {:?} through seq {boundary} into {child_id:?}",
            slot.id
        );
        Ok(control::ForkRecord {
            boundary,
            child: child_id,
        })
    }

    /// Totals for `statfs`: sessions listed.
    pub fn session_count(&self) -> usize {
        self.table
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .slots
            .len()
    }
}

/// The longest directory name shown: Linux's NAME_MAX. Tools such as tar and
/// rsync cannot handle longer names, and JSONL stores cannot hold them.
const NAME_MAX: usize = 255;

/// A session's directory name in the mount: the Harness's own id encoding, except
/// that the id `flush` is shown as `~0066lush` (an escape no id encodes to), so the
/// root control file keeps its name and never collides with a session.
pub fn mount_name(id: &str) -> Option<String> {
    match encode_segment(id)? {
        name if name == "flush" => Some("~0066lush".into()),
        name => Some(name),
    }
}

/// Generated files whose content can be replaced, not only extended, while
/// mounted (a new title, a compaction, closers giving way to logged events):
/// their attributes are never cached by the kernel and reads bypass the page
/// cache, so `fstat` and `read` on one descriptor always agree.
pub fn is_rewritable(ino: u64) -> bool {
    matches!(
        Ino::decode(ino),
        Some(Ino::Session(
            _,
            Node::Header | Node::Surface | Node::Transcript | Node::Index | Node::CallFile(..)
        ))
    )
}

fn view_file(node: Node) -> ViewFile {
    match node {
        Node::Surface => ViewFile::Surface,
        Node::Transcript => ViewFile::Transcript,
        Node::Index => ViewFile::Index,
        _ => ViewFile::Header,
    }
}

fn view_refusal(view: &SessionView) -> Option<String> {
    match view.state() {
        crate::view::State::Unreadable(u) => Some(u.reason.message().to_string()),
        crate::view::State::Indexed(_) => None,
    }
}

/// The bytes a read returns: a range of a shared snapshot, so a large read is
/// answered without copying the file.
pub struct ReadData {
    bytes: Arc<Vec<u8>>,
    range: std::ops::Range<usize>,
}

impl ReadData {
    fn new(bytes: Arc<Vec<u8>>, offset: u64, size: u32) -> ReadData {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        let end = start.saturating_add(size as usize).min(bytes.len());
        ReadData {
            bytes,
            range: start..end,
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[self.range.clone()]
    }
}
