//! A readable session's scan saved as bytes and read back, so that a remount
//! answers from what an earlier scan learned and reads only the log's growth
//! since. Where the bytes are kept is a [`SavedScans`]'s business, not this
//! module's: it only says what they hold and when they may be trusted.
//!
//! The bytes hold the scan's facts (header, fold, model calls, scan point,
//! the transcript writer's state) as JSON, the transcript itself, and each
//! event's [`EventMeta`] in columns of varint deltas. They are trusted only
//! for the log they were taken of: its revision unchanged, or the same
//! artifact grown with the bytes before the scan point unchanged.

use serde::{Deserialize, Serialize};

use super::index::{EventMeta, Indexed};
use crate::bytes::Bytes;
use crate::model::Refusal;
use crate::model::fold::SessionFold;
use crate::model::header::SessionHeader;
use crate::model::steps::StepScan;
use crate::render::event_file;
use crate::render::transcript::TranscriptWriter;
use crate::store::{EventLoc, Revision, ScanPoint, SessionKey};

/// Where saved scans are kept, by session key. Keeping is best effort: a
/// keeper that cannot keep says so in its own log, and the mount goes on.
pub trait SavedScans: Send + Sync + std::fmt::Debug {
    /// The bytes last kept for `key`, when there are any and they are sound.
    fn load(&self, key: &SessionKey) -> Option<Vec<u8>>;

    /// Keeps `bytes` for `key` in place of what was kept.
    fn save(&self, key: &SessionKey, bytes: Vec<u8>);

    /// Bytes handed to `save` and held in memory until kept: memory the
    /// view cache leaves them.
    fn queued_bytes(&self) -> usize {
        0
    }
}

/// Bumped whenever the layout below or any saved type changes: bytes of
/// another version are not read.
const LAYOUT: u32 = 2;

/// After the layout: what follows is a scan.
const SCAN: u8 = 0;
/// After the layout: what follows is why the log cannot be read.
const REFUSAL: u8 = 1;

/// Why a log cannot be read, as saved: only a verdict on its content (damage,
/// or a format this build does not read), never a store unavailable now.
#[derive(Serialize, Deserialize)]
struct SavedRefusal {
    id: String,
    revision: String,
    header: SessionHeader,
    unsupported: bool,
    message: String,
}

/// The scan's facts, as saved (borrowed) and as read back (owned).
#[derive(Serialize)]
struct FactsRef<'a> {
    id: &'a str,
    revision: &'a str,
    /// [`crate::store::Source::prefix_digest`] at the scan point.
    digest: Option<u64>,
    header: &'a SessionHeader,
    fold: &'a SessionFold,
    point: &'a ScanPoint,
    resumable: bool,
    torn: Option<&'a str>,
    types: &'a [String],
    steps: &'a StepScan,
    transcript: &'a TranscriptWriter,
}

#[derive(Deserialize)]
struct Facts {
    id: String,
    revision: String,
    digest: Option<u64>,
    header: SessionHeader,
    fold: SessionFold,
    point: ScanPoint,
    resumable: bool,
    torn: Option<String>,
    types: Vec<String>,
    steps: StepScan,
    transcript: TranscriptWriter,
}

/// The bytes that save `indexed`, a scan of session `id` at `revision`
/// whose log digests to `digest` before its scan point.
pub(super) fn save(
    indexed: &Indexed,
    id: &str,
    revision: &Revision,
    digest: Option<u64>,
) -> Result<Vec<u8>, String> {
    let facts = FactsRef {
        id,
        revision: &revision.0,
        digest,
        header: &indexed.header,
        fold: &indexed.fold,
        point: &indexed.point,
        resumable: indexed.resumable,
        torn: indexed.torn.as_deref(),
        types: &indexed.types,
        steps: &indexed.steps,
        transcript: &indexed.transcript,
    };
    let facts = serde_json::to_vec(&facts).map_err(|e| format!("cannot save a scan: {e}"))?;
    let transcript = indexed.transcript.shared();
    let mut out = Vec::with_capacity(facts.len() + transcript.len() + indexed.events.len() * 8);
    out.extend_from_slice(&LAYOUT.to_le_bytes());
    out.push(SCAN);
    put_varint(&mut out, facts.len() as u64);
    out.extend_from_slice(&facts);
    put_varint(&mut out, transcript.len() as u64);
    for piece in transcript.pieces() {
        out.extend_from_slice(piece);
    }
    put_events(&mut out, &indexed.events);
    Ok(out)
}

/// The bytes that save why session `id`, whose log is at `revision`, cannot
/// be read; `None` for a store that cannot be read now, which is no verdict.
pub(super) fn save_refusal(
    id: &str,
    revision: &Revision,
    header: &SessionHeader,
    reason: &Refusal,
) -> Option<Vec<u8>> {
    let (unsupported, message) = match reason {
        Refusal::Unsupported(m) => (true, m),
        Refusal::Corrupt(m) => (false, m),
        Refusal::Unavailable { .. } => return None,
    };
    let saved = SavedRefusal {
        id: id.to_string(),
        revision: revision.0.clone(),
        header: header.clone(),
        unsupported,
        message: message.clone(),
    };
    let mut out = LAYOUT.to_le_bytes().to_vec();
    out.push(REFUSAL);
    out.extend(serde_json::to_vec(&saved).ok()?);
    Some(out)
}

/// What was saved of a session, read back.
pub(super) enum Saved {
    /// Its scan, with what it was taken of.
    Scan(Loaded),
    /// Why its log, at `revision`, cannot be read.
    Refused { revision: Revision, reason: Refusal },
}

/// A saved scan read back, with what it was taken of.
pub(super) struct Loaded {
    pub indexed: Box<Indexed>,
    pub revision: Revision,
    pub digest: Option<u64>,
}

/// Reads back what [`save`] or [`save_refusal`] saved of session `id`, when
/// the bytes are whole, of this layout, and of that session with that header.
pub(super) fn load(bytes: Vec<u8>, id: &str, header: &SessionHeader) -> Result<Saved, String> {
    let mut input = Reader {
        bytes: &bytes,
        at: 0,
    };
    let layout = input.take(4)?;
    if layout != LAYOUT.to_le_bytes() {
        return Err("saved by another version of sessionfs".into());
    }
    match input.take(1)?[0] {
        SCAN => {
            let (mut loaded, writer, transcript) = load_scan(input, id, header)?;
            // The transcript is the saved bytes themselves, cut down to it:
            // copying it would take as many fresh pages again (8 MiB for a
            // session of 1.3 M events, on a remount's first read).
            let mut bytes = bytes;
            bytes.truncate(transcript.end);
            bytes.drain(..transcript.start);
            bytes.shrink_to_fit();
            loaded.indexed.transcript = writer.with_output(Bytes::from(bytes));
            Ok(Saved::Scan(loaded))
        }
        REFUSAL => {
            let saved: SavedRefusal =
                serde_json::from_slice(&bytes[input.at..]).map_err(|e| format!("refusal: {e}"))?;
            if saved.id != id || saved.header != *header {
                return Err("saved for another session or header".into());
            }
            let reason = match saved.unsupported {
                true => Refusal::Unsupported(saved.message),
                false => Refusal::Corrupt(saved.message),
            };
            Ok(Saved::Refused {
                revision: Revision(saved.revision),
                reason,
            })
        }
        _ => Err("neither a scan nor a refusal".into()),
    }
}

/// The scan saved in `input`, but for its transcript: the writer that made
/// it, and where its bytes are in `input`.
fn load_scan(
    mut input: Reader,
    id: &str,
    header: &SessionHeader,
) -> Result<(Loaded, TranscriptWriter, std::ops::Range<usize>), String> {
    let bytes = input.bytes;
    let facts_len = input.varint()?;
    let facts: Facts =
        serde_json::from_slice(input.take(facts_len)?).map_err(|e| format!("facts: {e}"))?;
    if facts.id != id || facts.header != *header {
        return Err("saved for another session or header".into());
    }
    let transcript_len = input.varint()?;
    let transcript_at = input.at;
    input.take(transcript_len)?;
    let transcript = transcript_at..input.at;
    let events = take_events(&mut input, facts.types.len())?;
    if input.at != bytes.len() {
        return Err("bytes after the end".into());
    }
    // A scan that can be continued kept exactly the events before its point
    // (one that folded a torn tail's recovered events kept more).
    if facts.resumable != (events.len() as u64 == facts.point.events) {
        return Err("its events disagree with its scan point".into());
    }
    let type_parts = facts
        .types
        .iter()
        .map(|t| event_file::type_part(t))
        .collect();
    let mut indexed = Box::new(Indexed::new(facts.header, facts.fold, id));
    indexed.point = facts.point;
    indexed.resumable = facts.resumable;
    indexed.torn = facts.torn;
    indexed.events = events;
    indexed.types = facts.types;
    indexed.type_parts = type_parts;
    indexed.steps = facts.steps;
    let loaded = Loaded {
        indexed,
        revision: Revision(facts.revision),
        digest: facts.digest,
    };
    Ok((loaded, facts.transcript, transcript))
}

/// Each field of every event in its own column, as deltas where they grow
/// (offsets and times), so that the columns stay small.
fn put_events(out: &mut Vec<u8>, events: &[EventMeta]) {
    put_varint(out, events.len() as u64);
    let mut previous = (0u64, 0i64);
    for meta in events {
        put_varint(out, zigzag(meta.loc.record.wrapping_sub(previous.0) as i64));
        previous.0 = meta.loc.record;
    }
    for meta in events {
        put_varint(out, u64::from(meta.loc.within));
    }
    for meta in events {
        put_varint(out, u64::from(meta.loc.member));
    }
    for meta in events {
        put_varint(out, zigzag(meta.time.wrapping_sub(previous.1)));
        previous.1 = meta.time;
    }
    for meta in events {
        put_varint(out, u64::from(meta.type_and_converted));
    }
    for meta in events {
        put_varint(out, u64::from(meta.size));
    }
}

fn take_events(input: &mut Reader, types: usize) -> Result<Vec<EventMeta>, String> {
    let count = input.varint()?;
    // Every event takes at least one byte in each of six columns.
    if count > (input.bytes.len() - input.at) as u64 / 6 {
        return Err("event count exceeds the bytes".into());
    }
    // Each column is read straight into the events: no column is held apart.
    // The first makes them (a blank written first would be one more pass
    // over what may be tens of MiB).
    let mut events = Vec::with_capacity(count as usize);
    let mut record = 0u64;
    for _ in 0..count {
        record = record.wrapping_add(unzigzag(input.varint()?) as u64);
        events.push(EventMeta {
            loc: EventLoc {
                record,
                within: 0,
                member: 0,
            },
            time: 0,
            type_and_converted: 0,
            size: 0,
        });
    }
    for meta in &mut events {
        meta.loc.within = input.varint_u32()?;
    }
    for meta in &mut events {
        meta.loc.member = input.varint_u32()?;
    }
    let mut time = 0i64;
    for meta in &mut events {
        time = time.wrapping_add(unzigzag(input.varint()?));
        meta.time = time;
    }
    for meta in &mut events {
        meta.type_and_converted = input.varint_u32()?;
        if (meta.type_and_converted >> 1) as usize >= types {
            return Err("an event's type is not among the saved types".into());
        }
    }
    for meta in &mut events {
        meta.size = input.varint_u32()?;
    }
    Ok(events)
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Saved bytes read in order; running out is an error, never a panic.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, len: u64) -> Result<&[u8], String> {
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| self.at.checked_add(len))
            .filter(|end| *end <= self.bytes.len())
            .ok_or("cut short")?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    /// A varint; most are one byte, read without the loop (an index of a
    /// million events reads six million).
    #[inline]
    fn varint(&mut self) -> Result<u64, String> {
        match self.bytes.get(self.at) {
            Some(&byte) if byte < 0x80 => {
                self.at += 1;
                Ok(u64::from(byte))
            }
            _ => self.long_varint(),
        }
    }

    fn long_varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.bytes.get(self.at).ok_or("cut short")?;
            self.at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a varint longer than 64 bits".into())
    }

    fn varint_u32(&mut self) -> Result<u32, String> {
        u32::try_from(self.varint()?).map_err(|_| "a field exceeds 32 bits".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_zigzag_read_back_at_their_limits() {
        let values = [0, 1, 127, 128, u64::from(u32::MAX), u64::MAX];
        let mut out = Vec::new();
        for v in values {
            put_varint(&mut out, v);
        }
        let mut input = Reader { bytes: &out, at: 0 };
        for v in values {
            assert_eq!(input.varint().unwrap(), v);
        }
        assert!(input.varint().is_err());
        for v in [0, -1, 1, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }
}
