//! One session's indexed state and the bytes of its generated files.
//!
//! A session is read in one streaming pass: each stored event is checked and
//! folded, its location and a few facts are kept (not the event itself), and the
//! transcript is rendered as it goes. A growing log is continued from where the
//! last pass stopped. Other files are rendered on demand from the index,
//! fetching the events they need, and cached until the session changes.

mod index;
mod progress;
mod saved;
mod steps;

pub use index::Indexed;
pub use progress::ScanProgress;
use saved::Saved;
pub use saved::SavedScans;
pub use steps::CallFile;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::bytes::Bytes;
use crate::json::JsonMap;
use crate::model::Refusal;
use crate::model::activity::{RepairCause, WriterPresence, repair_cause};
use crate::model::fold::SessionFold;
use crate::model::header::SessionHeader;
use crate::render::status::{Shown, status_line};
use crate::render::{error_file, header_json};
use crate::store::{Backend, Revision, ScanPoint, SessionKey};
use index::EventMeta;

/// Bytes of a generated file as of one moment. `lineage` stays the same while the
/// file only grows, so an open handle may follow appends (`tail -f`) yet never
/// sees a rewritten file change under it.
#[derive(Clone, Debug)]
pub struct Content {
    /// The file's bytes.
    pub bytes: Bytes,
    /// Stays the same while the file only grows.
    pub lineage: u64,
}

/// Every file of a session directory whose bytes are generated: one name for
/// each, so that a file's size and its bytes are asked for alike
/// (`SessionView::file_size`, `SessionView::file`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileId {
    /// `header.json`: also shown for a session whose log cannot be read.
    Header,
    /// `surface.jsonl`.
    Surface,
    /// `transcript.md`: only ever extended within one lineage.
    Transcript,
    /// `index.jsonl`.
    Index,
    /// `error`: only for a session that cannot be read.
    Error,
    /// `status`: what the session is doing now, rendered at each read.
    Status,
    /// A file of `events/`: stored events, then synthetic closers.
    Event(u64),
    /// A file of model call `n` (its index in call order) in `steps/`.
    Call(u32, CallFile),
}

/// Where a session's log is read from: the store that holds it and its key
/// there. A view owns its source, and it is replaced only by replacing the
/// view, under the view's lock, so no reader pairs one store with another's key.
#[derive(Clone)]
pub struct SessionSource {
    /// The store that holds the session.
    pub backend: Arc<dyn Backend>,
    /// The session's key in that store.
    pub key: SessionKey,
}

impl SessionSource {
    /// The session stored at `key` in `backend`.
    pub fn new(backend: Arc<dyn Backend>, key: SessionKey) -> SessionSource {
        SessionSource { backend, key }
    }

    /// The stored log's revision now (a `stat`, or one row).
    pub fn revision(&self) -> Result<Revision, Refusal> {
        self.backend.revision(&self.key)
    }
}

/// What is known against a session before its log is read.
#[derive(Clone, Debug)]
pub enum Refused {
    /// The listing could not read its header, for this reason.
    Header(String),
    /// A reason found outside the log (e.g. a duplicate id): the log is not read.
    External(Refusal),
}

/// `transcript.md` of a view about to be dropped: its bytes can go to the
/// kernel's page cache, and what `stat` needs stays known while the stored log
/// is unchanged, so the session need not be read again to be listed or read.
pub struct SpilledTranscript {
    /// The stored log's revision when the view was dropped.
    pub revision: Revision,
    /// The transcript's lineage (its inode).
    pub lineage: u64,
    /// The transcript's modification time.
    pub mtime: SystemTime,
    /// The transcript's bytes, for the kernel's page cache.
    pub bytes: Bytes,
}

/// What a saved scan gives a rebuild.
enum Resumed {
    /// A scan of the log as it is now.
    Unchanged(Box<Indexed>),
    /// A scan of the log before it grew, to continue.
    Grown(Box<Indexed>),
    /// The log, unchanged, cannot be read, for this reason.
    Refused(Refusal),
}

/// Why a session is shown without its derived views.
#[derive(Clone, Debug)]
pub struct Unreadable {
    /// The header, when it could be read.
    pub header: Option<SessionHeader>,
    /// Why the log cannot be shown.
    pub reason: Refusal,
    /// The reason lies outside the log (e.g. a duplicate id), and says what to do.
    pub external: bool,
}

/// What a view holds: an index, or the reason there is none.
pub enum State {
    /// The log was read: its index.
    Indexed(Box<Indexed>),
    /// The log cannot be shown, and why.
    Unreadable(Box<Unreadable>),
}

/// A session as the filesystem shows it.
pub struct SessionView {
    /// The session's id.
    pub id: String,
    source: SessionSource,
    revision: Option<Revision>,
    /// When the stored bytes last changed, as far as we know: an open turn is
    /// shown repaired once the session has been quiet for the grace period
    /// (or at once when the store knows no writer is left).
    changed_at: SystemTime,
    grace: Duration,
    /// What the store told of a writer when the open turn was last judged.
    writer: WriterPresence,
    /// Why the open turn is shown closed by crash repair, when it is.
    repaired: Option<RepairCause>,
    state: State,
    /// Where scans are saved and read back, so that a remount reads only what
    /// grew; `None`: every scan reads the log whole.
    saved: Option<Arc<dyn SavedScans>>,
    /// The scan went on past what was saved: it is saved when the view is
    /// dropped ([`SessionView::save_unsaved`]), not in the request that read on.
    unsaved: bool,
}

impl SessionView {
    /// Reads and indexes session `id` from `source`, publishing its event
    /// names to `progress` while the scan runs; `refused` is what is known
    /// against it before its log is read. A scan in `saved` that can be
    /// trusted is continued rather than the log read whole.
    pub fn open(
        source: SessionSource,
        id: &str,
        refused: Option<Refused>,
        grace: Duration,
        progress: Option<&ScanProgress>,
        saved: Option<Arc<dyn SavedScans>>,
    ) -> SessionView {
        let changed_at = match &refused {
            Some(Refused::External(_)) => SystemTime::now(),
            _ => source
                .backend
                .modified(&source.key)
                .unwrap_or_else(SystemTime::now),
        };
        let mut view = SessionView {
            id: id.to_string(),
            source,
            revision: None,
            changed_at,
            grace,
            writer: WriterPresence::Unknown,
            repaired: None,
            state: State::Unreadable(Box::new(Unreadable {
                header: None,
                reason: Refusal::Corrupt("not read yet".into()),
                external: false,
            })),
            saved,
            unsaved: false,
        };
        let (backend, key) = (&view.source.backend, &view.source.key);
        view.state = match refused {
            Some(Refused::External(reason)) => State::Unreadable(Box::new(Unreadable {
                header: backend.header(key).ok(),
                reason,
                external: true,
            })),
            // A header the store cannot read now says nothing of its content.
            Some(Refused::Header(why)) => State::Unreadable(Box::new(Unreadable {
                header: None,
                reason: match backend.revision(key) {
                    Err(unavailable) if unavailable.is_unavailable() => unavailable,
                    _ => Refusal::Corrupt(format!("{why} ({})", key.describe())),
                },
                external: false,
            })),
            None => view.rebuild(progress),
        };
        view.settle();
        view
    }

    /// Where this view reads its session from.
    pub fn source(&self) -> &SessionSource {
        &self.source
    }

    /// What the view holds.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// Why the session cannot be read, when it cannot.
    pub fn refusal(&self) -> Option<&Refusal> {
        match &self.state {
            State::Indexed(_) => None,
            State::Unreadable(u) => Some(&u.reason),
        }
    }

    /// True when the store could not be read at the last attempt.
    pub fn is_unavailable(&self) -> bool {
        matches!(&self.state, State::Unreadable(u) if u.reason.is_unavailable())
    }

    /// The session's header, when it could be read.
    pub fn header(&self) -> Option<&SessionHeader> {
        match &self.state {
            State::Indexed(indexed) => Some(&indexed.header),
            State::Unreadable(u) => u.header.as_ref(),
        }
    }

    /// Approximate memory held by this view, for the cache budget.
    pub fn memory(&self) -> usize {
        match &self.state {
            State::Indexed(i) => {
                i.events.capacity() * std::mem::size_of::<EventMeta>()
                    + i.fold.memory()
                    + i.steps.memory()
                    + i.transcript.shared().memory()
                    // A cached transcript is the writer's, counted above.
                    + i.cache
                        .iter()
                        .filter(|(f, _)| *f != FileId::Transcript)
                        .map(|(_, c)| c.bytes.memory())
                        .sum::<usize>()
                    + i.call_cache
                        .iter()
                        .map(|(_, _, c)| c.bytes.memory())
                        .sum::<usize>()
            }
            State::Unreadable(_) => 0,
        }
    }

    /// Reads the session again: from where a trusted saved scan ends, else
    /// whole from the start.
    fn rebuild(&mut self, progress: Option<&ScanProgress>) -> State {
        self.revision = self.source.revision().ok();
        let header = match self.source.backend.header(&self.source.key) {
            Ok(header) => header,
            Err(reason) => {
                return State::Unreadable(Box::new(Unreadable {
                    header: None,
                    reason,
                    external: false,
                }));
            }
        };
        let fold = match SessionFold::new(&header, &self.id) {
            Ok(fold) => fold,
            Err(reason) => {
                let reason = with_location(reason, &self.source.key);
                return State::Unreadable(Box::new(Unreadable {
                    header: Some(header),
                    reason,
                    external: false,
                }));
            }
        };
        let resumed = match self.resume(&header) {
            Some(Resumed::Refused(reason)) => {
                return State::Unreadable(Box::new(Unreadable {
                    header: Some(header),
                    reason,
                    external: false,
                }));
            }
            // Of these very bytes: nothing to read (a torn tail's recovered
            // events are in it already, and reading on would repeat them).
            Some(Resumed::Unchanged(resumed)) => return State::Indexed(resumed),
            Some(Resumed::Grown(resumed)) => Some(resumed),
            None => None,
        };
        if let Some(mut resumed) = resumed {
            let from = resumed.point.clone();
            match resumed.extend(&self.source, progress) {
                Ok(()) => {
                    self.revision = resumed.revision_after(self.revision.take());
                    if resumed.point != from {
                        resumed.shrink();
                        self.unsaved = true;
                    }
                    return State::Indexed(resumed);
                }
                // A full read gives the verdict, never a continued one.
                Err(reason) => log::info!(
                    "session {:?}: its saved scan could not be continued ({}): reading it whole",
                    self.id,
                    reason.message()
                ),
            }
        }
        let mut indexed = Box::new(Indexed::new(header, fold, &self.id));
        match indexed.extend(&self.source, progress) {
            Ok(()) => {
                indexed.shrink();
                self.revision = indexed.revision_after(self.revision.take());
                self.keep(&indexed);
                self.unsaved = false;
                State::Indexed(indexed)
            }
            Err(reason) => {
                let reason = with_location(reason, &self.source.key);
                self.keep_refusal(&indexed.header, &reason);
                State::Unreadable(Box::new(Unreadable {
                    header: Some(indexed.header),
                    reason,
                    external: false,
                }))
            }
        }
    }

    /// The saved scan of this session, when one is kept and can be trusted:
    /// taken of the log as it is now, or of the same log before it grew (the
    /// bytes before its scan point digest the same).
    fn resume(&self, header: &SessionHeader) -> Option<Resumed> {
        let saved = self.saved.as_ref()?;
        let revision = self.revision.as_ref()?;
        let key = &self.source.key;
        let loaded = match saved::load(saved.load(key)?, &self.id, header) {
            Ok(Saved::Scan(loaded)) => loaded,
            // A refusal holds only for the very bytes it was made of.
            Ok(Saved::Refused {
                revision: of,
                reason,
            }) => {
                return (of == *revision).then(|| {
                    log::debug!("session {:?}: refused as when it was saved", self.id);
                    Resumed::Refused(reason)
                });
            }
            Err(why) => {
                log::debug!("session {:?}: saved scan not used: {why}", self.id);
                return None;
            }
        };
        let unchanged = loaded.revision == *revision;
        let grown = !unchanged
            && loaded.indexed.resumable
            && loaded.revision.same_artifact(revision)
            && loaded.digest.is_some()
            && self
                .source
                .backend
                .prefix_digest(key, &loaded.indexed.point)
                == loaded.digest;
        if !unchanged && !grown {
            log::debug!("session {:?}: its saved scan is of another log", self.id);
            return None;
        }
        log::debug!(
            "session {:?}: continuing its saved scan of {} events",
            self.id,
            loaded.indexed.point.events
        );
        Some(match unchanged {
            true => Resumed::Unchanged(loaded.indexed),
            false => Resumed::Grown(loaded.indexed),
        })
    }

    /// Saves why the log cannot be read, so that the next mount need not read
    /// it up to there again while it is unchanged.
    fn keep_refusal(&self, header: &SessionHeader, reason: &Refusal) {
        let (Some(saved), Some(revision)) = (&self.saved, &self.revision) else {
            return;
        };
        if let Some(bytes) = saved::save_refusal(&self.id, revision, header, reason) {
            saved.save(&self.source.key, bytes);
        }
    }

    /// Saves the scan when it went on past what was saved of it: called as
    /// the view is dropped, and at unmount.
    pub fn save_unsaved(&mut self) {
        if std::mem::take(&mut self.unsaved)
            && let State::Indexed(indexed) = &self.state
        {
            self.keep(indexed);
        }
    }

    /// Saves a scan just made, for the next mount.
    fn keep(&self, indexed: &Indexed) {
        let (Some(saved), Some(revision)) = (&self.saved, &self.revision) else {
            return;
        };
        let key = &self.source.key;
        let digest = self.source.backend.prefix_digest(key, &indexed.point);
        match saved::save(indexed, &self.id, revision, digest) {
            Ok(bytes) => saved.save(key, bytes),
            Err(why) => log::warn!("session {:?}: {why}", self.id),
        }
    }

    /// Judges the open turn, if any, and shows or drops its closers: shown at
    /// once when the store knows its writer is gone, else once the session has
    /// been quiet for the grace period (the writer may be in a long tool call
    /// until then). True when the files changed.
    fn settle(&mut self) -> bool {
        let State::Indexed(indexed) = &mut self.state else {
            (self.writer, self.repaired) = (WriterPresence::Unknown, None);
            return false;
        };
        // The store is asked only while a turn is open.
        (self.writer, self.repaired) = match indexed.fold.turn_scan().open_turn() {
            Some(_) => {
                let writer = self.source.backend.writer_presence(&self.source.key);
                let quiet_for = SystemTime::now()
                    .duration_since(self.changed_at)
                    .unwrap_or_default();
                (writer, repair_cause(writer, quiet_for, self.grace))
            }
            None => (WriterPresence::Unknown, None),
        };
        indexed.settle(self.repaired.is_some())
    }

    /// Follows the store: continues a grown log from where the last pass stopped,
    /// re-reads it when it changed otherwise, and closes or reopens the last turn
    /// as the session goes quiet or is written again. Returns true when any file
    /// of the session changed.
    pub fn refresh(&mut self) -> bool {
        if matches!(&self.state, State::Unreadable(u) if u.external) {
            // Refused for a reason outside the log: reading it changes nothing.
            return false;
        }
        let revision = match self.source.revision() {
            // The store cannot be read now: what is shown stays as it is.
            Err(refusal) if refusal.is_unavailable() => return false,
            revision => revision.ok(),
        };
        // A log that could not be read is tried again at every refresh.
        let stored_changed = revision != self.revision || self.is_unavailable();
        if stored_changed {
            self.changed_at = SystemTime::now();
            let same_artifact = matches!(
                (&revision, &self.revision),
                (Some(new), Some(old)) if new.same_artifact(old)
            );
            let continued = match &mut self.state {
                State::Indexed(indexed) if indexed.resumable && same_artifact => {
                    // Cached files are stale now; dropped first, the transcript they
                    // share is extended in place rather than copied.
                    indexed.cache.clear();
                    indexed.call_cache.clear();
                    let before = indexed.events.len();
                    let extended = indexed.extend(&self.source, None).is_ok();
                    if extended && indexed.events.len() != before {
                        indexed.changed(false);
                        self.unsaved = true;
                    }
                    extended
                }
                _ => false,
            };
            if continued {
                self.revision = match &self.state {
                    State::Indexed(indexed) => indexed.revision_after(revision),
                    State::Unreadable(_) => revision,
                };
            } else {
                let rebuilt = self.rebuild(None);
                let previous = std::mem::replace(&mut self.state, rebuilt);
                if let (State::Indexed(old), State::Indexed(new)) = (&previous, &mut self.state) {
                    new.succeed(old);
                }
            }
        }
        self.settle() || stored_changed
    }

    /// What a durable repair would write, once the session is quiet: where the
    /// stored log is cut (dropping a torn tail) and what is appended (events
    /// recovered from that tail, then the closers). `None` when nothing is torn
    /// or open, or the session is still being written.
    pub fn repair_plan(&self) -> Option<(ScanPoint, Revision, Vec<JsonMap>)> {
        let State::Indexed(indexed) = &self.state else {
            return None;
        };
        if self.repaired.is_none() || (indexed.torn.is_none() && indexed.closers.is_empty()) {
            return None;
        }
        // Recovered events are written back as stored: the store is never converted.
        let recovered = (indexed.point.events..indexed.stored_count())
            .map(|seq| indexed.stored_event(&self.source, seq))
            .collect::<Result<Vec<_>, _>>()
            .ok()?;
        // Write only what this reader accepts back: closers copy fields of the
        // stored turn unchecked (a turn that is no number, a call with an empty
        // id), and a stored log that cannot be read is worse than one left open.
        let mut check = indexed.fold.clone();
        if let Some(refusal) = indexed.closers.iter().find_map(|c| check.observe(c).err()) {
            log::warn!(
                "not repairing session {:?}: its closers would not read back: {refusal}",
                self.id
            );
            return None;
        }
        let tail = recovered
            .into_iter()
            .chain(indexed.closers.iter().cloned())
            .collect();
        Some((indexed.point.clone(), self.revision.clone()?, tail))
    }

    /// The lineage of `transcript.md` (see [`Content::lineage`]), when readable.
    pub fn transcript_lineage(&self) -> Option<u64> {
        self.indexed().map(|i| i.transcript_lineage)
    }

    /// What a dropped view leaves of its transcript (see [`SpilledTranscript`]).
    pub fn spill_transcript(&self) -> Option<SpilledTranscript> {
        let indexed = self.indexed()?;
        Some(SpilledTranscript {
            revision: self.revision.clone()?,
            lineage: indexed.transcript_lineage,
            mtime: self.mtime(),
            bytes: indexed.transcript.shared(),
        })
    }

    /// Number of entries in `events/` (stored events plus synthetic closers).
    pub fn event_count(&self) -> u64 {
        match &self.state {
            State::Indexed(i) => (i.events.len() + i.closers.len()) as u64,
            State::Unreadable(_) => 0,
        }
    }

    /// The modification time of the session's files: the time of its last event.
    pub fn mtime(&self) -> SystemTime {
        let ms = match &self.state {
            State::Indexed(i) => i.fold.last_time().unwrap_or(i.header.created_at),
            State::Unreadable(u) => u.header.as_ref().map_or(0, |h| h.created_at),
        };
        SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
    }

    /// The index, when the log could be read.
    pub fn indexed(&self) -> Option<&Indexed> {
        match &self.state {
            State::Indexed(i) => Some(i),
            State::Unreadable(_) => None,
        }
    }

    /// The bytes of one generated file as of now; `None` when the session has
    /// no such file. A file's size (`stat`) comes from here too, except an
    /// event file's, which the scan measured (`file_size`).
    pub fn file(&mut self, which: FileId) -> Option<Result<Content, Refusal>> {
        let bytes = match (&mut self.state, which) {
            (state, FileId::Status) => {
                let shown = match state {
                    State::Indexed(indexed) => Shown::Readable {
                        activity: indexed.fold.turn_scan(),
                        writer: self.writer,
                        repaired: self.repaired,
                    },
                    State::Unreadable(u) => Shown::Unreadable(&u.reason),
                };
                let now = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as i64);
                status_line(shown, now)
            }
            (State::Indexed(indexed), which) => return indexed.render(&self.source, which),
            (State::Unreadable(u), FileId::Header) => header_json(u.header.as_ref()?, None),
            (State::Unreadable(u), FileId::Error) => error_file(&u.reason, u.external),
            (State::Unreadable(_), _) => return None,
        };
        Some(Ok(Content {
            bytes: Bytes::from(bytes),
            lineage: 0,
        }))
    }

    /// The size of one generated file as of now: `file(which)`'s length. A
    /// stored event's is kept from the scan, so it is neither fetched nor
    /// rendered (`ls -l events/` of a huge session renders nothing).
    pub fn file_size(&mut self, which: FileId) -> Option<Result<u64, Refusal>> {
        if let (State::Indexed(indexed), FileId::Event(seq)) = (&self.state, which)
            && let Some(size) = indexed.events.get(seq as usize).and_then(EventMeta::size)
        {
            return Some(Ok(size));
        }
        self.file(which)
            .map(|content| content.map(|c| c.bytes.len() as u64))
    }

    /// Event `seq` as the Harness reads it: fetched from the store and
    /// converted when stored in a legacy shape, or a synthetic closer.
    pub fn event(&self, seq: u64) -> Result<JsonMap, Refusal> {
        match &self.state {
            State::Indexed(indexed) => indexed.event(&self.source, seq),
            State::Unreadable(u) => Err(u.reason.clone()),
        }
    }
}

fn with_location(reason: Refusal, key: &SessionKey) -> Refusal {
    let located = |m: String| {
        if m.contains("(raw log: ") || matches!(key, SessionKey::Row(_)) {
            m
        } else {
            format!("{m} (raw log: {})", key.describe())
        }
    };
    match reason {
        Refusal::Corrupt(m) => Refusal::Corrupt(located(m)),
        Refusal::Unsupported(m) => Refusal::Unsupported(located(m)),
        unavailable @ Refusal::Unavailable { .. } => unavailable,
    }
}

#[cfg(test)]
mod tests;
