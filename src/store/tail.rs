//! The torn-tail rule shared by every backend (spec §8.3): a record that fails
//! to decode, or breaks seq contiguity, starts a tail that is dropped, unless a
//! later record decodes to a `turn/end`, which proves the region was committed
//! and makes the log corrupt.

use serde_json::Value;

use crate::json::{JsonMap, non_negative_safe_integer};
use crate::model::Refusal;
use crate::model::quick::{ChunkRun, Scanned};

/// Keeps a backend's records while they continue the log, and says where a
/// torn tail starts.
#[derive(Clone, Debug)]
pub struct TailScanner {
    next_seq: u64,
    issue: Option<LineError>,
    /// zstd frames are checksummed: any defect inside them is corruption.
    strict: bool,
}

/// Why a record cannot be kept: the two defects of the torn-tail rule, each
/// with the sentence that says where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LineError {
    /// The record does not parse or decode.
    Unparsable(String),
    /// The record's seqs do not continue the log.
    Gap(String),
}

impl LineError {
    /// Where the defect is and what it is, for messages.
    pub fn message(&self) -> &str {
        match self {
            LineError::Unparsable(m) | LineError::Gap(m) => m,
        }
    }
}

impl From<LineError> for Refusal {
    /// A defect proved committed is damage.
    fn from(error: LineError) -> Refusal {
        Refusal::Corrupt(error.message().to_string())
    }
}

/// A record as the backend decoded it.
#[derive(Debug)]
pub enum Decoded {
    /// Events decoded in full (a packed row expands to several).
    Events(Vec<JsonMap>),
    /// Streamed chunks read quickly (`model::quick`).
    Chunks(ChunkRun),
    /// The record does not parse or decode; the message says where, for the
    /// case that a later `turn/end` proves it committed.
    Bad(String),
}

impl Decoded {
    /// Hands each event of a kept record to `sink`, with its member index.
    pub fn deliver(
        self,
        mut sink: impl FnMut(u32, Scanned) -> Result<(), Refusal>,
    ) -> Result<(), Refusal> {
        match self {
            Decoded::Events(events) => {
                for (member, event) in (0u32..).zip(events) {
                    sink(member, Scanned::Event(event))?;
                }
            }
            Decoded::Chunks(run) => {
                for (member, event) in (0u32..).zip(run.events()) {
                    sink(member, event)?;
                }
            }
            Decoded::Bad(_) => {}
        }
        Ok(())
    }

    fn has_turn_end(&self) -> bool {
        match self {
            Decoded::Events(events) => events
                .iter()
                .any(|e| e.get("type").and_then(Value::as_str) == Some("turn/end")),
            Decoded::Chunks(_) | Decoded::Bad(_) => false,
        }
    }

    /// True when the record's events carry the seqs `next..`.
    fn continues(&self, next: u64) -> bool {
        match self {
            Decoded::Events(events) => events.iter().enumerate().all(|(k, e)| {
                e.get("seq").and_then(non_negative_safe_integer) == Some(next + k as u64)
            }),
            Decoded::Chunks(run) => run.seq0 == next,
            Decoded::Bad(_) => false,
        }
    }

    fn len(&self) -> u64 {
        match self {
            Decoded::Events(events) => events.len() as u64,
            Decoded::Chunks(run) => run.times.len() as u64,
            Decoded::Bad(_) => 0,
        }
    }
}

impl TailScanner {
    /// A scanner that expects seq `next_seq` next and lets a defect start a
    /// torn tail.
    pub fn new(next_seq: u64) -> TailScanner {
        TailScanner {
            next_seq,
            issue: None,
            strict: false,
        }
    }

    /// A scanner for checksummed records, where any defect is damage.
    pub fn strict(next_seq: u64) -> TailScanner {
        TailScanner {
            next_seq,
            issue: None,
            strict: true,
        }
    }

    /// The seq the next kept record must start with.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The defect that started the torn tail, if any.
    pub fn issue(&self) -> Option<&LineError> {
        self.issue.as_ref()
    }

    /// Feeds one record; returns it to keep, or `None` once the tail started.
    /// A defect is an error when it is proved committed: by a later
    /// `turn/end`, or at once in a strict scanner.
    pub fn feed(
        &mut self,
        record: Decoded,
        gap_message: impl FnOnce() -> String,
    ) -> Result<Option<Decoded>, LineError> {
        if let Some(issue) = &self.issue {
            return match record.has_turn_end() {
                true => Err(issue.clone()),
                false => Ok(None),
            };
        }
        if let Decoded::Bad(message) = record {
            return self.start_tail(LineError::Unparsable(message));
        }
        if !record.continues(self.next_seq) {
            let gap = LineError::Gap(gap_message());
            if record.has_turn_end() {
                return Err(gap);
            }
            return self.start_tail(gap);
        }
        self.next_seq += record.len();
        Ok(Some(record))
    }

    fn start_tail(&mut self, defect: LineError) -> Result<Option<Decoded>, LineError> {
        if self.strict {
            return Err(defect);
        }
        self.issue = Some(defect);
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(seq: u64, t: &str) -> JsonMap {
        serde_json::from_str(&format!(
            r#"{{"type":"{t}","seq":{seq},"time":0,"data":{{}}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn a_defect_is_torn_unless_a_turn_end_follows() {
        let mut scan = TailScanner::new(0);
        assert!(
            scan.feed(Decoded::Events(vec![ev(0, "turn/start")]), String::new)
                .unwrap()
                .is_some()
        );
        assert!(
            scan.feed(Decoded::Bad("bad at line 2".into()), String::new)
                .unwrap()
                .is_none()
        );
        assert!(
            scan.feed(Decoded::Events(vec![ev(2, "step/end")]), String::new)
                .unwrap()
                .is_none()
        );
        let bad = LineError::Unparsable("bad at line 2".into());
        assert_eq!(scan.issue(), Some(&bad));
        let err = scan
            .feed(Decoded::Events(vec![ev(3, "turn/end")]), String::new)
            .unwrap_err();
        assert_eq!(err, bad);
    }

    #[test]
    fn a_seq_gap_with_a_turn_end_fails_at_once() {
        let mut scan = TailScanner::new(0);
        assert_eq!(
            scan.feed(Decoded::Events(vec![ev(1, "turn/end")]), || "gap".into())
                .unwrap_err(),
            LineError::Gap("gap".into())
        );
        let mut scan = TailScanner::new(0);
        assert!(
            scan.feed(Decoded::Events(vec![ev(1, "step/end")]), || "gap".into())
                .unwrap()
                .is_none()
        );
        let mut strict = TailScanner::strict(0);
        assert_eq!(
            strict
                .feed(Decoded::Bad("x".into()), String::new)
                .unwrap_err(),
            LineError::Unparsable("x".into())
        );
    }
}
