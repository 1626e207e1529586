//! One stored line: read up to a limit, decoded (spec §10.4), and fed to the
//! line scanner of spec §10.5, which raw and zstd logs share. The scanner
//! reports its defects typed ([`LineError`]), so a caller tells an unparsable
//! line or a seq gap from any other refusal without reading messages.

use std::io::{self, BufRead, Read};
use std::path::Path;

use serde_json::Value;

use super::corrupt;
use crate::json::JsonMap;
use crate::model::Refusal;
use crate::model::chunk_rows::{JSONL_ROW_LIMITS, RowKind, expand_jsonl_row};
use crate::model::quick;
use crate::store::tail::{Decoded, LineError, TailScanner};
use crate::store::{EventLoc, EventSink};

/// Decodes one stored line for a scan (spec §10.4): streamed chunks quickly,
/// anything else in full.
pub(super) fn decode_record(line: &[u8]) -> Result<Decoded, RecordError> {
    match quick::jsonl_record(line, JSONL_ROW_LIMITS) {
        Some(run) => Ok(Decoded::Chunks(run)),
        None => decode_events(line).map(Decoded::Events),
    }
}

/// Decodes one stored line in full: a packed row expands to its events; any
/// other object is one event.
pub(super) fn decode_events(line: &[u8]) -> Result<Vec<JsonMap>, RecordError> {
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

/// Why a stored line does not decode.
pub(super) enum RecordError {
    /// Not JSON, not an object, or a packed row that does not expand.
    Unparsable,
    /// A `null` line makes the Harness scanner throw wherever it stands.
    Null,
}

/// The line scanner of spec §10.5 over plaintext records, shared by raw and zstd.
pub(super) struct LineScanner<'a> {
    pub(super) tail: TailScanner,
    /// Lines after the header, for messages.
    pub(super) line_number: u64,
    pub(super) sink: &'a mut EventSink<'a>,
    pub(super) path: &'a Path,
}

/// Why the line scanner stopped.
pub(super) enum LineStop {
    /// A defect of the torn-tail rule, proved committed.
    Defect(LineError),
    /// Anything else: a `null` record, or the sink's own refusal.
    Refused(Refusal),
}

impl LineStop {
    /// The refusal a reader is answered with, naming the log.
    pub(super) fn refusal(self, path: &Path) -> Refusal {
        match self {
            LineStop::Defect(defect) => corrupt(path, defect.message()),
            LineStop::Refused(refusal) => refusal,
        }
    }
}

impl LineScanner<'_> {
    /// Feeds one complete line (without its newline) stored at `loc`.
    pub(super) fn line(&mut self, line: &[u8], loc: EventLoc) -> Result<bool, LineStop> {
        self.decoded(decode_record(line), loc)
    }

    /// Feeds the next line, already decoded; true when it was kept.
    pub(super) fn decoded(
        &mut self,
        decoded: Result<Decoded, RecordError>,
        loc: EventLoc,
    ) -> Result<bool, LineStop> {
        self.line_number += 1;
        let number = self.line_number;
        let decoded = match decoded {
            Ok(decoded) => decoded,
            Err(RecordError::Null) => {
                return Err(LineStop::Refused(corrupt(
                    self.path,
                    format!("corrupt session log: null record at line {number}"),
                )));
            }
            Err(RecordError::Unparsable) => Decoded::Bad(format!(
                "corrupt session log: unparsable committed event at line {number}"
            )),
        };
        let kept = self
            .tail
            .feed(decoded, || {
                format!("corrupt session log: seq gap at line {number}")
            })
            .map_err(LineStop::Defect)?;
        let Some(record) = kept else {
            return Ok(false);
        };
        record
            .deliver(|member, event| (self.sink)(EventLoc { member, ..loc }, event))
            .map_err(LineStop::Refused)?;
        Ok(true)
    }
}

/// One line of a log as read.
pub(super) enum Line {
    /// A whole line, without its newline.
    Complete(Vec<u8>),
    /// Bytes after the last newline: a record still being written, or torn.
    Partial,
    /// A line longer than the limit: refused unread.
    TooLong,
    /// Nothing more to read.
    End,
}

/// Reads one line of at most `limit` bytes.
pub(super) fn read_line(reader: &mut impl BufRead, limit: usize) -> io::Result<Line> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufReader;

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
}
