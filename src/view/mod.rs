//! One session's indexed state and the bytes of its generated files.
//!
//! A session is read in one streaming pass: each stored event is checked and
//! folded, its location and a few facts are kept (not the event itself), and the
//! transcript is rendered as it goes. A growing log is continued from where the
//! last pass stopped. Other files are rendered on demand from the index,
//! fetching the events they need, and cached until the session changes.

mod progress;
mod steps;

pub use progress::ScanProgress;
pub use steps::CallFile;

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::bytes::Bytes;
use crate::json::{JsonMap, safe_integer};
use crate::json_len::pretty_line_len;
use crate::model::Refusal;
use crate::model::Scanned;
use crate::model::fold::SessionFold;
use crate::model::header::SessionHeader;
use crate::model::steps::StepScan;
use crate::model::validate::CHUNK_TYPE;
use crate::render::transcript::TranscriptWriter;
use crate::render::{Standing, event_file, header_json, index_line, surface_line};
use crate::store::{Backend, EventLoc, Listing, Revision, ScanEnd, ScanPoint, SessionKey};

/// Bytes of a generated file as of one moment. `lineage` stays the same while the
/// file only grows, so an open handle may follow appends (`tail -f`) yet never
/// sees a rewritten file change under it.
#[derive(Clone, Debug)]
pub struct Content {
    pub bytes: Bytes,
    pub lineage: u64,
}

/// Every file of a session directory whose bytes are generated: one name for
/// each, so that a file's size and its bytes are asked for alike
/// (`SessionView::file_size`, `SessionView::file`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileId {
    /// `header.json`: also shown for a session whose log cannot be read.
    Header,
    Surface,
    Transcript,
    Index,
    /// `error`: only for a session that cannot be read.
    Error,
    /// A file of `events/`: stored events, then synthetic closers.
    Event(u64),
    /// A file of model call `n` (its index in call order) in `steps/`.
    Call(u32, CallFile),
}

/// The generated files of a readable session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ViewFile {
    Header,
    Surface,
    Transcript,
    Index,
}

/// What the index keeps of one stored event: a huge session holds a million
/// of these, so they are packed into 32 bytes.
#[derive(Clone, Copy, Debug)]
struct EventMeta {
    loc: EventLoc,
    time: i64,
    /// The type's index in `Indexed::types`, shifted left once; the low bit is
    /// set when the event is stored in a legacy shape and shown converted (spec §15).
    type_and_converted: u32,
    /// The length of the event's file in `events/`, from the scan, so that
    /// `stat` and `ls -l` render nothing; `SIZE_UNKNOWN` when it does not fit.
    size: u32,
}

const _: () = assert!(std::mem::size_of::<EventMeta>() == 32);

const SIZE_UNKNOWN: u32 = u32::MAX;

impl EventMeta {
    fn new(loc: EventLoc, time: i64, type_id: u32, converted: bool, size: u64) -> EventMeta {
        EventMeta {
            loc,
            time,
            type_and_converted: type_id << 1 | u32::from(converted),
            size: u32::try_from(size)
                .ok()
                .filter(|s| *s != SIZE_UNKNOWN)
                .unwrap_or(SIZE_UNKNOWN),
        }
    }

    fn type_id(&self) -> usize {
        (self.type_and_converted >> 1) as usize
    }

    fn converted(&self) -> bool {
        self.type_and_converted & 1 == 1
    }

    fn size(&self) -> Option<u64> {
        (self.size != SIZE_UNKNOWN).then_some(u64::from(self.size))
    }
}

/// `transcript.md` of a view about to be dropped: its bytes can go to the
/// kernel's page cache, and what `stat` needs stays known while the stored log
/// is unchanged, so the session need not be read again to be listed or read.
pub struct SpilledTranscript {
    pub revision: Revision,
    pub lineage: u64,
    pub mtime: SystemTime,
    pub bytes: Bytes,
}

/// Why a session is shown without its derived views.
#[derive(Clone, Debug)]
pub struct Unreadable {
    pub header: Option<SessionHeader>,
    pub reason: Refusal,
    /// The reason lies outside the log (e.g. a duplicate id), and says what to do.
    pub external: bool,
}

pub struct Indexed {
    header: SessionHeader,
    fold: SessionFold,
    point: ScanPoint,
    /// False when the last scan folded events recovered from a torn tail that a
    /// later scan will read again: the next change then re-reads from the start.
    resumable: bool,
    torn: Option<String>,
    events: Vec<EventMeta>,
    types: Vec<String>,
    /// Each type's part of an event file name, encoded once.
    type_parts: Vec<String>,
    transcript: TranscriptWriter,
    /// Synthetic closers, present while the log ends inside a turn and is quiet.
    closers: Vec<JsonMap>,
    cache: Vec<(ViewFile, Content)>,
    /// The model calls (`steps/`), found during the scan.
    steps: StepScan,
    /// A quiet log's last step when it logged no response: its call, shown
    /// after the others (the log ends inside it).
    unanswered: Option<crate::model::steps::ModelCall>,
    /// The last few call files read: each is rendered on demand, never all at once.
    call_cache: Vec<(usize, CallFile, Content)>,
    /// Bumped whenever a file is rewritten rather than extended.
    lineage: u64,
    /// The transcript's own lineage: it never shows closers, so only a re-read
    /// log whose transcript no longer extends the old one rewrites it.
    transcript_lineage: u64,
}

pub enum State {
    Indexed(Box<Indexed>),
    Unreadable(Box<Unreadable>),
}

/// A session as the filesystem shows it.
pub struct SessionView {
    pub id: String,
    pub key: SessionKey,
    revision: Option<Revision>,
    /// When the stored bytes last changed, as far as we know: a session is only
    /// repaired after it has been quiet for the grace period.
    changed_at: SystemTime,
    grace: Duration,
    state: State,
}

impl SessionView {
    /// Reads and indexes a listed session.
    pub fn load(backend: &dyn Backend, listing: &Listing, grace: Duration) -> SessionView {
        let unreadable = listing.header.as_ref().err().map(String::as_str);
        SessionView::open(backend, &listing.id, &listing.key, unreadable, grace)
    }

    /// Reads and indexes session `id` stored at `key`; `unreadable` is why its
    /// listing could not read its header, if it could not.
    pub fn open(
        backend: &dyn Backend,
        id: &str,
        key: &SessionKey,
        unreadable: Option<&str>,
        grace: Duration,
    ) -> SessionView {
        SessionView::open_publishing(backend, id, key, unreadable, grace, None)
    }

    /// As [`SessionView::open`], publishing event names to `progress` while
    /// the scan runs.
    pub fn open_publishing(
        backend: &dyn Backend,
        id: &str,
        key: &SessionKey,
        unreadable: Option<&str>,
        grace: Duration,
        progress: Option<&ScanProgress>,
    ) -> SessionView {
        let mut view = SessionView {
            id: id.to_string(),
            key: key.clone(),
            revision: None,
            changed_at: backend.modified(key).unwrap_or_else(SystemTime::now),
            grace,
            state: State::Unreadable(Box::new(Unreadable {
                header: None,
                reason: Refusal::Corrupt("not read yet".into()),
                external: false,
            })),
        };
        view.state = match unreadable {
            // A header the store cannot read now says nothing of its content.
            Some(why) => State::Unreadable(Box::new(Unreadable {
                header: None,
                reason: match backend.revision(key) {
                    Err(unavailable) if unavailable.is_unavailable() => unavailable,
                    _ => Refusal::Corrupt(format!("{why} ({})", key.describe())),
                },
                external: false,
            })),
            None => view.rebuild(backend, progress),
        };
        view
    }

    /// A session that cannot be shown for a reason found outside its log (e.g. a
    /// duplicate id).
    pub fn refused(
        id: &str,
        key: &SessionKey,
        header: Option<SessionHeader>,
        reason: Refusal,
    ) -> SessionView {
        SessionView {
            id: id.to_string(),
            key: key.clone(),
            revision: None,
            changed_at: SystemTime::now(),
            grace: Duration::ZERO,
            state: State::Unreadable(Box::new(Unreadable {
                header,
                reason,
                external: true,
            })),
        }
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    /// True when the store could not be read at the last attempt.
    pub fn is_unavailable(&self) -> bool {
        matches!(&self.state, State::Unreadable(u) if u.reason.is_unavailable())
    }

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
                        .filter(|(f, _)| *f != ViewFile::Transcript)
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

    /// Reads the whole session again from the start.
    fn rebuild(&mut self, backend: &dyn Backend, progress: Option<&ScanProgress>) -> State {
        self.revision = backend.revision(&self.key).ok();
        let header = match backend.header(&self.key) {
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
                let reason = with_location(reason, &self.key);
                return State::Unreadable(Box::new(Unreadable {
                    header: Some(header),
                    reason,
                    external: false,
                }));
            }
        };
        let mut indexed = Box::new(Indexed {
            header,
            fold,
            point: ScanPoint::default(),
            resumable: true,
            torn: None,
            events: Vec::new(),
            types: Vec::new(),
            type_parts: Vec::new(),
            transcript: TranscriptWriter::new(&self.id),
            closers: Vec::new(),
            cache: Vec::new(),
            steps: StepScan::default(),
            unanswered: None,
            call_cache: Vec::new(),
            lineage: 0,
            transcript_lineage: 0,
        });
        match indexed.extend(backend, &self.key, progress) {
            Ok(()) => {
                indexed.shrink();
                indexed.settle(self.quiet());
                State::Indexed(indexed)
            }
            Err(reason) => {
                let reason = with_location(reason, &self.key);
                State::Unreadable(Box::new(Unreadable {
                    header: Some(indexed.header),
                    reason,
                    external: false,
                }))
            }
        }
    }

    fn quiet(&self) -> bool {
        SystemTime::now()
            .duration_since(self.changed_at)
            .unwrap_or_default()
            >= self.grace
    }

    /// Follows the store: continues a grown log from where the last pass stopped,
    /// re-reads it when it changed otherwise, and closes or reopens the last turn
    /// as the session goes quiet or is written again. Returns true when any file
    /// of the session changed.
    pub fn refresh(&mut self, backend: &dyn Backend) -> bool {
        let revision = match backend.revision(&self.key) {
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
                    let extended = indexed.extend(backend, &self.key, None).is_ok();
                    if extended && indexed.events.len() != before {
                        indexed.changed(false);
                    }
                    extended
                }
                _ => false,
            };
            if continued {
                self.revision = revision;
            } else {
                let rebuilt = self.rebuild(backend, None);
                let previous = std::mem::replace(&mut self.state, rebuilt);
                if let (State::Indexed(old), State::Indexed(new)) = (&previous, &mut self.state) {
                    new.succeed(old);
                }
            }
        }
        let quiet = self.quiet();
        match &mut self.state {
            State::Indexed(indexed) => indexed.settle(quiet) || stored_changed,
            State::Unreadable(_) => stored_changed,
        }
    }

    /// What a durable repair would write, once the session is quiet: where the
    /// stored log is cut (dropping a torn tail) and what is appended (events
    /// recovered from that tail, then the closers). `None` when nothing is torn
    /// or open, or the session is still being written.
    pub fn repair_plan(
        &self,
        backend: &dyn Backend,
    ) -> Option<(ScanPoint, Revision, Vec<JsonMap>)> {
        let State::Indexed(indexed) = &self.state else {
            return None;
        };
        if !self.quiet() || (indexed.torn.is_none() && indexed.closers.is_empty()) {
            return None;
        }
        // Recovered events are written back as stored: the store is never converted.
        let recovered = (indexed.point.events..indexed.stored_count())
            .map(|seq| indexed.stored_event(backend, &self.key, seq))
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

    pub fn indexed(&self) -> Option<&Indexed> {
        match &self.state {
            State::Indexed(i) => Some(i),
            State::Unreadable(_) => None,
        }
    }

    pub fn indexed_mut(&mut self) -> Option<&mut Indexed> {
        match &mut self.state {
            State::Indexed(i) => Some(i),
            State::Unreadable(_) => None,
        }
    }

    /// The bytes of one generated file as of now; `NotFound`-like refusals are
    /// `None`. A file's size (`stat`) comes from here too, except an event
    /// file's, which the scan measured (`file_size`).
    pub fn file(
        &mut self,
        backend: &dyn Backend,
        which: FileId,
    ) -> Option<Result<Content, Refusal>> {
        let fixed = |bytes: Vec<u8>| {
            Some(Ok(Content {
                bytes: Bytes::from(bytes),
                lineage: 0,
            }))
        };
        let key = self.key.clone();
        match (&mut self.state, which) {
            (State::Unreadable(u), FileId::Header) => {
                u.header.as_ref().and_then(|h| fixed(header_json(h, None)))
            }
            (State::Unreadable(_), FileId::Error) => self.error_text().and_then(fixed),
            (State::Unreadable(_), _) | (State::Indexed(_), FileId::Error) => None,
            (State::Indexed(indexed), FileId::Event(seq)) => {
                if seq >= indexed.stored_count() + indexed.closers.len() as u64 {
                    return None;
                }
                Some(indexed.event(backend, &key, seq).map(|event| Content {
                    bytes: Bytes::from(event_file::content(&event)),
                    lineage: 0,
                }))
            }
            (State::Indexed(indexed), FileId::Header) => {
                Some(indexed.file(backend, &key, ViewFile::Header))
            }
            (State::Indexed(indexed), FileId::Surface) => {
                Some(indexed.file(backend, &key, ViewFile::Surface))
            }
            (State::Indexed(indexed), FileId::Transcript) => {
                Some(indexed.file(backend, &key, ViewFile::Transcript))
            }
            (State::Indexed(indexed), FileId::Index) => {
                Some(indexed.file(backend, &key, ViewFile::Index))
            }
            (State::Indexed(indexed), FileId::Call(call, file)) => {
                if call as usize >= indexed.call_count() {
                    return None;
                }
                Some(indexed.call_file(backend, &key, call as usize, file))
            }
        }
    }

    /// The size of one generated file as of now: `file(which)`'s length. A
    /// stored event's is kept from the scan, so it is neither fetched nor
    /// rendered (`ls -l events/` of a huge session renders nothing).
    pub fn file_size(
        &mut self,
        backend: &dyn Backend,
        which: FileId,
    ) -> Option<Result<u64, Refusal>> {
        if let (State::Indexed(indexed), FileId::Event(seq)) = (&self.state, which)
            && let Some(size) = indexed.events.get(seq as usize).and_then(EventMeta::size)
        {
            return Some(Ok(size));
        }
        self.file(backend, which)
            .map(|content| content.map(|c| c.bytes.len() as u64))
    }

    /// The `error` file of an unreadable session: what is wrong and what to do.
    pub fn error_text(&self) -> Option<Vec<u8>> {
        let State::Unreadable(u) = &self.state else {
            return None;
        };
        if u.external {
            return Some(format!("{}\n", u.reason.message()).into_bytes());
        }
        let advice = match &u.reason {
            Refusal::Unsupported(_) => {
                "The log is intact, but this sessionfs reads only log format v0 and the event types it knows; open it with a newer harness."
            }
            Refusal::Corrupt(_) => {
                "The stored log is damaged where it was already committed, so sessionfs shows no view of it rather than a wrong one; restore the file from a backup or inspect it by hand."
            }
            Refusal::Unavailable { .. } => {
                "sessionfs could not read the store just now; this says nothing about the log's content. It is read again at the next access."
            }
        };
        Some(format!("{}\n{advice}\n", u.reason.message()).into_bytes())
    }
}

/// The index of `event_type` among a session's types, added when new. A
/// session has a few dozen types: ids keep a bit free in `EventMeta`.
fn type_index(types: &mut Vec<String>, parts: &mut Vec<String>, event_type: &str) -> u32 {
    let id = match types.iter().position(|t| t == event_type) {
        Some(id) => id,
        None => {
            types.push(event_type.to_string());
            parts.push(event_file::type_part(event_type));
            types.len() - 1
        }
    };
    id as u32
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

impl Indexed {
    pub fn header(&self) -> &SessionHeader {
        &self.header
    }

    pub fn fold(&self) -> &SessionFold {
        &self.fold
    }

    pub fn stored_count(&self) -> u64 {
        self.events.len() as u64
    }

    pub fn torn(&self) -> Option<&str> {
        self.torn.as_deref()
    }

    pub fn closers(&self) -> &[JsonMap] {
        &self.closers
    }

    /// Reads stored events past the last scan point and folds them, publishing
    /// their names to `progress` as it goes.
    fn extend(
        &mut self,
        backend: &dyn Backend,
        key: &SessionKey,
        progress: Option<&ScanProgress>,
    ) -> Result<(), Refusal> {
        let Indexed {
            fold,
            steps,
            events,
            types,
            type_parts,
            transcript,
            ..
        } = self;
        let mut published = events.len();
        let mut chunk_type = None;
        let mut sink = |loc: EventLoc, mut scanned: Scanned| -> Result<(), Refusal> {
            let folded = fold.observe_scanned(&mut scanned)?;
            steps.observe(&scanned, &folded.effect);
            let meta = match &scanned {
                Scanned::Event(event) => {
                    transcript.event(event, &folded.effect);
                    let event_type = event
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    // The fold left a legacy event converted, as its file shows it.
                    EventMeta::new(
                        loc,
                        event.get("time").and_then(safe_integer).unwrap_or_default(),
                        type_index(types, type_parts, event_type),
                        folded.converted,
                        pretty_line_len(event),
                    )
                }
                // Chunks show in no view but events/.
                Scanned::Chunk { time, size, .. } => EventMeta::new(
                    loc,
                    *time,
                    *chunk_type.get_or_insert_with(|| type_index(types, type_parts, CHUNK_TYPE)),
                    false,
                    *size,
                ),
            };
            events.push(meta);
            if let Some(progress) = progress
                && events.len() - published >= progress::PUBLISH_EVERY
            {
                let batch = events[published..].iter().map(|m| m.type_id() as u32);
                progress.publish(batch, type_parts, meta.time);
                published = events.len();
            }
            Ok(())
        };
        let (point, end) = backend.scan(key, &self.point, &mut sink)?;
        self.point = point;
        self.resumable = self.events.len() as u64 == self.point.events;
        self.torn = match end {
            ScanEnd::Complete => None,
            ScanEnd::Torn { at } => Some(at),
        };
        Ok(())
    }

    /// Returns the spare room a first scan's growing buffers left, so a cached
    /// session costs what it holds.
    fn shrink(&mut self) {
        self.events.shrink_to_fit();
        self.fold.shrink();
        self.steps.shrink();
        self.transcript.shrink();
    }

    /// Computes the closers for the current quiet state; true when they changed.
    fn settle(&mut self, quiet: bool) -> bool {
        let closers = if quiet {
            self.fold.repair().closers()
        } else {
            Vec::new()
        };
        let last_seq = self.stored_count().checked_sub(1);
        let unanswered = last_seq
            .filter(|_| !closers.is_empty())
            .and_then(|last| self.steps.unanswered_at_end(last));
        if closers == self.closers && unanswered == self.unanswered {
            return false;
        }
        self.unanswered = unanswered;
        let removed = !self.closers.is_empty();
        self.closers = closers;
        self.changed(removed);
        true
    }

    /// Continues the lineages of the view this re-read replaces: the transcript
    /// keeps its lineage when it still starts with what readers saw, so they
    /// read on (`tail -f`); every other file counts as rewritten.
    fn succeed(&mut self, old: &Indexed) {
        self.lineage = old.lineage + 1;
        let (new, old_bytes) = (self.transcript.shared(), old.transcript.shared());
        self.transcript_lineage = if new.starts_with(&old_bytes) {
            old.transcript_lineage
        } else {
            old.transcript_lineage + 1
        };
    }

    /// Drops cached files; `rewritten` when content was replaced, not extended.
    fn changed(&mut self, rewritten: bool) {
        self.cache.clear();
        self.call_cache.clear();
        if rewritten {
            self.lineage += 1;
        }
    }

    /// The type of event `i` (stored or synthetic).
    pub fn event_type(&self, i: u64) -> Option<&str> {
        let stored = self.events.len() as u64;
        if i < stored {
            return Some(&self.types[self.events[i as usize].type_id()]);
        }
        self.closers
            .get((i - stored) as usize)
            .and_then(|c| c.get("type"))
            .and_then(Value::as_str)
    }

    /// True when stored event `i` was in a legacy shape and is shown converted.
    pub fn is_converted(&self, i: u64) -> bool {
        self.events
            .get(i as usize)
            .is_some_and(EventMeta::converted)
    }

    pub fn is_synthetic(&self, i: u64) -> bool {
        i >= self.events.len() as u64
    }

    /// The file name of event `i` in `events/`.
    pub fn event_name(&self, i: u64) -> Option<String> {
        match self.events.get(i as usize) {
            Some(meta) => Some(event_file::name_with(
                i,
                &self.type_parts[meta.type_id()],
                false,
            )),
            None => self
                .event_type(i)
                .map(|t| event_file::file_name(i, t, true)),
        }
    }

    /// Stored event `i` as it is in the store, legacy shapes unconverted.
    fn stored_event(
        &self,
        backend: &dyn Backend,
        key: &SessionKey,
        i: u64,
    ) -> Result<JsonMap, Refusal> {
        let meta = self
            .events
            .get(i as usize)
            .ok_or_else(|| Refusal::Corrupt(format!("no stored event {i}")))?;
        backend.fetch(key, meta.loc)
    }

    /// Event `i` as the Harness reads it (fetched from the store and converted
    /// when stored in a legacy shape, or a synthetic closer).
    pub fn event(
        &self,
        backend: &dyn Backend,
        key: &SessionKey,
        i: u64,
    ) -> Result<JsonMap, Refusal> {
        if let Some(meta) = self.events.get(i as usize) {
            let stored = backend.fetch(key, meta.loc)?;
            return if meta.converted() {
                self.fold.read_back(stored)
            } else {
                Ok(stored)
            };
        }
        let stored = self.events.len() as u64;
        self.closers
            .get((i - stored) as usize)
            .cloned()
            .ok_or_else(|| Refusal::Corrupt(format!("no event {i}")))
    }

    /// The time of event `i`, in Unix milliseconds.
    pub fn event_time(&self, i: u64) -> Option<i64> {
        match self.events.get(i as usize) {
            Some(meta) => Some(meta.time),
            None => self
                .closers
                .get(i as usize - self.events.len())
                .and_then(|c| c.get("time"))
                .and_then(safe_integer),
        }
    }

    /// A generated file's bytes, rendered once per change of the session.
    pub fn file(
        &mut self,
        backend: &dyn Backend,
        key: &SessionKey,
        which: ViewFile,
    ) -> Result<Content, Refusal> {
        if let Some((_, content)) = self.cache.iter().find(|(f, _)| *f == which) {
            return Ok(content.clone());
        }
        let bytes = match which {
            ViewFile::Header => Bytes::from(header_json(&self.header, Some(&self.fold))),
            // Logged events only (never the closers, which give way when the log
            // grows), so it only grows while the log does: shared with the
            // writer, which appends to it without copying what was written.
            ViewFile::Transcript => self.transcript.shared(),
            ViewFile::Surface => Bytes::from(self.surface_bytes(backend, key)?),
            ViewFile::Index => Bytes::from(self.index_bytes(backend, key)?),
        };
        // The surface is rewritten, not extended, whenever a replacement lands.
        let lineage = match which {
            ViewFile::Surface => self.lineage + (self.fold.surface().replace_generation() << 32),
            ViewFile::Transcript => self.transcript_lineage,
            _ => self.lineage,
        };
        let content = Content { bytes, lineage };
        self.cache.push((which, content.clone()));
        Ok(content)
    }

    /// Surface nodes in order, including synthetic tool results.
    fn surface_nodes(&self) -> Vec<u64> {
        let mut nodes = self.fold.surface().nodes().to_vec();
        for closer in &self.closers {
            if closer.contains_key("surfaceOp") {
                nodes.push(
                    closer
                        .get("seq")
                        .and_then(Value::as_u64)
                        .unwrap_or_default(),
                );
            }
        }
        nodes
    }

    fn surface_bytes(&self, backend: &dyn Backend, key: &SessionKey) -> Result<Vec<u8>, Refusal> {
        let mut out = Vec::new();
        for seq in self.surface_nodes() {
            let event = self.event(backend, key, seq)?;
            if let Some(line) = surface_line(&event) {
                out.extend(line);
            }
        }
        Ok(out)
    }

    fn standing(&self, seq: u64, current: &HashSet<u64>) -> Standing {
        if current.contains(&seq) {
            Standing::Current
        } else if let Some(by) = self.fold.surface().shadowed_by(seq) {
            Standing::Shadowed { by }
        } else {
            Standing::LogOnly
        }
    }

    fn index_bytes(&self, backend: &dyn Backend, key: &SessionKey) -> Result<Vec<u8>, Refusal> {
        let current: HashSet<u64> = self.surface_nodes().into_iter().collect();
        let total = self.events.len() as u64 + self.closers.len() as u64;
        let mut out = Vec::new();
        for i in 0..total {
            let event_type = self.event_type(i).unwrap_or_default();
            let standing = self.standing(i, &current);
            // Replacements list what they cite; only they need their event fetched.
            let cites = if self.fold.surface().is_replacement(i) {
                self.event(backend, key, i)?.get("sourceEventSeqs").cloned()
            } else {
                None
            };
            let time = Value::from(self.event_time(i).unwrap_or_default());
            out.extend(index_line(
                i,
                event_type,
                &time,
                standing,
                cites.as_ref(),
                self.is_converted(i),
                self.is_synthetic(i),
            ));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

    fn turn(seq: u64, turn: u64, text: &str) -> Vec<JsonMap> {
        [
            serde_json::json!({"type": "turn/start", "seq": seq, "time": 1, "data": {"turn": turn}}),
            serde_json::json!({"type": "step/start", "seq": seq + 1, "time": 2, "data": {"turn": turn, "step": 1}}),
            serde_json::json!({"type": "user/message", "seq": seq + 2, "time": 3, "data": {"content": [{"type": "text", "text": text}], "source": {"kind": "user"}, "role": "user", "id": format!("u{seq}")}, "surfaceOp": "append"}),
            serde_json::json!({"type": "step/end", "seq": seq + 3, "time": 4, "data": {"turn": turn, "step": 1}}),
            serde_json::json!({"type": "turn/end", "seq": seq + 4, "time": 5, "data": {"turn": turn, "reason": {"kind": "completed"}}}),
        ]
        .into_iter()
        .map(|v| v.as_object().cloned().unwrap())
        .collect()
    }

    fn indexed(events: Vec<JsonMap>) -> Box<Indexed> {
        let store = MemoryStore::default();
        let header = SessionHeader::new("s", 1);
        store.insert(header.clone(), events);
        let listing = Listing::of(header, SessionKey::Row("s".into()));
        match SessionView::load(&store, &listing, Duration::from_secs(60)).state {
            State::Indexed(indexed) => indexed,
            State::Unreadable(u) => panic!("{}", u.reason.message()),
        }
    }

    #[test]
    fn a_reread_keeps_the_transcript_lineage_only_when_it_extends_the_old_one() {
        let first = indexed(turn(0, 1, "hello"));
        let mut grown = indexed([turn(0, 1, "hello"), turn(5, 2, "more")].concat());
        grown.succeed(&first);
        assert_eq!(grown.transcript_lineage, first.transcript_lineage);
        assert_ne!(grown.lineage, first.lineage);
        let mut rewritten = indexed(turn(0, 1, "goodbye"));
        rewritten.succeed(&first);
        assert_ne!(rewritten.transcript_lineage, first.transcript_lineage);
    }
}
