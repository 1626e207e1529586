//! Fork rules (spec §9): which boundaries may be forked and what the child holds.
//!
//! sessionfs validates the boundary against the **stored** events, never the
//! repaired view, so a synthetic closer is never copied into a child.

use serde_json::{Map, Value};

use crate::json::{JsonMap, non_negative_safe_integer};
use crate::model::header::SessionHeader;

/// Why a fork at a boundary is refused, with the sentence to show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForkRefusal {
    /// Not an existing seq (`INVALID_BOUNDARY`).
    InvalidBoundary(String),
    /// The prefix ends inside a turn (`OPEN_TURN`).
    OpenTurn(String),
}

impl std::fmt::Display for ForkRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ForkRefusal::InvalidBoundary(why) | ForkRefusal::OpenTurn(why) => f.write_str(why),
        }
    }
}

/// Where the last turn boundary before a seq stands, tracked while the log is read
/// so a boundary can be checked without re-reading the log.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct TurnBoundaries {
    /// How many events have been recorded.
    len: u64,
    /// The seqs at which the state flips (closed before the first): a turn
    /// of a million streamed chunks costs two entries, not a million.
    flips: Vec<u64>,
}

impl TurnBoundaries {
    /// Records the next stored event's type, in seq order.
    pub fn observe(&mut self, event_type: &str) {
        let was_open = self.flips.len() % 2 == 1;
        let open = match event_type {
            "turn/start" => true,
            "turn/end" => false,
            _ => was_open,
        };
        if open != was_open {
            self.flips.push(self.len);
        }
        self.len += 1;
    }

    /// How many events have been recorded.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True before the first event is recorded.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the latest `turn/start`/`turn/end` at or before `seq` is a start.
    fn open_after(&self, seq: u64) -> bool {
        self.flips.partition_point(|flip| *flip <= seq) % 2 == 1
    }

    /// Checks a boundary against the stored log (spec §9.1 steps 3 and 4).
    pub fn check(&self, boundary: u64) -> Result<(), ForkRefusal> {
        let count = self.len;
        if boundary >= count {
            let last = if count == 0 {
                "none".to_string()
            } else {
                (count - 1).to_string()
            };
            return Err(ForkRefusal::InvalidBoundary(format!(
                "boundary {boundary} is not a stored seq (the last stored seq is {last})"
            )));
        }
        if self.open_after(boundary) {
            return Err(ForkRefusal::OpenTurn(format!(
                "boundary {boundary} ends inside an open turn; fork at the turn's turn/end or later"
            )));
        }
        Ok(())
    }
}

/// The child's header (spec §9.2): only version, id, createdAt, cwd, lineage.
pub fn child_header(
    parent: &SessionHeader,
    child_id: &str,
    boundary: u64,
    now_ms: i64,
) -> SessionHeader {
    SessionHeader {
        cwd: parent.cwd.clone(),
        parent_session: Some(parent.id.clone()),
        seed_length: Some(boundary + 1),
        ..SessionHeader::new(child_id, now_ms)
    }
}

/// The child's log: the seed unchanged, then a `session/end-seed` marker unless
/// the seed already ends with one.
pub fn child_events(mut seed: Vec<JsonMap>, now_ms: i64) -> Vec<JsonMap> {
    let ends_with_marker = seed
        .last()
        .is_some_and(|e| e.get("type").and_then(Value::as_str) == Some("session/end-seed"));
    if !ends_with_marker {
        let mut marker = Map::new();
        marker.insert("type".into(), "session/end-seed".into());
        marker.insert("seq".into(), (seed.len() as u64).into());
        marker.insert("time".into(), now_ms.into());
        marker.insert("data".into(), Value::Object(Map::new()));
        seed.push(marker);
    }
    seed
}

/// Parses the text written to a `fork` control file: `SEQ` or `SEQ NAME`, with at
/// most one trailing newline.
pub fn parse_fork_command(text: &[u8]) -> Result<(u64, Option<String>), String> {
    let text =
        std::str::from_utf8(text).map_err(|_| "the fork command is not UTF-8 text".to_string())?;
    let text = text.strip_suffix('\n').unwrap_or(text);
    if text.contains('\n') {
        return Err("write one fork command per write: SEQ [NAME]".into());
    }
    let mut parts = text.split(' ').filter(|p| !p.is_empty());
    let Some(seq_text) = parts.next() else {
        return Err("empty fork command: write SEQ [NAME], e.g. `echo 41 > fork`".into());
    };
    let name = parts.next().map(str::to_string);
    if parts.next().is_some() {
        return Err("too many words: write SEQ [NAME]".into());
    }
    if !seq_text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "boundary {seq_text:?} is not a non-negative integer"
        ));
    }
    let seq: Value = seq_text
        .parse::<u64>()
        .map(Value::from)
        .map_err(|_| format!("boundary {seq_text} is out of range"))?;
    let seq = non_negative_safe_integer(&seq)
        .ok_or_else(|| format!("boundary {seq_text} is out of range"))?;
    Ok((seq, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flips answer as a per-seq record of the open state would.
    #[test]
    fn boundaries_kept_as_flips_answer_as_one_state_per_seq() {
        let types = ["turn/start", "turn/end", "assistant/chunk", "user/message"];
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..50 {
            let (mut turns, mut naive) = (TurnBoundaries::default(), Vec::new());
            for _ in 0..200 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let event_type = types[(state % 4) as usize];
                turns.observe(event_type);
                let open = match event_type {
                    "turn/start" => true,
                    "turn/end" => false,
                    _ => naive.last().copied().unwrap_or(false),
                };
                naive.push(open);
            }
            for (seq, open) in naive.iter().enumerate() {
                assert_eq!(turns.open_after(seq as u64), *open, "seq {seq}");
                assert_eq!(turns.check(seq as u64).is_err(), *open);
            }
            assert!(turns.check(naive.len() as u64).is_err());
        }
    }

    #[test]
    fn boundaries_follow_the_harness_rules() {
        let mut turns = TurnBoundaries::default();
        for t in [
            "session/title",
            "turn/start",
            "step/start",
            "turn/end",
            "session/title",
            "turn/start",
        ] {
            turns.observe(t);
        }
        assert!(turns.check(0).is_ok());
        assert!(matches!(turns.check(1), Err(ForkRefusal::OpenTurn(_))));
        assert!(matches!(turns.check(2), Err(ForkRefusal::OpenTurn(_))));
        assert!(turns.check(3).is_ok());
        assert!(turns.check(4).is_ok());
        assert!(matches!(turns.check(5), Err(ForkRefusal::OpenTurn(_))));
        assert!(matches!(
            turns.check(6),
            Err(ForkRefusal::InvalidBoundary(_))
        ));
    }

    #[test]
    fn the_child_gets_one_end_seed_marker() {
        let seed: Vec<JsonMap> = vec![
            serde_json::from_str(r#"{"type":"turn/end","seq":0,"time":1,"data":{}}"#).unwrap(),
        ];
        let events = child_events(seed.clone(), 99);
        assert_eq!(events.len(), 2);
        assert_eq!(
            serde_json::to_string(&events[1]).unwrap(),
            r#"{"type":"session/end-seed","seq":1,"time":99,"data":{}}"#
        );
        assert_eq!(child_events(events.clone(), 100), events);
    }

    #[test]
    fn fork_commands() {
        assert_eq!(parse_fork_command(b"41\n"), Ok((41, None)));
        assert_eq!(
            parse_fork_command(b"41 my-branch\n"),
            Ok((41, Some("my-branch".into())))
        );
        for bad in [
            &b""[..],
            b"\n",
            b"-1",
            b"4x",
            b"1 2 3",
            b"1\n\n",
            b"99999999999999999999",
            b"9007199254740992",
        ] {
            assert!(
                parse_fork_command(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
