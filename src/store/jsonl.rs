//! The JSONL backend (spec §10): one directory of project directories, each
//! holding one directory per session with `session.jsonl` (raw) or
//! `session.jsonl.zstd` (a concatenation of checksummed zstd frames whose
//! plaintext is the raw file). A root may hold both encodings.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::ops::ControlFlow;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::json::JsonMap;
use crate::model::Refusal;
use crate::model::chunk_rows::{JSONL_ROW_LIMITS, RowKind, expand_jsonl_row, pack};
use crate::model::header::SessionHeader;
use crate::model::ids::{decode_segment, encode_segment, project_dir};
use crate::model::quick;
use crate::store::tail::{Decoded, TailScanner};
use crate::store::zstd_frames::{
    Frame, FrameReader, FrameScan, Frames, FramesEnd, decode_frame, decode_torn_frame,
    encode_frame, read_frames, scan_frame,
};
use crate::store::{
    Backend, EventLoc, EventSink, Listing, Revision, ScanEnd, ScanPoint, SessionKey, read_ahead,
};

pub const RAW_NAME: &str = "session.jsonl";
pub const ZSTD_NAME: &str = "session.jsonl.zstd";

/// The longest record (line) accepted; a longer one is refused, so a hostile file
/// cannot make the mount allocate without bound.
pub const MAX_RECORD_BYTES: usize = 64 << 20;

/// The longest header line read while listing.
const MAX_HEADER_BYTES: usize = 1 << 20;
/// A zstd scan with at least this many compressed bytes ahead decompresses on a
/// second thread; below it, starting the thread costs more than it saves.
const DECODE_AHEAD_BYTES: u64 = 1 << 20;

pub struct JsonlStore {
    root: PathBuf,
    /// The last decompressed zstd frame, so fetching neighbouring events does not
    /// decompress the same frame again and again.
    frame_cache: Mutex<Option<CachedFrame>>,
    /// Session directories that held no log at the last listing (one being
    /// materialised): their own times join the listing revision, since the log
    /// appearing in them changes no project directory.
    without_log: Mutex<Vec<PathBuf>>,
}

struct CachedFrame {
    path: PathBuf,
    offset: u64,
    plaintext: Arc<Vec<u8>>,
}

/// Session directories listed at a time.
const LIST_PART: usize = 4096;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn is_zstd(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == ZSTD_NAME)
}

fn corrupt(path: &Path, why: impl std::fmt::Display) -> Refusal {
    Refusal::Corrupt(format!("{why} (raw log: {})", path.display()))
}

/// An I/O error reading a log: the store cannot be read now, which says
/// nothing of the log's content. Errors that carry no errno (a decoder's
/// verdict on the bytes) are damage.
fn io_refusal(path: &Path, e: io::Error) -> Refusal {
    match e.raw_os_error() {
        Some(errno) => Refusal::Unavailable {
            errno,
            reason: format!("cannot read {} now: {e}", path.display()),
        },
        None => Refusal::Corrupt(format!("cannot read {}: {e}", path.display())),
    }
}

/// A scan continued from `from` needs a log at least that long: a shorter one
/// was cut or replaced, and must be read from the start instead.
fn check_not_shorter(path: &Path, file: &File, from: &ScanPoint) -> Result<(), Refusal> {
    let len = file.metadata().map_err(|e| io_refusal(path, e))?.len();
    if len < from.offset {
        return Err(corrupt(
            path,
            format!(
                "the log is {len} bytes, shorter than the {} already read",
                from.offset
            ),
        ));
    }
    Ok(())
}

/// Decodes one stored line for a scan (spec §10.4): streamed chunks quickly,
/// anything else in full.
fn decode_record(line: &[u8]) -> Result<Decoded, RecordError> {
    match quick::jsonl_record(line, JSONL_ROW_LIMITS) {
        Some(run) => Ok(Decoded::Chunks(run)),
        None => decode_events(line).map(Decoded::Events),
    }
}

/// Decodes one stored line in full: a packed row expands to its events; any
/// other object is one event.
fn decode_events(line: &[u8]) -> Result<Vec<JsonMap>, RecordError> {
    // Invalid UTF-8 is read as the Harness's decoder reads it: replaced. Checked
    // only when the direct parse fails, so valid lines are validated once.
    let value: Value = serde_json::from_slice(line)
        .or_else(|_| serde_json::from_str(&String::from_utf8_lossy(line)))
        .map_err(|_| RecordError::Unparsable)?;
    match value {
        Value::Null => Err(RecordError::Null),
        Value::Object(map) => match map
            .get("type")
            .and_then(Value::as_str)
            .and_then(RowKind::from_tag)
        {
            Some(kind) => {
                expand_jsonl_row(kind, &map, JSONL_ROW_LIMITS).map_err(|_| RecordError::Unparsable)
            }
            None => Ok(vec![map]),
        },
        // Not an object: the Harness passes it through and it then fails contiguity.
        _ => Err(RecordError::Unparsable),
    }
}

enum RecordError {
    Unparsable,
    /// A `null` line makes the Harness scanner throw wherever it stands.
    Null,
}

/// The next line of a raw log, decoded, or how the log ends.
enum RawLine {
    Decoded {
        len: u64,
        decoded: Result<Decoded, RecordError>,
    },
    End,
    Partial,
    TooLong,
    Failed(io::Error),
}

impl RawLine {
    fn next(reader: &mut impl BufRead) -> RawLine {
        match read_line(reader, MAX_RECORD_BYTES) {
            Ok(Line::Complete(bytes)) => RawLine::Decoded {
                len: bytes.len() as u64,
                decoded: decode_record(&bytes),
            },
            Ok(Line::End) => RawLine::End,
            Ok(Line::Partial) => RawLine::Partial,
            Ok(Line::TooLong) => RawLine::TooLong,
            Err(e) => RawLine::Failed(e),
        }
    }

    /// A line after which the log has nothing more to read.
    fn ends(&self) -> bool {
        !matches!(self, RawLine::Decoded { .. })
    }
}

/// The line scanner of spec §10.5 over plaintext records, shared by raw and zstd.
struct LineScanner<'a> {
    tail: TailScanner,
    /// Lines after the header, for messages.
    line_number: u64,
    sink: &'a mut EventSink<'a>,
    path: &'a Path,
}

impl LineScanner<'_> {
    /// Feeds one complete line (without its newline) stored at `loc`.
    fn line(&mut self, line: &[u8], loc: EventLoc) -> Result<bool, Refusal> {
        self.decoded(decode_record(line), loc)
    }

    /// Feeds the next line, already decoded; true when it was kept.
    fn decoded(
        &mut self,
        decoded: Result<Decoded, RecordError>,
        loc: EventLoc,
    ) -> Result<bool, Refusal> {
        self.line_number += 1;
        let number = self.line_number;
        let decoded = match decoded {
            Ok(decoded) => decoded,
            Err(RecordError::Null) => {
                return Err(corrupt(
                    self.path,
                    format!("corrupt session log: null record at line {number}"),
                ));
            }
            Err(RecordError::Unparsable) => Decoded::Bad(format!(
                "corrupt session log: unparsable committed event at line {number}"
            )),
        };
        let path = self.path;
        let kept = self
            .tail
            .feed(decoded, || {
                format!("corrupt session log: seq gap at line {number}")
            })
            .map_err(|r| corrupt(path, r))?;
        let Some(record) = kept else {
            return Ok(false);
        };
        record.deliver(|member, event| (self.sink)(EventLoc { member, ..loc }, event))?;
        Ok(true)
    }
}

impl JsonlStore {
    pub fn open(root: &Path) -> Result<JsonlStore, String> {
        let root = root
            .canonicalize()
            .map_err(|e| format!("cannot open store {}: {e}", root.display()))?;
        std::fs::read_dir(&root)
            .map_err(|e| format!("cannot list store {}: {e}", root.display()))?;
        Ok(JsonlStore {
            root,
            frame_cache: Mutex::new(None),
            without_log: Mutex::default(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Real subdirectories of `dir` (symlinks are not followed out of the store).
    fn subdirs(dir: &Path) -> Vec<(String, PathBuf)> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut out: Vec<(String, PathBuf)> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path())))
            .collect();
        out.sort();
        out
    }

    /// The listings of some session directories, in their order. Each costs a
    /// few small reads (its directory, its first bytes), independent of the
    /// others: many at once keep the disk busy, so a store of thousands of
    /// sessions lists in a fraction of the time.
    fn list_session_dirs(&self, session_dirs: &[(String, PathBuf)]) -> Vec<Listing> {
        let threads = std::thread::available_parallelism()
            .map_or(4, |n| n.get() * 8)
            .min(16);
        let next = AtomicUsize::new(0);
        let mut found: Vec<(usize, Listing)> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| {
                        let mut listed = Vec::new();
                        loop {
                            let at = next.fetch_add(1, Ordering::Relaxed);
                            let Some((segment, dir)) = session_dirs.get(at) else {
                                break;
                            };
                            let mut found = false;
                            for (k, file) in [RAW_NAME, ZSTD_NAME].into_iter().enumerate() {
                                let path = dir.join(file);
                                let Ok(meta) = std::fs::symlink_metadata(&path) else {
                                    continue;
                                };
                                if meta.is_file() {
                                    let listing = self.listing(segment, &path, meta.mode());
                                    listed.push((2 * at + k, listing));
                                    found = true;
                                }
                            }
                            if !found {
                                lock(&self.without_log).push(dir.clone());
                            }
                        }
                        listed
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|worker| worker.join().unwrap_or_default())
                .collect()
        });
        // In store order, whichever worker read them.
        found.sort_by_key(|(order, _)| *order);
        found.into_iter().map(|(_, listing)| listing).collect()
    }

    fn read_header(&self, path: &Path) -> Result<SessionHeader, String> {
        let line = if is_zstd(path) {
            read_zstd_header(path)?
        } else {
            read_raw_header(path)?
        };
        let text = String::from_utf8_lossy(&line);
        let value: Value = serde_json::from_str(&text)
            .map_err(|_| "first line is not a session header (not JSON)".to_string())?;
        let Value::Object(map) = value else {
            return Err("first line is not a session header (not an object)".into());
        };
        SessionHeader::from_jsonl(&map)
    }

    /// One session's listing, from its header alone.
    fn listing(&self, segment: &str, path: &Path, mode: u32) -> Listing {
        let header = self
            .read_header(path)
            .and_then(|h| self.check_identity(path, &h).map(|_| h));
        let (id, raw_name) = match (&header, decode_segment(segment)) {
            (Ok(h), _) => (h.id.clone(), None),
            (Err(_), Some(id)) => (id, None),
            (Err(_), None) => (segment.to_string(), Some(segment.to_string())),
        };
        Listing {
            id,
            key: SessionKey::File(path.to_path_buf()),
            header,
            raw_name,
            mode: Some(mode & 0o7777),
        }
    }

    /// The identity check of spec §10.9: the header's id and cwd must name this path.
    fn check_identity(&self, path: &Path, header: &SessionHeader) -> Result<(), String> {
        let file = if is_zstd(path) { ZSTD_NAME } else { RAW_NAME };
        let segment = encode_segment(&header.id).ok_or("the header's session id is empty")?;
        let expected = self
            .root
            .join(project_dir(header.cwd.as_deref()))
            .join(segment)
            .join(file);
        let same = expected == path
            || matches!((expected.canonicalize(), path.canonicalize()), (Ok(a), Ok(b)) if a == b);
        if same {
            Ok(())
        } else {
            Err(format!(
                "header id {:?} and cwd {:?} identify {}, not this file",
                header.id,
                header.cwd,
                expected.display()
            ))
        }
    }

    fn scan_raw(
        &self,
        path: &Path,
        from: &ScanPoint,
        sink: &mut EventSink,
    ) -> Result<(ScanPoint, ScanEnd), Refusal> {
        let file = File::open(path).map_err(|e| io_refusal(path, e))?;
        check_not_shorter(path, &file, from)?;
        let mut reader = BufReader::with_capacity(256 << 10, file);
        let mut offset = from.offset;
        if offset == 0 {
            let header =
                read_line(&mut reader, MAX_HEADER_BYTES).map_err(|e| io_refusal(path, e))?;
            match header {
                Line::Complete(bytes) => offset = bytes.len() as u64 + 1,
                _ => {
                    return Err(corrupt(
                        path,
                        "corrupt session log: empty or header-less session log",
                    ));
                }
            }
        } else {
            reader
                .seek(SeekFrom::Start(offset))
                .map_err(|e| io_refusal(path, e))?;
        }
        let mut scanner = LineScanner {
            tail: TailScanner::new(from.events),
            line_number: from.plain,
            sink,
            path,
        };
        let mut committed = ScanPoint {
            offset,
            ..from.clone()
        };
        let mut position = offset;
        let mut consume = |item: RawLine| -> ControlFlow<Result<ScanEnd, Refusal>> {
            let decoded = match item {
                RawLine::Decoded { len, decoded } => (len, decoded),
                RawLine::End => return ControlFlow::Break(Ok(ScanEnd::Complete)),
                RawLine::Partial => {
                    return ControlFlow::Break(Ok(ScanEnd::Torn {
                        at: format!("byte {position} (an unterminated last line)"),
                    }));
                }
                RawLine::TooLong => {
                    return ControlFlow::Break(Err(corrupt(
                        path,
                        format!(
                            "record at byte {position} is longer than {MAX_RECORD_BYTES} bytes"
                        ),
                    )));
                }
                RawLine::Failed(e) => return ControlFlow::Break(Err(io_refusal(path, e))),
            };
            let loc = EventLoc {
                record: position,
                within: 0,
                member: 0,
            };
            let (len, decoded) = decoded;
            match scanner.decoded(decoded, loc) {
                Err(refusal) => return ControlFlow::Break(Err(refusal)),
                Ok(kept) => {
                    position += len + 1;
                    if kept {
                        committed = ScanPoint {
                            events: scanner.tail.next_seq(),
                            offset: position,
                            plain: scanner.line_number,
                            frames: 0,
                        };
                    }
                }
            }
            ControlFlow::Continue(())
        };
        let unread = reader
            .get_ref()
            .metadata()
            .map_err(|e| io_refusal(path, e))?
            .len()
            .saturating_sub(offset);
        let end = if unread < DECODE_AHEAD_BYTES {
            loop {
                if let ControlFlow::Break(end) = consume(RawLine::next(&mut reader)) {
                    break end;
                }
            }
        } else {
            // Lines are read and decoded on a second thread while they are folded.
            let next = || {
                let line = RawLine::next(&mut reader);
                let more = !line.ends();
                (line, more)
            };
            match read_ahead(1024, next, consume) {
                ControlFlow::Break(end) => end,
                // The last line read always ends the scan.
                ControlFlow::Continue(()) => Err(io_refusal(
                    path,
                    io::Error::other("the log ended without an end"),
                )),
            }
        }?;
        match (end, scanner.tail.issue()) {
            (ScanEnd::Complete, Some(issue)) => Ok((
                committed,
                ScanEnd::Torn {
                    at: issue.to_string(),
                },
            )),
            (end, _) => Ok((committed, end)),
        }
    }

    fn scan_zstd(
        &self,
        path: &Path,
        from: &ScanPoint,
        sink: &mut EventSink,
    ) -> Result<(ScanPoint, ScanEnd), Refusal> {
        let mut file = File::open(path).map_err(|e| io_refusal(path, e))?;
        check_not_shorter(path, &file, from)?;
        let mut here = from.offset;
        let mut frames = from.frames;
        if frames == 0 {
            match FrameReader::new(&mut file)
                .next_frame()
                .map_err(|e| io_refusal(path, e))?
            {
                Frame::Complete(frame) => {
                    decode_header_frame(frame).map_err(|why| corrupt(path, why))?;
                    here += frame.len() as u64;
                    frames = 1;
                }
                _ => {
                    return Err(corrupt(
                        path,
                        "corrupt Zstandard session log: empty or header-less Zstandard session log",
                    ));
                }
            }
        }
        file.seek(SeekFrom::Start(here))
            .map_err(|e| io_refusal(path, e))?;
        let unread = file
            .metadata()
            .map_err(|e| io_refusal(path, e))?
            .len()
            .saturating_sub(here);
        let mut scanner = LineScanner {
            tail: TailScanner::strict(from.events),
            line_number: from.plain,
            sink,
            path,
        };
        let read = read_frames(file, unread >= DECODE_AHEAD_BYTES, |compressed, plaintext| {
            let torn_record = || {
                corrupt(
                    path,
                    format!(
                        "corrupt Zstandard session log: complete frame at byte {here} contains a torn JSONL record"
                    ),
                )
            };
            let Some(body) = plaintext.strip_suffix(b"\n") else {
                return ControlFlow::Break(torn_record());
            };
            let mut within = 0usize;
            for line in body.split(|b| *b == b'\n') {
                let loc = EventLoc {
                    record: here,
                    within: within as u32,
                    member: 0,
                };
                if let Err(refusal) = scanner.line(line, loc) {
                    return ControlFlow::Break(match refusal {
                        Refusal::Corrupt(m)
                            if m.starts_with("corrupt session log: unparsable")
                                || m.starts_with("corrupt session log: seq gap") =>
                        {
                            torn_record()
                        }
                        other => other,
                    });
                }
                within += line.len() + 1;
            }
            here += compressed;
            frames += 1;
            ControlFlow::Continue(())
        })
        .map_err(|e| io_refusal(path, e))?;
        let committed = ScanPoint {
            events: scanner.tail.next_seq(),
            offset: here,
            plain: scanner.line_number,
            frames,
        };
        match read {
            Frames::Stopped(refusal) => Err(refusal),
            Frames::Ended(FramesEnd::End) => Ok((committed, ScanEnd::Complete)),
            Frames::Ended(FramesEnd::Corrupt(why)) => Err(corrupt(
                path,
                format!("corrupt Zstandard session log: {why} at byte {here}"),
            )),
            Frames::Ended(FramesEnd::Undecodable) => Err(corrupt(
                path,
                format!("corrupt Zstandard session log: frame at byte {here} failed validation"),
            )),
            Frames::Ended(FramesEnd::Torn(bytes)) => {
                let plaintext = decode_torn_frame(&bytes);
                let mut lenient = LineScanner {
                    tail: TailScanner::new(scanner.tail.next_seq()),
                    line_number: scanner.line_number,
                    sink: scanner.sink,
                    path,
                };
                let mut within = 0usize;
                let mut rest = &plaintext[..];
                while let Some(newline) = rest.iter().position(|b| *b == b'\n') {
                    let loc = EventLoc {
                        record: here,
                        within: within as u32,
                        member: 0,
                    };
                    lenient.line(&rest[..newline], loc)?;
                    within += newline + 1;
                    rest = &rest[newline + 1..];
                }
                // Events recovered from the torn frame are shown, but the next scan
                // starts again at the torn frame: it may still be being written.
                Ok((
                    committed,
                    ScanEnd::Torn {
                        at: format!("byte {here} (an incomplete final frame)"),
                    },
                ))
            }
        }
    }

    /// The plaintext of the frame starting at `offset` (complete or torn), cached.
    fn frame_plaintext(&self, path: &Path, offset: u64) -> Result<Arc<Vec<u8>>, Refusal> {
        let mut cache = self.frame_cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(cached) = cache.as_ref()
            && cached.path == path
            && cached.offset == offset
        {
            return Ok(cached.plaintext.clone());
        }
        let mut file = File::open(path).map_err(|e| io_refusal(path, e))?;
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| io_refusal(path, e))?;
        let mut reader = FrameReader::new(file);
        let plaintext = match reader.next_frame().map_err(|e| io_refusal(path, e))? {
            Frame::Complete(frame) => {
                Arc::new(decode_frame(frame).map_err(|why| corrupt(path, why))?)
            }
            Frame::Torn(bytes) => Arc::new(decode_torn_frame(bytes)),
            Frame::Corrupt(why) => return Err(corrupt(path, why)),
            Frame::End => return Err(corrupt(path, format!("no frame at byte {offset}"))),
        };
        *cache = Some(CachedFrame {
            path: path.to_path_buf(),
            offset,
            plaintext: plaintext.clone(),
        });
        Ok(plaintext)
    }

    fn materialise(
        &self,
        header: &SessionHeader,
        events: &[JsonMap],
        zstd: bool,
    ) -> io::Result<PathBuf> {
        let segment = encode_segment(&header.id)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty session id"))?;
        let project = self.root.join(project_dir(header.cwd.as_deref()));
        let session_dir = project.join(&segment);
        make_private_dir(&project, &self.root)?;
        make_private_dir(&session_dir, &project)?;
        let final_path = session_dir.join(if zstd { ZSTD_NAME } else { RAW_NAME });
        if std::fs::symlink_metadata(&final_path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} already exists", final_path.display()),
            ));
        }
        let header_line = format!("{}\n", header.to_jsonl_line());
        let mut batch = String::new();
        for record in pack(events, usize::MAX) {
            batch.push_str(&serde_json::to_string(&record).map_err(io::Error::other)?);
            batch.push('\n');
        }
        let content = if zstd {
            let mut bytes = encode_frame(header_line.as_bytes())?;
            bytes.extend(encode_frame(batch.as_bytes())?);
            bytes
        } else {
            format!("{header_line}{batch}").into_bytes()
        };
        let tmp = session_dir.join(format!(
            "{}.{}.tmp",
            final_path.file_name().unwrap_or_default().to_string_lossy(),
            crate::random::hex(12)?
        ));
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        let written = file.write_all(&content).and_then(|_| file.sync_all());
        drop(file);
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        // A hard link, never a rename: it fails if something got there first.
        let linked = std::fs::hard_link(&tmp, &final_path);
        let _ = std::fs::remove_file(&tmp);
        linked?;
        File::open(&session_dir)?.sync_all()?;
        Ok(final_path)
    }
}

impl Backend for JsonlStore {
    fn describe(&self) -> String {
        format!("JSONL session root {}", self.root.display())
    }

    fn list(&self) -> Vec<Listing> {
        let mut out = Vec::new();
        // Listing a directory store reports no failure of its own: a session
        // that cannot be read is listed with the reason.
        let _ = self.list_parts(&mut |part| out.extend(part));
        out
    }

    fn list_parts(&self, each: &mut dyn FnMut(Vec<Listing>)) -> Result<(), Refusal> {
        let mut flat = Vec::new();
        let mut session_dirs = Vec::new();
        for (_, project) in Self::subdirs(&self.root) {
            if let Ok(entries) = std::fs::read_dir(&project) {
                for entry in entries.flatten() {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    let is_file = entry.file_type().is_ok_and(|t| t.is_file());
                    let stem = name
                        .strip_suffix(".jsonl.zstd")
                        .or_else(|| name.strip_suffix(".jsonl"));
                    if let (true, Some(stem)) = (is_file, stem) {
                        let decoded = decode_segment(stem);
                        flat.push(Listing {
                            id: decoded.clone().unwrap_or_else(|| stem.to_string()),
                            key: SessionKey::File(entry.path()),
                            header: Err("obsolete flat layout: a session log directly inside a project directory; move it to <project>/<id>/session.jsonl".into()),
                            raw_name: decoded.is_none().then(|| stem.to_string()),
                            mode: None,
                        });
                    }
                }
            }
            session_dirs.extend(Self::subdirs(&project));
        }
        each(flat);
        lock(&self.without_log).clear();
        // A part at a time, so a listing never holds every header at once.
        for part in session_dirs.chunks(LIST_PART) {
            each(self.list_session_dirs(part));
        }
        Ok(())
    }

    fn listing_revision(&self) -> Option<String> {
        // New and removed sessions change the mtime of their project directory
        // (a session directory made or removed); a log linked into a directory
        // that had none changes that directory. So this costs a stat per project
        // and per directory seen without a log, not one per session.
        let mut revision = String::new();
        let mut add = |path: &Path| {
            let meta = std::fs::symlink_metadata(path).ok()?;
            revision.push_str(&format!("{}.{};", meta.mtime(), meta.mtime_nsec()));
            Some(())
        };
        add(&self.root)?;
        for (_, project) in Self::subdirs(&self.root) {
            add(&project)?;
        }
        for dir in lock(&self.without_log).iter() {
            add(dir)?;
        }
        Some(revision)
    }

    fn watch_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = vec![self.root.clone()];
        dirs.extend(Self::subdirs(&self.root).into_iter().map(|(_, p)| p));
        dirs
    }

    fn awaiting_dirs(&self) -> Vec<PathBuf> {
        lock(&self.without_log).clone()
    }

    fn session_dir(&self, key: &SessionKey) -> Option<PathBuf> {
        match key {
            SessionKey::File(path) => path.parent().map(Path::to_path_buf),
            SessionKey::Row(_) => None,
        }
    }

    fn find(&self, id: &str) -> Vec<Listing> {
        let Some(segment) = encode_segment(id) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for (_, project) in Self::subdirs(&self.root) {
            let dir = project.join(&segment);
            // As in a listing, a session directory reached through a symlink is
            // not in the store.
            if !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
                continue;
            }
            for file in [RAW_NAME, ZSTD_NAME] {
                let path = dir.join(file);
                if let Ok(meta) = std::fs::symlink_metadata(&path)
                    && meta.is_file()
                {
                    found.push(self.listing(&segment, &path, meta.mode()));
                }
            }
        }
        found
    }

    fn header(&self, key: &SessionKey) -> Result<SessionHeader, Refusal> {
        let SessionKey::File(path) = key else {
            return Err(Refusal::Corrupt("not a JSONL session".into()));
        };
        // A log that cannot be opened now is no verdict on its header.
        File::open(path).map_err(|e| io_refusal(path, e))?;
        self.read_header(path)
            .map_err(|why| corrupt(path, format!("corrupt session log: {why}")))
    }

    fn revision(&self, key: &SessionKey) -> Result<Revision, Refusal> {
        let SessionKey::File(path) = key else {
            return Err(Refusal::Corrupt("not a JSONL session".into()));
        };
        let meta = std::fs::metadata(path).map_err(|e| io_refusal(path, e))?;
        // The birth time tells a file created again under a reused inode number.
        let born = meta
            .created()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        Ok(Revision(format!(
            "{}.{}.{born}:{}:{}.{}:{}.{}",
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ctime(),
            meta.ctime_nsec()
        )))
    }

    fn mode(&self, key: &SessionKey) -> Option<u32> {
        let SessionKey::File(path) = key else {
            return None;
        };
        std::fs::symlink_metadata(path)
            .ok()
            .map(|m| m.mode() & 0o7777)
    }

    fn modified(&self, key: &SessionKey) -> Option<std::time::SystemTime> {
        let SessionKey::File(path) = key else {
            return None;
        };
        std::fs::metadata(path).and_then(|m| m.modified()).ok()
    }

    fn scan(
        &self,
        key: &SessionKey,
        from: &ScanPoint,
        sink: &mut EventSink,
    ) -> Result<(ScanPoint, ScanEnd), Refusal> {
        let SessionKey::File(path) = key else {
            return Err(Refusal::Corrupt("not a JSONL session".into()));
        };
        if is_zstd(path) {
            self.scan_zstd(path, from, sink)
        } else {
            self.scan_raw(path, from, sink)
        }
    }

    fn fetch(&self, key: &SessionKey, loc: EventLoc) -> Result<JsonMap, Refusal> {
        let SessionKey::File(path) = key else {
            return Err(Refusal::Corrupt("not a JSONL session".into()));
        };
        let line = if is_zstd(path) {
            let plaintext = self.frame_plaintext(path, loc.record)?;
            let start = (loc.within as usize).min(plaintext.len());
            let end = plaintext[start..]
                .iter()
                .position(|b| *b == b'\n')
                .map_or(plaintext.len(), |n| start + n);
            plaintext[start..end].to_vec()
        } else {
            let mut file = File::open(path).map_err(|e| io_refusal(path, e))?;
            file.seek(SeekFrom::Start(loc.record))
                .map_err(|e| io_refusal(path, e))?;
            match read_line(&mut BufReader::new(file), MAX_RECORD_BYTES)
                .map_err(|e| io_refusal(path, e))?
            {
                Line::Complete(bytes) => bytes,
                _ => {
                    return Err(corrupt(
                        path,
                        format!("the record at byte {} is gone", loc.record),
                    ));
                }
            }
        };
        let events = decode_events(&line).map_err(|_| {
            corrupt(
                path,
                format!("the record at byte {} no longer decodes", loc.record),
            )
        })?;
        events.into_iter().nth(loc.member as usize).ok_or_else(|| {
            corrupt(
                path,
                format!(
                    "the record at byte {} has no member {}",
                    loc.record, loc.member
                ),
            )
        })
    }

    fn create(&self, header: &SessionHeader, events: &[JsonMap]) -> io::Result<SessionKey> {
        if self.contains(&header.id) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("session {:?} already exists in the store", header.id),
            ));
        }
        // New sessions take the store's encoding: zstd (the Harness default) unless
        // the root holds only raw logs.
        let listed = self.list();
        let any_raw = listed
            .iter()
            .any(|l| matches!(&l.key, SessionKey::File(p) if !is_zstd(p)));
        let any_zstd = listed
            .iter()
            .any(|l| matches!(&l.key, SessionKey::File(p) if is_zstd(p)));
        let zstd = any_zstd || !any_raw;
        self.materialise(header, events, zstd).map(SessionKey::File)
    }

    fn repair(
        &self,
        key: &SessionKey,
        keep: &ScanPoint,
        expected: &Revision,
        tail: &[JsonMap],
    ) -> io::Result<()> {
        let SessionKey::File(path) = key else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a JSONL session",
            ));
        };
        if self.revision(key).ok().as_ref() != Some(expected) {
            return Err(io::Error::other(format!(
                "{} changed since it was read; not repairing it",
                path.display()
            )));
        }
        // Truncate the torn tail, then append like any durable batch: raw lines, or
        // one frame of the records packed as the Harness packs them.
        let truncate = OpenOptions::new().write(true).open(path)?;
        truncate.set_len(keep.offset)?;
        truncate.sync_all()?;
        drop(truncate);
        if tail.is_empty() {
            return Ok(());
        }
        let records = if is_zstd(path) {
            pack(tail, usize::MAX)
        } else {
            tail.to_vec()
        };
        let mut batch = Vec::new();
        for record in &records {
            serde_json::to_writer(&mut batch, record).map_err(io::Error::other)?;
            batch.push(b'\n');
        }
        let bytes = if is_zstd(path) {
            encode_frame(&batch)?
        } else {
            batch
        };
        append_durably(path, &bytes)
    }

    fn contains(&self, id: &str) -> bool {
        let Some(segment) = encode_segment(id) else {
            return false;
        };
        // Anything at the session's path takes the name, except an empty directory
        // left by an interrupted materialisation; nothing is followed.
        let exists = |path: &Path| std::fs::symlink_metadata(path).is_ok();
        Self::subdirs(&self.root).iter().any(|(_, project)| {
            let dir = project.join(&segment);
            match std::fs::symlink_metadata(&dir) {
                Ok(meta) if meta.is_dir() => {
                    exists(&dir.join(RAW_NAME)) || exists(&dir.join(ZSTD_NAME))
                }
                Ok(_) => true,
                Err(_) => false,
            }
        })
    }
}

enum Line {
    Complete(Vec<u8>),
    /// Bytes after the last newline: a record still being written, or torn.
    Partial,
    TooLong,
    End,
}

fn read_line(reader: &mut impl BufRead, limit: usize) -> io::Result<Line> {
    let mut line = Vec::new();
    // One byte past the limit tells a line of exactly `limit` bytes from a longer one.
    reader.take(limit as u64 + 1).read_until(b'\n', &mut line)?;
    if line.last() == Some(&b'\n') {
        line.pop();
        return Ok(Line::Complete(line));
    }
    Ok(if line.is_empty() {
        Line::End
    } else if line.len() > limit {
        Line::TooLong
    } else {
        Line::Partial
    })
}

fn read_raw_header(path: &Path) -> Result<Vec<u8>, String> {
    let file = File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    match read_line(
        &mut BufReader::with_capacity(8 << 10, file),
        MAX_HEADER_BYTES,
    )
    .map_err(|e| format!("cannot read: {e}"))?
    {
        Line::Complete(line) => Ok(line),
        Line::TooLong => Err("first line is longer than a header line can be".into()),
        _ => Err("empty or header-less session log (no complete first line yet)".into()),
    }
}

/// Reads only the first frame, in 8 KiB steps, and applies the header-frame rule.
fn read_zstd_header(path: &Path) -> Result<Vec<u8>, String> {
    let mut file = File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 8 << 10];
    loop {
        match scan_frame(&bytes) {
            FrameScan::Complete(len) => return decode_header_frame(&bytes[..len]),
            FrameScan::Corrupt(why) => {
                return Err(format!("first frame is not a zstd frame: {why}"));
            }
            FrameScan::Torn if bytes.len() > MAX_HEADER_BYTES => {
                return Err("first frame is larger than a header frame can be".into());
            }
            FrameScan::Torn => {
                let n = file
                    .read(&mut chunk)
                    .map_err(|e| format!("cannot read: {e}"))?;
                if n == 0 {
                    return Err("empty or header-less Zstandard session log (the first frame is incomplete)".into());
                }
                bytes.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

/// Frame 0 holds exactly the header line and its newline.
fn decode_header_frame(frame: &[u8]) -> Result<Vec<u8>, String> {
    let mut plaintext = decode_frame(frame).map_err(|_| {
        "corrupt Zstandard session log: frame at byte 0 failed validation".to_string()
    })?;
    if plaintext.last() != Some(&b'\n') || plaintext.iter().filter(|b| **b == b'\n').count() != 1 {
        return Err(
            "corrupt Zstandard session log: first frame is not exactly one header line".into(),
        );
    }
    plaintext.pop();
    Ok(plaintext)
}

/// Appends one batch and fsyncs it; on failure the file is cut back to its prior
/// length, so a half-written batch never reaches a later reader (spec §10.8).
fn append_durably(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new().append(true).open(path)?;
    let prior = file.metadata()?.len();
    let written = file.write_all(bytes).and_then(|_| file.sync_all());
    if let Err(error) = written {
        drop(file);
        let rollback = OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|f| f.set_len(prior).and_then(|_| f.sync_all()));
        return Err(match rollback {
            Ok(()) => error,
            Err(also) => io::Error::other(format!(
                "{error}; rolling back to {prior} bytes also failed: {also}"
            )),
        });
    }
    Ok(())
}

/// `mkdir` with mode 0700, then fsync the parent so the new entry is durable.
/// An existing directory is used only if it is a real one: never write through a
/// symlink out of the store.
fn make_private_dir(dir: &Path, parent: &Path) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => File::open(parent)?.sync_all(),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            if std::fs::symlink_metadata(dir)?.is_dir() {
                Ok(())
            } else {
                Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{} exists and is not a directory (a symlink is not followed)",
                        dir.display()
                    ),
                ))
            }
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &[u8], limit: usize) -> Vec<String> {
        let mut reader = BufReader::with_capacity(4, text);
        let mut out = Vec::new();
        loop {
            match read_line(&mut reader, limit).unwrap() {
                Line::Complete(bytes) => out.push(String::from_utf8(bytes).unwrap()),
                Line::Partial => return [out, vec!["partial".into()]].concat(),
                Line::TooLong => return [out, vec!["too long".into()]].concat(),
                Line::End => return out,
            }
        }
    }

    #[test]
    fn lines_are_cut_at_newlines_and_held_to_the_limit() {
        assert_eq!(lines(b"ab\n\ncde\n", 3), ["ab", "", "cde"]);
        assert_eq!(lines(b"ab\ncde", 3), ["ab", "partial"]);
        assert_eq!(lines(b"abc\nabcd\n", 3), ["abc", "too long"]);
        assert_eq!(lines(b"abcd", 3), ["too long"]);
        assert_eq!(lines(b"", 3), Vec::<String>::new());
    }

    #[test]
    fn a_session_directory_without_its_log_yet_is_awaited() {
        let root = std::env::temp_dir().join(format!("sessionfs-awaiting-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let project = root.join("_no-cwd");
        let home = project.join("nascent");
        std::fs::create_dir_all(&home).unwrap();
        let store = JsonlStore::open(&root).unwrap();
        assert!(store.list().is_empty());
        assert_eq!(store.awaiting_dirs(), vec![home.clone()]);
        let header =
            r#"{"type":"session","version":0,"id":"nascent","createdAt":1,"delegationDepth":0}"#;
        std::fs::write(home.join(RAW_NAME), format!("{header}\n")).unwrap();
        assert_eq!(store.list().len(), 1);
        assert!(store.awaiting_dirs().is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
