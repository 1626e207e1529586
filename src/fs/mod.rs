//! The filesystem model: inodes, lookups, listings, reads and control files, in
//! plain Rust types. It knows nothing of fuser; the adapter turns kernel requests
//! into calls here and [`Error`]s into errnos.
//!
//! [`SessionFs`] is a façade over owned subsystems, each with private state,
//! which import nothing of the façade:
//! - `sessions`: the sessions shown (slots, found by name, listed by
//!   position) and the listings of the store that add and remove them;
//! - `views`: the loaded views, least recently used first (`cache`), with
//!   their spilled transcripts ([`paged`]) and the watches that follow them
//!   ([`follow`]);
//! - [`control`]: the control files' one command grammar and the fork logs;
//! - `handles`: open files and their snapshots;
//! - [`writeback`]: making fork children durable;
//! - leaves: [`inode`] (inode numbers), `names` (directory names), `clock`
//!   (stored times as attribute times).
//!
//! The façade's requests are written by concern: this file (lookup, a file's
//! bytes), `readdir` (listings), `attr` (getattr, readlink), `open` (open,
//! read, release),
//! `write` (control commands, forks), `steps` (`steps/`), `streaming`
//! (`events/` listed while its session is read), [`setattr`] and `changes`
//! (a round of following the store).
//!
//! No operation walks every session: a lookup, a read, a listing batch and an
//! idle second cost the same in a store of 100,000 sessions as in a small one.
//! Only a listing of the root after the store changed lists the store.
//!
//! Lock order (a lock may be taken while holding those above it, never below):
//! 0. `Sessions::relisting`, held while the store is listed (never under a
//!    view; what the listing moved is re-read after it let go).
//!    `Sessions::streaming` is awaited by a root `readdir` with no lock held
//!    (it reads the table under it); the listing takes it alone to wake them.
//! 1. One session's view lock (`views`): held while it is loaded, refreshed
//!    or rendered. At most one is awaited at a time; eviction only
//!    `try_lock`s another session's view.
//! 2. `Sessions::table` (read or write). A view is never awaited while the
//!    table is held.
//! 3. Leaves, held briefly and never while taking another lock: a slot's
//!    `listed` and `refusal`; a view slot's `spilled`, `progress` (its scan's
//!    own lock is taken and awaited with no other lock held, but by the scan
//!    under its view) and `checked`; `Views`' slot list, `lru`, `stale` and
//!    spill queue; `Sessions::removed`; the fork logs; the handle table; the
//!    follow state's watches. The persistent index's locks are leaves too,
//!    taken under a view (a scan saved) or the listing (headers known): its
//!    save queue, then its pending count; its header table alone.

#![warn(missing_docs)]

mod attr;
mod cache;
mod catalog;
mod changes;
mod clock;
pub mod control;
pub mod follow;
mod groups;
mod handles;
mod names;
mod open;
mod readahead;
mod readdir;
pub use handles::{Caching, ReadData};
pub mod inode;
mod lists;
pub mod paged;
mod sessions;
pub mod setattr;
mod shown;
mod steps;
mod streaming;
mod views;
mod write;
pub mod writeback;

pub use names::mount_name;

use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use crate::error::{Error, Result};
use crate::store::memory::MemoryStore;
use crate::store::{Backend, Listing, SessionKey};
use crate::sync::lock;
use crate::view::{Content, FileId, Refused, SavedScans, SessionView};
use follow::Watched;
use inode::{Ino, Lists, Node};
use paged::{Spill, Spilled};
use sessions::{Relisted, Sessions, Slot, Streaming};
use views::{Opening, Views};
use writeback::Writeback;

/// Ends a streamed listing however its thread ends (a panic included), so
/// no reader waits for parts that will not come.
struct EndStreaming<'a>(&'a Sessions);

impl Drop for EndStreaming<'_> {
    fn drop(&mut self) {
        self.0.end_streaming();
    }
}

/// How the mount presents files.
#[derive(Clone, Debug)]
pub struct FsConfig {
    /// The owner every node shows.
    pub uid: u32,
    /// The group every node shows.
    pub gid: u32,
    /// Why control files refuse writes (`-o ro`, or an SQLite store on a
    /// network file system); `None`: they take them.
    pub read_only: Option<String>,
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
    /// How old the root listing may be before a listing from its start asks
    /// the store again.
    pub relist: Duration,
    /// `-o repair`: make the crash repair of quiet sessions durable in the store.
    pub repair: bool,
    /// `-o umask=`: fixed modes for every file (`0o444 & !umask`, directories
    /// also searchable) instead of the read bits of each session's stored file.
    pub umask: Option<u16>,
    /// The read bits of the store's own root, shown on the mount's root.
    pub store_read_bits: u16,
    /// `-o poll`: check used sessions every `recheck` instead of watching the
    /// store with inotify.
    pub poll: bool,
    /// Where sessions' scans are saved for the next mount (the persistent
    /// index); `None` (`-o noindex`): every mount reads each log whole.
    pub saved_scans: Option<Arc<dyn SavedScans>>,
    /// Build the next session ahead while sessions are used in listing order
    /// (`fs/readahead.rs`); `-o noreadahead` turns it off.
    pub readahead: bool,
}

impl Default for FsConfig {
    fn default() -> FsConfig {
        FsConfig {
            uid: 0,
            gid: 0,
            read_only: None,
            grace: Duration::from_secs(600),
            cache_bytes: 192 << 20,
            write_window: Duration::from_millis(200),
            recheck: Duration::from_millis(250),
            relist: Duration::from_secs(1),
            repair: false,
            umask: None,
            store_read_bits: 0o444,
            poll: false,
            saved_scans: None,
            readahead: true,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
/// What a node is, in the adapter's terms.
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
}

/// The attributes of one node, in the adapter's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    /// The inode number.
    pub ino: u64,
    /// What the node is.
    pub kind: Kind,
    /// The exact size: a file's bytes, a symlink's target length.
    pub size: u64,
    /// The permission bits.
    pub perm: u16,
    /// The link count.
    pub nlink: u32,
    /// The modification time.
    pub mtime: SystemTime,
    /// The owner.
    pub uid: u32,
    /// The group.
    pub gid: u32,
}

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's inode number.
    pub ino: u64,
    /// What the entry is.
    pub kind: Kind,
    /// The entry's name.
    pub name: String,
    /// Where a listing continues after this entry: the offset to pass to the
    /// next [`SessionFs::readdir`]. Entries that appear later never move it.
    pub next: u64,
}

/// An entry of `readdirplus`.
pub struct EntryPlus {
    /// The entry.
    pub entry: DirEntry,
    /// `None` when the size is costly to know now: the entry is listed without
    /// attributes, and the kernel looks the name up before any use.
    pub attr: Option<Attr>,
}

/// The filesystem model the adapter drives: one call per kernel request. A
/// façade over owned subsystems: the sessions shown (`sessions`), their
/// loaded views (`views`), the control files' state (`control`), open
/// files (`handles`) and the write-behind of fork children ([`writeback`]).
pub struct SessionFs {
    /// Itself, for the threads it starts (a session built in the background).
    this: Weak<SessionFs>,
    store: Arc<dyn Backend>,
    /// Fork children not yet durable.
    memory: Arc<MemoryStore>,
    writeback: Arc<Writeback>,
    config: FsConfig,
    sessions: Sessions,
    views: Views,
    readahead: readahead::ReadAhead,
    controls: control::Controls,
    handles: handles::Handles,
    started: SystemTime,
}

const SESSION_FILES: [(&str, Node, Kind); 12] = [
    // Rewritable files are shown in their current generation (`SessionFs::current`).
    ("header.json", Node::Header(0), Kind::File),
    ("events", Node::Events, Kind::Dir),
    ("surface.jsonl", Node::Surface(0), Kind::File),
    // Shown in its current lineage (`SessionFs::current`).
    ("transcript.md", Node::Transcript(0), Kind::File),
    ("index.jsonl", Node::Index(0), Kind::File),
    ("status", Node::Status(0), Kind::File),
    ("fork", Node::Fork, Kind::File),
    ("flush", Node::Flush, Kind::File),
    ("children", Node::Children, Kind::Dir),
    ("steps", Node::Steps, Kind::Dir),
    ("error", Node::Error, Kind::File),
    ("parent", Node::Parent, Kind::Symlink),
];

impl SessionFs {
    /// A filesystem over `store`, presented as `config` says.
    pub fn new(store: Box<dyn Backend>, config: FsConfig) -> Arc<SessionFs> {
        let store: Arc<dyn Backend> = Arc::from(store);
        let memory = Arc::new(MemoryStore::default());
        let writeback = Writeback::new(store.clone(), memory.clone(), config.write_window);
        let follow = follow::Follow::new(store.as_ref(), config.poll);
        let fs = Arc::new_cyclic(|this| SessionFs {
            this: this.clone(),
            sessions: Sessions::new(store.clone()),
            views: Views::new(
                follow,
                config.cache_bytes,
                config.grace,
                config.saved_scans.clone(),
            ),
            readahead: readahead::ReadAhead::default(),
            controls: control::Controls::default(),
            handles: handles::Handles::default(),
            store,
            memory,
            writeback: writeback.clone(),
            started: SystemTime::now(),
            config,
        });
        let weak = Arc::downgrade(&fs);
        writeback.set_durable_hook(Box::new(move |id, key| {
            if let Some(fs) = weak.upgrade() {
                fs.made_durable(id, key);
            }
        }));
        fs
    }

    /// Saves the scans that went on since they were saved (sessions that
    /// grew while mounted), as the mount ends: the next mount reads on from
    /// there.
    pub fn save_scans(&self) {
        self.views.save_unsaved();
    }

    /// The write-behind of fork children, for the thread that runs it.
    pub fn writeback(&self) -> Arc<Writeback> {
        self.writeback.clone()
    }

    /// The spilled transcripts, for the thread that hands them to the kernel.
    pub fn spill_receiver(&self) -> std::sync::mpsc::Receiver<Spill> {
        self.views.spill_receiver()
    }

    /// A pending child became durable: serve it from the store from now on.
    fn made_durable(&self, id: &str, key: SessionKey) {
        let Some(slot) = self.sessions.by_id(id).and_then(|n| self.slot(n).ok()) else {
            return;
        };
        let listing = match self.store.header(&key) {
            Ok(header) => Listing::of(header, key.clone()),
            Err(reason) => Listing {
                id: id.to_string(),
                key: key.clone(),
                header: Err(reason.to_string()),
                raw_name: None,
                mode: None,
                stored: None,
            },
        };
        self.reread(&slot, listing);
    }

    /// Serves a slot from another stored artifact from now on. Listing and
    /// source change together under the view's lock, so no reader pairs one
    /// with the other.
    fn reread(&self, slot: &Slot, listing: Listing) {
        let listed = self.sessions.listed(listing);
        self.views
            .replace(slot.number, || *lock(&slot.listed) = listed);
    }

    /// Lists the store again when the last listing is older than `max_age`,
    /// and acts on what it changed.
    fn relist(&self, max_age: Duration) {
        let Relisted {
            listed,
            removed,
            moved,
        } = self.sessions.relist(max_age);
        if listed {
            let follow = self.views.follow();
            follow.watch_awaiting(self.sessions.awaiting_dirs());
            // Sessions written lately are likely written again: a write to one
            // no one uses moves `latest` at once.
            let since = clock::ms_of(SystemTime::now() - WRITTEN_LATELY);
            let recent = self.sessions.written_since(since, follow::WRITES_WATCHED);
            follow.watch_writes(
                recent
                    .into_iter()
                    .filter_map(|(number, key)| Some((number, self.store.session_dir(&key)?)))
                    .collect(),
            );
        }
        for number in removed {
            self.views.forget(number);
        }
        for (slot, listing) in moved {
            self.reread(&slot, listing);
        }
    }

    /// Lists the store for a listing of the root from its start: the mount's
    /// first listing on a thread of its own, whose sessions the root's
    /// `readdir` answers part by part as it takes them in; any later one here
    /// and now, when the last is older than `relist`.
    fn list_store(&self) {
        match self.sessions.begin_streaming() {
            Streaming::Running => {}
            Streaming::No => self.relist(self.config.relist),
            Streaming::Begun => {
                let listing = self.this.upgrade().map(|fs| {
                    move || {
                        let _ended = EndStreaming(&fs.sessions);
                        fs.relist(fs.config.relist);
                    }
                });
                let started = listing.map(|listing| {
                    std::thread::Builder::new()
                        .name("listing".into())
                        .spawn(listing)
                });
                if let Some(Ok(_)) = started {
                    return;
                }
                if let Some(Err(e)) = started {
                    log::warn!("cannot start a thread to list the store: {e}");
                }
                self.sessions.end_streaming();
                self.relist(self.config.relist);
            }
        }
    }

    /// The slot numbered `number`.
    fn slot(&self, number: u32) -> Result<Arc<Slot>> {
        self.sessions.get(number)
    }

    /// A node of a session's directory as last shown: `transcript.md` in its
    /// current lineage, a rewritable file in the generation last shown (a
    /// rewrite since is found when the file is next produced).
    fn current(&self, number: u32, view: &SessionView, node: Node) -> Node {
        match node {
            Node::Transcript(_) => {
                Node::Transcript(view.transcript_lineage().unwrap_or_default() as u32)
            }
            node => match node.rewritable() {
                Some((file, _)) => file.node(self.views.generations(number)[file.index()]),
                None => node,
            },
        }
    }

    /// A rewritable file's bytes as shown under `node`: its current bytes
    /// when they extend what that generation showed, else ESTALE (the path
    /// moved to the next generation; a descriptor keeps its own snapshot).
    fn shown(&self, slot: &Slot, node: Node, content: Content) -> Result<Content> {
        let Some((file, generation)) = node.rewritable() else {
            return Ok(content);
        };
        if self.views.observe(slot.number, file, &content.bytes) == generation {
            return Ok(content);
        }
        Err(Error::Stale(format!(
            "{}/{} was rewritten (what it shows no longer extends what was shown); open it again",
            slot.name,
            file.name()
        )))
    }

    /// A file's node in the session's directory as it is now: a rewritable
    /// file's generation found by producing it.
    fn node_now(&self, number: u32, node: Node) -> Result<Node> {
        if let Node::Transcript(_) = node {
            return self.transcript_node(number);
        }
        let (Some((file, _)), Some(which)) = (node.rewritable(), file_id(node)) else {
            return Ok(node);
        };
        let slot = self.slot(number)?;
        self.with_view(&slot, |view| {
            if !self.present(&slot, view, node) {
                return Ok(node);
            }
            match view.file(which) {
                Some(Ok(content)) => {
                    Ok(file.node(self.views.observe(number, file, &content.bytes)))
                }
                Some(Err(refusal)) => Err(Error::from(refusal)),
                None => Ok(node),
            }
        })?
    }

    /// The names of a session's directory, each with the directory's inode.
    fn session_names(number: u32) -> impl Iterator<Item = (u64, String)> {
        let dir = Ino::Session(number, Node::Dir).encode();
        SESSION_FILES
            .iter()
            .map(move |(name, _, _)| (dir, name.to_string()))
    }

    // ---- one session's view ----------------------------------------------------

    /// Runs `f` on the session's view, loading it first when it is not loaded
    /// and bringing it up to date with the store when it was last checked
    /// longer ago than `recheck`.
    fn with_view<T>(&self, slot: &Slot, f: impl FnOnce(&mut SessionView) -> T) -> Result<T> {
        self.with_view_checked(slot, self.config.recheck, f)
    }

    /// As [`Self::with_view`], bringing the view up to date when it was last
    /// checked `max_age` ago or longer.
    fn with_view_checked<T>(
        &self,
        slot: &Slot,
        max_age: Duration,
        f: impl FnOnce(&mut SessionView) -> T,
    ) -> Result<T> {
        self.read_ahead(slot.number);
        self.views
            .with_view(slot.number, &slot.id, max_age, || self.opening(slot), f)
    }

    /// Starts building the next session on a thread of its own when a request
    /// uses sessions in listing order ([`readahead`]).
    fn read_ahead(&self, number: u32) {
        if !self.config.readahead {
            return;
        }
        let Some(next) = self.readahead.used(number) else {
            return;
        };
        // The reader's session and the one it used before tell how large a view is.
        let before = if next > number {
            number - 1
        } else {
            number + 1
        };
        let slot = self.slot(next).ok().filter(|slot| {
            !slot.is_gone()
                && lock(&slot.refusal).is_none()
                && self.views.is_unloaded(next)
                && self.spilled(slot).is_none()
                && self.views.make_room_like(&[number, before])
        });
        let build = slot.zip(self.this.upgrade()).map(|(slot, fs)| {
            move || {
                log::debug!("building session {:?} ahead of its use", slot.id);
                let opening = || fs.opening(&slot);
                // Not `fs.with_view`: a build ahead is no use by a reader, and
                // counted as one it would start the next build, and so on.
                let built = fs
                    .views
                    .with_view(next, &slot.id, fs.config.recheck, opening, |_| ());
                if let Err(e) = built {
                    log::debug!("building session {:?} ahead: {e}", slot.id);
                }
                fs.readahead.finished(next);
            }
        });
        let Some(build) = build else {
            self.readahead.finished(next);
            return;
        };
        if let Err(e) = std::thread::Builder::new()
            .name("ahead".into())
            .spawn(build)
        {
            log::warn!("cannot start a thread to build a session ahead: {e}");
            self.readahead.finished(next);
        }
    }

    /// How to open a session's view, from what the table knows of it.
    fn opening(&self, slot: &Slot) -> Opening {
        let (source, unreadable, pending) = {
            let listed = lock(&slot.listed);
            (
                listed.source.clone(),
                listed.unreadable.clone(),
                listed.pending,
            )
        };
        let refused = match lock(&slot.refusal).clone() {
            Some(reason) => Some(Refused::External(reason)),
            None => unreadable.map(|why| Refused::Header(why.into())),
        };
        let watch = (!pending).then(|| match self.store.session_dir(&source.key) {
            Some(dir) => Watched::Dir(dir),
            None => Watched::Store,
        });
        // Its log as it is now may be the newest written (`latest`).
        if let Some(written) = written_at(&source) {
            self.sessions.note_time(slot.number, written);
        }
        Opening {
            source,
            refused,
            watch,
        }
    }

    /// The transcript of a dropped view while its log is unchanged.
    fn spilled(&self, slot: &Slot) -> Option<Spilled> {
        self.views
            .spilled(slot.number, || lock(&slot.listed).source.clone())
    }

    /// The bytes of a generated file: what `read` serves and `stat` sizes, as
    /// of a check of the store at most `max_age` ago. A reader at the end of a
    /// file asks with `Duration::ZERO`, so the next read after an append
    /// returns its bytes (a check costs a `stat`, or one row).
    fn file(&self, ino: Ino, max_age: Duration) -> Result<Content> {
        let (number, node) = match ino {
            Ino::Session(number, node) => (number, node),
            Ino::Lists(entry) => return self.catalog_file(entry),
            _ => return Err(Error::IsDir("not a file".into())),
        };
        let which = file_id(node).ok_or_else(|| Error::IsDir("not a regular file".into()))?;
        let slot = self.slot(number)?;
        self.with_view_checked(&slot, max_age, |view| {
            if !self.present(&slot, view, node) {
                return Err(Error::NotFound(format!("{} has no such file", slot.name)));
            }
            Self::check_current(&slot, view, node)?;
            match view.file(which) {
                Some(content) => self.shown(&slot, node, content?),
                None => Err(Error::NotFound(format!("{} has no such file", slot.name))),
            }
        })?
    }

    /// `transcript.md` in its current lineage: known from a spilled transcript
    /// while its log is unchanged, else from the view.
    fn transcript_node(&self, number: u32) -> Result<Node> {
        let slot = self.slot(number)?;
        let lineage = match self.spilled(&slot) {
            Some(spilled) => spilled.lineage,
            None => self
                .with_view(&slot, |view| view.transcript_lineage())?
                .unwrap_or_default(),
        };
        Ok(Node::Transcript(lineage as u32))
    }

    /// Refuses an inode of a transcript lineage that was rewritten since: its
    /// bytes are gone (a descriptor open on it keeps its own snapshot).
    fn check_current(slot: &Slot, view: &SessionView, node: Node) -> Result<()> {
        let Node::Transcript(lineage) = node else {
            return Ok(());
        };
        if view.transcript_lineage().unwrap_or_default() as u32 == lineage {
            return Ok(());
        }
        Err(Error::Stale(format!(
            "{}/transcript.md was rewritten (its log no longer extends what was shown); open it again",
            slot.name
        )))
    }

    /// Writes a quiet session's crash repair into the store (`-o repair`), the way
    /// the Harness's own load would, so the Harness later resumes it balanced.
    fn repair(&self, slot: &Slot, view: &mut SessionView) -> bool {
        let Some((keep, revision, tail)) = view.repair_plan() else {
            return false;
        };
        let source = view.source();
        match source.backend.repair(&source.key, &keep, &revision, &tail) {
            Ok(()) => {
                log::info!(
                    "repaired session {:?}: kept {} stored events, appended {} events",
                    slot.id,
                    keep.events,
                    tail.len()
                );
                view.refresh()
            }
            Err(e) => {
                log::warn!("could not repair session {:?}: {e}", slot.id);
                false
            }
        }
    }

    // ---- lookup and listing ------------------------------------------------------

    /// The node `name` in directory `parent`, found or not.
    pub fn lookup(&self, parent: u64, name: &str) -> Result<Attr> {
        match Ino::decode(parent)
            .ok_or_else(|| Error::NotFound(format!("unknown inode {parent}")))?
        {
            Ino::Root => {
                if name == "flush" {
                    return self.getattr(inode::ROOT_FLUSH);
                }
                if let Some(list) = self.root_list(name) {
                    return self.getattr(Ino::Lists(list).encode());
                }
                // New sessions must appear at once: ask the store on a miss.
                let find = |shown: &str| {
                    self.sessions
                        .by_name(shown)
                        .or_else(|| self.sessions.find_new(shown))
                };
                // A name from before readable names still leads to its session.
                let number = find(name)
                    .or_else(|| find(&names::mount_name(&names::old_name_of(name)?)))
                    .ok_or_else(|| Error::NotFound(format!("no session named {name}")))?;
                self.getattr(Ino::Session(number, Node::Dir).encode())
            }
            Ino::Session(number, Node::Dir) => {
                let node = SESSION_FILES
                    .iter()
                    .find(|(n, _, _)| *n == name)
                    .map(|(_, node, _)| *node)
                    .ok_or_else(|| Error::NotFound(format!("no file {name}")))?;
                let node = self.node_now(number, node)?;
                self.getattr(Ino::Session(number, node).encode())
            }
            Ino::Session(number, Node::Events) => {
                let seq = crate::render::event_file::seq_of(name)
                    .ok_or_else(|| Error::NotFound(format!("no event file {name}")))?;
                let slot = self.slot(number)?;
                let expected =
                    self.with_view(&slot, |view| view.indexed().and_then(|i| i.event_name(seq)))?;
                if expected.as_deref() != Some(name) {
                    return Err(Error::NotFound(format!("no event file {name}")));
                }
                self.getattr(Ino::Session(number, Node::Event(seq)).encode())
            }
            Ino::Session(number, node @ (Node::Steps | Node::Call(_))) => {
                self.steps_lookup(number, node, name)
            }
            Ino::Lists(list) => self.lists_lookup(list, name),
            Ino::Session(number, Node::Children) => {
                let slot = self.slot(number)?;
                self.relist(self.config.relist);
                let child = self
                    .sessions
                    .by_name(name)
                    .filter(|&child| self.sessions.is_child(&slot.id, child))
                    .ok_or_else(|| {
                        Error::NotFound(format!("{name} is not a child of {}", slot.name))
                    })?;
                self.getattr(Ino::Session(number, Node::Child(child)).encode())
            }
            _ => Err(Error::NotDir(format!("inode {parent} is not a directory"))),
        }
    }

    /// Root names of sessions removed from the store since the last call: the
    /// follow thread tells the kernel to drop them, as their entries are cached
    /// long.
    pub fn take_removed(&self) -> Vec<String> {
        self.sessions.take_removed()
    }

    /// Loaded views and the bytes they hold, as the cache counts them.
    pub fn cache_usage(&self) -> (usize, usize) {
        self.views.usage()
    }

    /// Totals for `statfs`: sessions listed.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }
}

/// When a session's own log was last written (ms), where it has one (a JSONL
/// file; an SQLite database's time is every session's): what `latest` goes by.
fn written_at(source: &crate::view::SessionSource) -> Option<i64> {
    match source.key {
        SessionKey::File(_) => source.backend.modified(&source.key).map(clock::ms_of),
        SessionKey::Row(_) => None,
    }
}

/// How recent a session's last write must be, at a listing, for a write to it
/// to be watched for `latest` while no one uses it.
const WRITTEN_LATELY: Duration = Duration::from_secs(24 * 3600);

/// Files whose content can be replaced, not only extended, while mounted (a
/// new title, a compaction, closers giving way to logged events, a control
/// file's status, `status`, where a `latest` link leads): their attributes are never cached by the kernel
/// and reads bypass the page cache, so `fstat` and `read` on one descriptor
/// always agree.
pub fn is_rewritable(ino: u64) -> bool {
    matches!(
        Ino::decode(ino),
        Some(
            Ino::RootFlush
                | Ino::Lists(Lists::Catalog(_) | Lists::Latest | Lists::ProjectLatest(_))
                | Ino::Session(
                    _,
                    Node::Header(_)
                        | Node::Surface(_)
                        | Node::Transcript(_)
                        | Node::Index(_)
                        | Node::Status(_)
                        | Node::Fork
                        | Node::Flush
                        | Node::CallFile(..)
                )
        )
    )
}

/// Files that move to a new inode when rewritten ([`inode::Rewritable`]): the
/// kernel may cache neither their attributes nor their names, so a path
/// reaches the current generation at once, even while a descriptor holds an
/// older one (whose `fstat` must still answer).
pub fn moves_when_rewritten(ino: u64) -> bool {
    match Ino::decode(ino) {
        Some(Ino::Session(_, node)) => node.rewritable().is_some(),
        Some(Ino::Lists(Lists::Catalog(_))) => true,
        _ => false,
    }
}

/// Files read through the kernel's page cache, kept across opens: bytes only
/// ever appended within one inode ([`paged`]).
pub fn is_paged(ino: u64) -> bool {
    matches!(Ino::decode(ino), Some(Ino::Session(_, Node::Transcript(_))))
}

/// A session's directory: its attributes never change while it is mounted.
pub fn is_session_dir(ino: u64) -> bool {
    matches!(Ino::decode(ino), Some(Ino::Session(_, Node::Dir)))
}

/// The generated file a node shows, if it is one.
fn file_id(node: Node) -> Option<FileId> {
    match node {
        Node::Header(_) => Some(FileId::Header),
        Node::Surface(_) => Some(FileId::Surface),
        Node::Transcript(_) => Some(FileId::Transcript),
        Node::Index(_) => Some(FileId::Index),
        Node::Error => Some(FileId::Error),
        Node::Status(_) => Some(FileId::Status),
        Node::Event(seq) => Some(FileId::Event(seq)),
        Node::CallFile(call, file) => Some(FileId::Call(call, file)),
        _ => None,
    }
}
