//! The decode pipeline of spec §8.2 steps 3–7, run one stored event at a time so a
//! log of any length is checked and folded in one streaming pass, and a growing
//! log can be continued from where the last pass stopped.

use serde_json::Value;

use crate::json::JsonMap;
use crate::model::Refusal;
use crate::model::fork::TurnBoundaries;
use crate::model::header::{SessionHeader, canonical_request_header};
use crate::model::quick::Scanned;
use crate::model::repair::RepairScan;
use crate::model::surface::{SurfaceEffect, SurfaceFold};
use crate::model::validate::{
    check_envelope, check_message_shape, check_request_header, check_retired, check_turn_end,
    is_ignorable, is_known_type, is_surface_type, unknown_type_refusal,
};

pub const CHUNK_TYPE: &str = "assistant/chunk";

/// The running fold of one session's stored events.
#[derive(Clone, Debug)]
pub struct SessionFold {
    session_id: String,
    surface: SurfaceFold,
    repair: RepairScan,
    turns: TurnBoundaries,
    request_header: Option<Value>,
    request_context: Option<Value>,
    title: Option<Value>,
    last_time: Option<i64>,
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
            repair: RepairScan::default(),
            turns: TurnBoundaries::default(),
            request_header: None,
            request_context: None,
            title: None,
            last_time: None,
        })
    }

    /// Checks and folds the next stored event.
    pub fn observe(&mut self, event: &JsonMap) -> Result<SurfaceEffect, Refusal> {
        let corrupt = |why: String| {
            Refusal::Corrupt(format!(
                "stored session \"{}\" failed validation: {why}",
                self.session_id
            ))
        };
        let seq = check_envelope(event)
            .map_err(|why| corrupt(format!("{why} (event #{})", self.turns.len())))?;
        let event_type = event["type"].as_str().unwrap_or_default();
        let data = &event["data"];
        if is_surface_type(event_type) {
            check_message_shape(event_type, data)
                .map_err(|why| corrupt(format!("{why} (seq {seq})")))?;
        }
        // Retired shapes are rejected by the legacy step, before the vocabulary check.
        check_retired(event_type, data).map_err(|why| corrupt(format!("{why} (seq {seq})")))?;
        if !is_known_type(event_type) && !is_ignorable(event) {
            return Err(Refusal::Unsupported(unknown_type_refusal(
                &self.session_id,
                event_type,
                seq,
            )));
        }
        match event_type {
            "turn/end" => {
                check_turn_end(data).map_err(|why| corrupt(format!("{why} (seq {seq})")))?
            }
            "request/header" => {
                check_request_header(data).map_err(|why| corrupt(format!("{why} (seq {seq})")))?;
                self.request_header = Some(canonical_request_header(&data["header"]));
            }
            "request/context" => self.request_context = Some(data.clone()),
            "session/title" => self.title = Some(title_fold(event)),
            _ => {}
        }
        let effect = self.surface.apply(event).map_err(corrupt)?;
        self.repair.observe(event);
        self.turns.observe(event_type);
        self.last_time = crate::json::safe_integer(&event["time"]);
        Ok(effect)
    }

    /// Checks and folds the next stored event as a backend scanned it.
    pub fn observe_scanned(&mut self, event: &Scanned) -> Result<SurfaceEffect, Refusal> {
        match event {
            Scanned::Event(event) => self.observe(event),
            Scanned::Chunk { seq, time, .. } => {
                // A quick-read chunk has a valid envelope and no surface markers,
                // so of every check only contiguity remains.
                self.surface.advance(*seq).map_err(|why| {
                    Refusal::Corrupt(format!(
                        "stored session \"{}\" failed validation: {why}",
                        self.session_id
                    ))
                })?;
                self.repair.observe_chunk(*seq, *time);
                self.turns.observe(CHUNK_TYPE);
                self.last_time = Some(*time);
                Ok(SurfaceEffect::None)
            }
        }
    }

    pub fn event_count(&self) -> u64 {
        self.turns.len() as u64
    }

    pub fn surface(&self) -> &SurfaceFold {
        &self.surface
    }

    pub fn repair(&self) -> &RepairScan {
        &self.repair
    }

    pub fn turns(&self) -> &TurnBoundaries {
        &self.turns
    }

    pub fn request_header(&self) -> Option<&Value> {
        self.request_header.as_ref()
    }

    pub fn request_context(&self) -> Option<&Value> {
        self.request_context.as_ref()
    }

    pub fn title(&self) -> Option<&Value> {
        self.title.as_ref()
    }

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
}
