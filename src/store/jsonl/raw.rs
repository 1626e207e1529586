//! Scanning and fetching a raw `session.jsonl` (spec §10.5): lines are read
//! from the last committed offset on, on a second thread when much is unread.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Seek, SeekFrom};
use std::ops::ControlFlow;
use std::path::Path;

use super::record::{Line, LineScanner, RecordError, decode_record, read_line};
use super::{
    DECODE_AHEAD_BYTES, JsonlStore, MAX_HEADER_BYTES, MAX_RECORD_BYTES, check_not_shorter, corrupt,
    io_refusal,
};
use crate::model::Refusal;
use crate::store::tail::{Decoded, TailScanner};
use crate::store::{EventLoc, EventSink, ScanEnd, ScanPoint, read_ahead};

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

impl JsonlStore {
    pub(super) fn scan_raw(
        &self,
        path: &Path,
        from: &ScanPoint,
        sink: &mut EventSink,
    ) -> Result<(ScanPoint, ScanEnd), Refusal> {
        let file = File::open(path).map_err(|e| io_refusal(path, e))?;
        let stated = check_not_shorter(path, &file, from)?;
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
                RawLine::End if position < stated => {
                    return ControlFlow::Break(Ok(ScanEnd::ShortRead));
                }
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
                Err(stop) => return ControlFlow::Break(Err(stop.refusal(path))),
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
        let unread = stated.saturating_sub(offset);
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
                    at: issue.message().to_string(),
                },
            )),
            (end, _) => Ok((committed, end)),
        }
    }
}

/// The stored line at `loc`, read again alone.
pub(super) fn raw_line(path: &Path, loc: EventLoc) -> Result<Vec<u8>, Refusal> {
    let mut file = File::open(path).map_err(|e| io_refusal(path, e))?;
    file.seek(SeekFrom::Start(loc.record))
        .map_err(|e| io_refusal(path, e))?;
    match read_line(&mut BufReader::new(file), MAX_RECORD_BYTES).map_err(|e| io_refusal(path, e))? {
        Line::Complete(bytes) => Ok(bytes),
        _ => Err(corrupt(
            path,
            format!("the record at byte {} is gone", loc.record),
        )),
    }
}
