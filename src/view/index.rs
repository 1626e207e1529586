//! The index of one readable session: what the single streaming pass keeps
//! of each stored event (its location, time, type and file size, packed into
//! 32 bytes), the fold, the model calls and the transcript rendered as the
//! events pass, and the generated files rendered from it on demand, cached
//! until the session changes.

use std::collections::HashSet;

use serde_json::Value;

use super::{Content, FileId, ScanProgress, SessionSource, progress};
use crate::bytes::Bytes;
use crate::json::{JsonMap, safe_integer};
use crate::json_len::map_pretty_line_len;
use crate::model::Refusal;
use crate::model::Scanned;
use crate::model::fold::SessionFold;
use crate::model::header::SessionHeader;
use crate::model::steps::{ModelCall, StepScan};
use crate::model::validate::CHUNK_TYPE;
use crate::render::transcript::TranscriptWriter;
use crate::render::{self, IndexRow, Standing, event_file, header_json};
use crate::store::{EventLoc, Revision, ScanEnd, ScanPoint};

/// What the index keeps of one stored event: a huge session holds a million
/// of these, so they are packed into 32 bytes.
#[derive(Clone, Copy, Debug)]
pub(super) struct EventMeta {
    pub(super) loc: EventLoc,
    pub(super) time: i64,
    /// The type's index in `Indexed::types`, shifted left once; the low bit is
    /// set when the event is stored in a legacy shape and shown converted (spec §15).
    pub(super) type_and_converted: u32,
    /// The length of the event's file in `events/`, from the scan, so that
    /// `stat` and `ls -l` render nothing; `SIZE_UNKNOWN` when it does not fit.
    pub(super) size: u32,
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

    pub(super) fn size(&self) -> Option<u64> {
        (self.size != SIZE_UNKNOWN).then_some(u64::from(self.size))
    }
}

/// A readable session's index (see the module doc).
pub struct Indexed {
    pub(super) header: SessionHeader,
    pub(super) fold: SessionFold,
    pub(super) point: ScanPoint,
    /// False when the last scan folded events recovered from a torn tail that a
    /// later scan will read again: the next change then re-reads from the start.
    pub(super) resumable: bool,
    pub(super) torn: Option<String>,
    /// The last scan ended before the size the store's file system stated.
    pub(super) read_short: bool,
    pub(super) events: Vec<EventMeta>,
    pub(super) types: Vec<String>,
    /// Each type's part of an event file name, encoded once.
    pub(super) type_parts: Vec<String>,
    pub(super) transcript: TranscriptWriter,
    /// Synthetic closers, present while the log ends inside a turn and is quiet.
    pub(super) closers: Vec<JsonMap>,
    /// `header.json`, `surface.jsonl`, `transcript.md` and `index.jsonl`, as
    /// last rendered.
    pub(super) cache: Vec<(FileId, Content)>,
    /// The model calls (`steps/`), found during the scan.
    pub(super) steps: StepScan,
    /// A quiet log's last step when it logged no response: its call, shown
    /// after the others (the log ends inside it).
    pub(super) unanswered: Option<ModelCall>,
    /// The last few call files read: each is rendered on demand, never all at once.
    pub(super) call_cache: Vec<(usize, super::CallFile, Content)>,
    /// Bumped whenever a file is rewritten rather than extended.
    pub(super) lineage: u64,
    /// The transcript's own lineage: it never shows closers, so only a re-read
    /// log whose transcript no longer extends the old one rewrites it.
    pub(super) transcript_lineage: u64,
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

impl Indexed {
    /// An index of no events yet, for a session whose header folds cleanly.
    pub(super) fn new(header: SessionHeader, fold: SessionFold, id: &str) -> Indexed {
        Indexed {
            header,
            fold,
            point: ScanPoint::default(),
            resumable: true,
            torn: None,
            read_short: false,
            events: Vec::new(),
            types: Vec::new(),
            type_parts: Vec::new(),
            transcript: TranscriptWriter::new(id),
            closers: Vec::new(),
            cache: Vec::new(),
            steps: StepScan::default(),
            unanswered: None,
            call_cache: Vec::new(),
            lineage: 0,
            transcript_lineage: 0,
        }
    }

    /// The session's header.
    pub fn header(&self) -> &SessionHeader {
        &self.header
    }

    /// The fold of the stored events.
    pub fn fold(&self) -> &SessionFold {
        &self.fold
    }

    /// How many events the store holds (closers not counted).
    pub fn stored_count(&self) -> u64 {
        self.events.len() as u64
    }

    /// Where a torn tail begins, when the log ends torn.
    pub fn torn(&self) -> Option<&str> {
        self.torn.as_deref()
    }

    /// The synthetic closers shown while the log ends inside a turn and is quiet.
    pub fn closers(&self) -> &[JsonMap] {
        &self.closers
    }

    /// Reads stored events past the last scan point and folds them, publishing
    /// their names to `progress` as it goes.
    pub(super) fn extend(
        &mut self,
        source: &SessionSource,
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
                        map_pretty_line_len(event),
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
        let (point, end) = source.backend.scan(&source.key, &self.point, &mut sink)?;
        self.point = point;
        self.resumable = self.events.len() as u64 == self.point.events;
        self.read_short = end == ScanEnd::ShortRead;
        self.torn = match end {
            ScanEnd::Complete | ScanEnd::ShortRead => None,
            ScanEnd::Torn { at } => Some(at),
        };
        Ok(())
    }

    /// The revision to record for the log this scan read: after a read that
    /// ended short of the size the store stated, one no store answers, so
    /// the next refresh reads on (and a scan saved with it is read on too).
    pub(super) fn revision_after(&self, revision: Option<Revision>) -> Option<Revision> {
        match self.read_short {
            true => revision.as_ref().map(Revision::unsettled),
            false => revision,
        }
    }

    /// Returns the spare room a first scan's growing buffers left, so a cached
    /// session costs what it holds.
    pub(super) fn shrink(&mut self) {
        self.events.shrink_to_fit();
        self.fold.shrink();
        self.steps.shrink();
        self.transcript.shrink();
    }

    /// Computes the closers for the current quiet state; true when they changed.
    pub(super) fn settle(&mut self, quiet: bool) -> bool {
        let closers = if quiet {
            self.fold.turn_scan().closers()
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
    pub(super) fn succeed(&mut self, old: &Indexed) {
        self.lineage = old.lineage + 1;
        let (new, old_bytes) = (self.transcript.shared(), old.transcript.shared());
        self.transcript_lineage = if new.starts_with(&old_bytes) {
            old.transcript_lineage
        } else {
            old.transcript_lineage + 1
        };
    }

    /// Drops cached files; `rewritten` when content was replaced, not extended.
    pub(super) fn changed(&mut self, rewritten: bool) {
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

    /// True for a synthetic closer, which no store holds.
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
    pub(super) fn stored_event(&self, source: &SessionSource, i: u64) -> Result<JsonMap, Refusal> {
        let meta = self
            .events
            .get(i as usize)
            .ok_or_else(|| Refusal::Corrupt(format!("no stored event {i}")))?;
        source.backend.fetch(&source.key, meta.loc)
    }

    /// Event `i` as the Harness reads it (fetched from the store and converted
    /// when stored in a legacy shape, or a synthetic closer).
    pub(super) fn event(&self, source: &SessionSource, i: u64) -> Result<JsonMap, Refusal> {
        if let Some(meta) = self.events.get(i as usize) {
            let stored = source.backend.fetch(&source.key, meta.loc)?;
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

    /// The bytes of one generated file; `None` when the session has no such
    /// file. `header.json`, `surface.jsonl`, `transcript.md` and
    /// `index.jsonl` are rendered once per change of the session.
    pub(super) fn render(
        &mut self,
        source: &SessionSource,
        which: FileId,
    ) -> Option<Result<Content, Refusal>> {
        if let Some((_, content)) = self.cache.iter().find(|(f, _)| *f == which) {
            return Some(Ok(content.clone()));
        }
        let rendered = match which {
            FileId::Header => Ok(Bytes::from(header_json(&self.header, Some(&self.fold)))),
            // Logged events only (never the closers, which give way when the log
            // grows), so it only grows while the log does: shared with the
            // writer, which appends to it without copying what was written.
            FileId::Transcript => Ok(self.transcript.shared()),
            FileId::Surface => {
                render::surface_file(self.surface_nodes(), |seq| self.event(source, seq))
                    .map(Bytes::from)
            }
            FileId::Index => self.index_bytes(source).map(Bytes::from),
            FileId::Event(seq) => {
                if seq >= self.stored_count() + self.closers.len() as u64 {
                    return None;
                }
                return Some(self.event(source, seq).map(|event| Content {
                    bytes: Bytes::from(event_file::content(&event)),
                    lineage: 0,
                }));
            }
            FileId::Call(call, file) => {
                if call as usize >= self.call_count() {
                    return None;
                }
                return Some(self.call_file(source, call as usize, file));
            }
            // Rendered by the view, which knows what the store says of the writer.
            FileId::Error | FileId::Status => return None,
        };
        let bytes = match rendered {
            Ok(bytes) => bytes,
            Err(refusal) => return Some(Err(refusal)),
        };
        // The surface is rewritten, not extended, whenever a replacement lands.
        let lineage = match which {
            FileId::Surface => self.lineage + (self.fold.surface().replace_generation() << 32),
            FileId::Transcript => self.transcript_lineage,
            _ => self.lineage,
        };
        let content = Content { bytes, lineage };
        self.cache.push((which, content.clone()));
        Some(Ok(content))
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

    fn standing(&self, seq: u64, current: &HashSet<u64>) -> Standing {
        if current.contains(&seq) {
            Standing::Current
        } else if let Some(by) = self.fold.surface().shadowed_by(seq) {
            Standing::Shadowed { by }
        } else {
            Standing::LogOnly
        }
    }

    fn index_bytes(&self, source: &SessionSource) -> Result<Vec<u8>, Refusal> {
        let current: HashSet<u64> = self.surface_nodes().into_iter().collect();
        let total = self.events.len() as u64 + self.closers.len() as u64;
        render::index_file((0..total).map(|seq| {
            // Replacements list what they cite; only they need their event fetched.
            let cites = match self.fold.surface().is_replacement(seq) {
                true => self.event(source, seq)?.get("sourceEventSeqs").cloned(),
                false => None,
            };
            Ok(IndexRow {
                seq,
                event_type: self.event_type(seq).unwrap_or_default(),
                time: self.event_time(seq).unwrap_or_default(),
                standing: self.standing(seq, &current),
                cites,
                converted: self.is_converted(seq),
                synthetic: self.is_synthetic(seq),
            })
        }))
    }
}
