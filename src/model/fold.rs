//! The decode pipeline of spec §8.2 steps 3–7, run one stored event at a time so a
//! log of any length is checked and folded in one streaming pass, and a growing
//! log can be continued from where the last pass stopped.

use serde_json::Value;

use crate::json::JsonMap;
use crate::model::fork::TurnBoundaries;
use crate::model::header::{SessionHeader, canonical_request_header};
use crate::model::legacy::{MessageIds, convert_event};
use crate::model::repair::TurnScan;
use crate::model::surface::{SurfaceEffect, SurfaceFold};
use crate::model::validate::{
    CHUNK_TYPE, check_envelope, check_message_shape, check_request_header, check_retired,
    is_ignorable, is_known_type, is_surface_type, unknown_type_refusal,
};
use crate::model::{Refusal, Scanned};

/// What folding one stored event did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Folded {
    /// What the event did to the surface.
    pub effect: SurfaceEffect,
    /// The stored event was in a legacy shape and is read converted (spec §15).
    pub converted: bool,
}

/// The running fold of one session's stored events.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct SessionFold {
    session_id: String,
    surface: SurfaceFold,
    turn_scan: TurnScan,
    turns: TurnBoundaries,
    request_header: Option<Value>,
    request_context: Option<Value>,
    title: Option<Value>,
    last_time: Option<i64>,
    /// Message ids by seq, which legacy replacements inherit.
    message_ids: MessageIds,
}

impl SessionFold {
    /// Starts a fold after the header checks (id, version, header validation).
    pub fn new(header: &SessionHeader, expected_id: &str) -> Result<SessionFold, Refusal> {
        if header.id != expected_id {
            return Err(Refusal::Corrupt(format!(
                "stored session header id {:?} does not match the session {:?}",
                header.id, expected_id
            )));
        }
        if let Some(refusal) = header.version_refusal() {
            return Err(Refusal::Unsupported(refusal));
        }
        header.validate().map_err(|why| {
            Refusal::Corrupt(format!(
                "stored session \"{}\" failed validation: {why}",
                header.id
            ))
        })?;
        Ok(SessionFold {
            session_id: header.id.clone(),
            surface: SurfaceFold::default(),
            turn_scan: TurnScan::default(),
            turns: TurnBoundaries::default(),
            request_header: None,
            request_context: None,
            title: None,
            last_time: None,
            message_ids: MessageIds::default(),
        })
    }

    /// Checks and folds the next stored event, read as the Harness reads it
    /// (legacy shapes converted).
    pub fn observe(&mut self, event: &JsonMap) -> Result<SurfaceEffect, Refusal> {
        self.admit(event).map(|(_, effect)| effect)
    }

    /// Checks and folds the next stored event as a backend scanned it. A legacy
    /// event is replaced by its conversion, which is what every view shows.
    pub fn observe_scanned(&mut self, event: &mut Scanned) -> Result<Folded, Refusal> {
        match event {
            Scanned::Event(stored) => {
                let (converted, effect) = self.admit(stored)?;
                let is_converted = converted.is_some();
                if let Some(converted) = converted {
                    *stored = converted;
                }
                Ok(Folded {
                    effect,
                    converted: is_converted,
                })
            }
            Scanned::Chunk { seq, time, .. } => {
                // A quick-read chunk has a valid envelope and no surface markers,
                // and no legacy rule applies to chunks, so of every check only
                // contiguity remains.
                self.surface
                    .advance(*seq)
                    .map_err(|why| self.corrupt(why))?;
                self.turn_scan.observe_chunk(*seq, *time);
                self.turns.observe(CHUNK_TYPE);
                self.last_time = Some(*time);
                Ok(Folded {
                    effect: SurfaceEffect::None,
                    converted: false,
                })
            }
        }
    }

    /// A stored event read again after this fold saw it (an event file, a
    /// view, a fork seed): converted as it was when scanned.
    pub fn read_back(&self, event: JsonMap) -> Result<JsonMap, Refusal> {
        let seq = check_envelope(&event).map_err(|why| self.corrupt(why))?;
        match convert_event(&self.session_id, &self.message_ids, seq, &event) {
            Ok(converted) => Ok(converted.unwrap_or(event)),
            Err(sentence) => Err(self.malformed(sentence)),
        }
    }

    fn corrupt(&self, why: String) -> Refusal {
        Refusal::Corrupt(format!(
            "stored session \"{}\" failed validation: {why}",
            self.session_id
        ))
    }

    /// A malformed legacy shape, worded as the Harness's `inspect` and `load` do.
    fn malformed(&self, sentence: String) -> Refusal {
        self.corrupt(format!("Error: {sentence}"))
    }

    /// Converts a legacy shape, then checks and folds the event; returns the
    /// conversion, if any.
    fn admit(&mut self, stored: &JsonMap) -> Result<(Option<JsonMap>, SurfaceEffect), Refusal> {
        let seq = check_envelope(stored)
            .map_err(|why| self.corrupt(format!("{why} (event #{})", self.turns.len())))?;
        let converted = convert_event(&self.session_id, &self.message_ids, seq, stored)
            .map_err(|sentence| self.malformed(sentence))?;
        let event = converted.as_ref().unwrap_or(stored);
        let event_type = event["type"].as_str().unwrap_or_default();
        let data = &event["data"];
        let at_seq = |why: String| format!("{why} (seq {seq})");
        if is_surface_type(event_type) {
            check_message_shape(event_type, data).map_err(|why| self.corrupt(at_seq(why)))?;
        }
        // Retired shapes are rejected by the legacy step, before the vocabulary check.
        check_retired(event_type, data).map_err(|why| self.corrupt(at_seq(why)))?;
        if !is_known_type(event_type) && !is_ignorable(event) {
            return Err(Refusal::Unsupported(unknown_type_refusal(
                &self.session_id,
                event_type,
                seq,
            )));
        }
        match event_type {
            "request/header" => {
                check_request_header(data).map_err(|why| self.corrupt(at_seq(why)))?;
                self.request_header = Some(canonical_request_header(&data["header"]));
            }
            "request/context" => self.request_context = Some(data.clone()),
            "session/title" => self.title = Some(title_fold(event)),
            _ => {}
        }
        let effect = self.surface.apply(event).map_err(|why| self.corrupt(why))?;
        self.turn_scan.observe(event);
        self.turns.observe(event_type);
        self.last_time = crate::json::safe_integer(&event["time"]);
        self.message_ids.record(seq, event);
        Ok((converted, effect))
    }

    /// Approximate memory held beyond the fold's fixed size, for the cache budget.
    pub fn memory(&self) -> usize {
        self.turns.len() + self.message_ids.memory() + self.turn_scan.memory()
    }

    /// Returns the spare room of a first scan's growing buffers.
    pub fn shrink(&mut self) {
        self.message_ids.shrink();
    }

    /// How many stored events have been folded.
    pub fn event_count(&self) -> u64 {
        self.turns.len() as u64
    }

    /// The surface folded so far: which seqs the model reads now.
    pub fn surface(&self) -> &SurfaceFold {
        &self.surface
    }

    /// The open turn: the closers a crash repair would append, and what the
    /// session is doing now, for `status`.
    pub fn turn_scan(&self) -> &TurnScan {
        &self.turn_scan
    }

    /// Whether each seq is inside a turn, for checking fork boundaries.
    pub fn turns(&self) -> &TurnBoundaries {
        &self.turns
    }

    /// The latest `request/header` snapshot, in canonical form (spec §6.2).
    pub fn request_header(&self) -> Option<&Value> {
        self.request_header.as_ref()
    }

    /// The `data` of the latest `request/context`.
    pub fn request_context(&self) -> Option<&Value> {
        self.request_context.as_ref()
    }

    /// The latest `session/title`, as `foldSessionTitle` records it.
    pub fn title(&self) -> Option<&Value> {
        self.title.as_ref()
    }

    /// The last folded event's time, in Unix milliseconds.
    pub fn last_time(&self) -> Option<i64> {
        self.last_time
    }
}

/// `foldSessionTitle`'s record of the latest title: title, messageSeqs and source
/// from the event's data, plus its seq and time.
fn title_fold(event: &JsonMap) -> Value {
    let data = &event["data"];
    let mut out = serde_json::Map::new();
    for key in ["title", "messageSeqs", "source"] {
        if let Some(value) = data.get(key) {
            out.insert(key.into(), value.clone());
        }
    }
    out.insert("eventSeq".into(), event["seq"].clone());
    out.insert("updatedAt".into(), event["time"].clone());
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(id: &str, version: i64) -> SessionHeader {
        SessionHeader {
            version: version.into(),
            ..SessionHeader::new(id, 1)
        }
    }

    fn event(text: &str) -> JsonMap {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn refuses_versions_ids_and_unknown_types() {
        assert!(matches!(
            SessionFold::new(&header("a", 2), "a"),
            Err(Refusal::Unsupported(_))
        ));
        assert!(matches!(
            SessionFold::new(&header("a", 0), "b"),
            Err(Refusal::Corrupt(_))
        ));
        let mut fold = SessionFold::new(&header("a", 0), "a").unwrap();
        let ignorable = event(r#"{"type":"acme/x","seq":0,"time":1,"data":{},"ignorable":true}"#);
        assert_eq!(fold.observe(&ignorable), Ok(SurfaceEffect::None));
        let unknown = event(r#"{"type":"future/x","seq":1,"time":1,"data":{}}"#);
        assert_eq!(
            fold.observe(&unknown),
            Err(Refusal::Unsupported(unknown_type_refusal(
                "a", "future/x", 1
            )))
        );
    }

    #[test]
    fn folds_the_request_header_and_title() {
        let mut fold = SessionFold::new(&header("a", 0), "a").unwrap();
        let rh = event(
            r#"{"type":"request/header","seq":0,"time":1,"data":{"header":{"config":{"provider":"p","model":"m"},"system":"","tools":[]},"reason":"initial"}}"#,
        );
        fold.observe(&rh).unwrap();
        assert_eq!(
            fold.request_header(),
            Some(&serde_json::json!({"config": {"provider": "p", "model": "m"}}))
        );
        let title = event(
            r#"{"type":"session/title","seq":1,"time":7,"data":{"title":"T","messageSeqs":[],"source":{"kind":"user"}}}"#,
        );
        fold.observe(&title).unwrap();
        assert_eq!(fold.title().unwrap()["eventSeq"], 1);
        let retired = event(r#"{"type":"mode/set","seq":2,"time":1,"data":{}}"#);
        assert!(matches!(fold.observe(&retired), Err(Refusal::Corrupt(_))));
    }

    #[test]
    fn legacy_events_are_read_converted_and_malformed_ones_refused() {
        let mut fold = SessionFold::new(&header("a", 0), "a").unwrap();
        let mut start = Scanned::Event(event(
            r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1,"trigger":{"kind":"message"}}}"#,
        ));
        let folded = fold.observe_scanned(&mut start).unwrap();
        assert!(folded.converted);
        let Scanned::Event(start) = start else {
            panic!("an event stays an event")
        };
        assert_eq!(start["data"], serde_json::json!({"turn": 1}));
        // Read back later, a stored legacy event converts the same way.
        let stored = event(
            r#"{"type":"user/message","seq":1,"time":1,"data":{"content":[],"source":{"kind":"user"}},"surfaceOp":"append"}"#,
        );
        fold.observe(&stored).unwrap();
        assert_eq!(
            fold.read_back(stored).unwrap()["data"]["id"],
            "legacy-message:a:1"
        );
        let steering = event(
            r#"{"type":"steering/message","seq":2,"time":1,"data":{"message":{}},"surfaceOp":"append"}"#,
        );
        assert_eq!(
            fold.observe(&steering),
            Err(Refusal::Corrupt(
                "stored session \"a\" failed validation: Error: session \"a\" contains malformed pre-react-loop steering/message at seq 2".into()
            ))
        );
        // Old compaction types are not converted: an unknown type, as in the Harness.
        let compact = event(r#"{"type":"compact/start","seq":2,"time":1,"data":{}}"#);
        assert_eq!(
            fold.observe(&compact),
            Err(Refusal::Unsupported(unknown_type_refusal(
                "a",
                "compact/start",
                2
            )))
        );
    }
}
