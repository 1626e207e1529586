//! `steps/`: one directory per model call, holding what the Harness's agent
//! loop sent in it (`model::steps` finds the calls during the scan).
//!
//! A call's files are rendered when read, from the prefix its request was built
//! from: the surface is folded again from the kept surface operations and its
//! messages fetched, as for `surface.jsonl`. Only the last few are kept, so a
//! session of hundreds of calls never holds every prefix's messages.

use serde_json::{Map, Value};

use super::{Content, Indexed, SessionSource};
use crate::bytes::Bytes;
use crate::json::pretty_line;
use crate::model::Refusal;
use crate::model::header::canonical_request_header;
use crate::model::steps::{ModelCall, call_name};
use crate::render::surface_file;

/// The files of one call's directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallFile {
    /// `messages.jsonl`: the messages the call was sent.
    Messages,
    /// `request.json`: the request header and context in force, and where the call stands.
    Request,
}

impl CallFile {
    /// Every file of a call's directory, in listing order.
    pub const ALL: [CallFile; 2] = [CallFile::Messages, CallFile::Request];

    /// The file's name in a call's directory.
    pub fn name(self) -> &'static str {
        match self {
            CallFile::Messages => "messages.jsonl",
            CallFile::Request => "request.json",
        }
    }

    /// The file a name in a call's directory names.
    pub fn from_name(name: &str) -> Option<CallFile> {
        CallFile::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// Call files kept after a read: enough for `stat` then `read`, or a diff of two calls.
const KEPT_CALL_FILES: usize = 8;

/// What `request.json` says of a step that logged no response event.
const NO_RESPONSE_NOTE: &str = "This step logged no response event, so the log cannot tell whether this request was sent: a failure before dispatch and an abort before the first chunk look the same. The prefix shown ends just before the step's step/end, or with the log when the log ends inside the step.";

impl Indexed {
    /// The number of model calls whose boundary is known.
    pub fn call_count(&self) -> usize {
        self.steps.calls().len() + usize::from(self.unanswered.is_some())
    }

    /// Model call `index`, in call order.
    pub fn call(&self, index: usize) -> Option<&ModelCall> {
        let calls = self.steps.calls();
        match calls.get(index) {
            Some(call) => Some(call),
            None if index == calls.len() => self.unanswered.as_ref(),
            None => None,
        }
    }

    /// The directory name of call `index` in `steps/`.
    pub fn call_name(&self, index: usize) -> Option<String> {
        self.call(index).map(call_name)
    }

    /// The call a `steps/` entry names.
    pub fn call_by_name(&self, name: &str) -> Option<usize> {
        let (digits, _) = name.split_once('-')?;
        let boundary: u64 = digits.parse().ok()?;
        let calls = self.steps.calls();
        let first = calls.partition_point(|c| c.boundary_seq < boundary);
        (first..self.call_count())
            .take_while(|i| self.call(*i).is_some_and(|c| c.boundary_seq == boundary))
            .find(|i| self.call_name(*i).as_deref() == Some(name))
    }

    /// The bytes of one file of call `index`.
    pub(super) fn call_file(
        &mut self,
        source: &SessionSource,
        index: usize,
        which: CallFile,
    ) -> Result<Content, Refusal> {
        if let Some((_, _, content)) = self
            .call_cache
            .iter()
            .find(|(i, f, _)| *i == index && *f == which)
        {
            return Ok(content.clone());
        }
        let call = self
            .call(index)
            .ok_or_else(|| Refusal::Corrupt(format!("no model call {index}")))?;
        let bytes = match which {
            // The messages derived from the surface at the boundary, in the
            // form of `surface.jsonl`.
            CallFile::Messages => surface_file(self.steps.surface_at(call.boundary_seq), |seq| {
                self.event(source, seq)
            })?,
            CallFile::Request => self.call_request(source, call)?,
        };
        let content = Content {
            bytes: Bytes::from(bytes),
            lineage: self.lineage,
        };
        if self.call_cache.len() == KEPT_CALL_FILES {
            self.call_cache.remove(0);
        }
        self.call_cache.push((index, which, content.clone()));
        Ok(content)
    }

    /// `request.json`: where the call stands in the log, and the request header
    /// and context in force at its boundary, as `header.json` gives them.
    fn call_request(&self, source: &SessionSource, call: &ModelCall) -> Result<Vec<u8>, Refusal> {
        let fetch_data = |seq: Option<u64>| -> Result<Value, Refusal> {
            Ok(match seq {
                Some(seq) => self
                    .event(source, seq)?
                    .remove("data")
                    .unwrap_or(Value::Null),
                None => Value::Null,
            })
        };
        let request = match fetch_data(call.header_seq)?.get("header") {
            Some(header) => canonical_request_header(header),
            None => Value::Null,
        };
        let context = fetch_data(call.context_seq)?;
        let seed_length = self.header.seed_length.unwrap_or(0);
        let mut map = Map::new();
        map.insert("turn".into(), call.turn.clone());
        map.insert("step".into(), call.step.clone());
        map.insert("call".into(), call.call.into());
        map.insert("boundarySeq".into(), call.boundary_seq.into());
        map.insert("responseLogged".into(), call.response.is_some().into());
        if call.response.is_none() {
            map.insert("note".into(), NO_RESPONSE_NOTE.into());
        }
        map.insert(
            "firstResponseSeq".into(),
            call.response.map(|(seq, _)| seq).into(),
        );
        map.insert(
            "responseKind".into(),
            call.response.map(|(_, kind)| kind.event_type()).into(),
        );
        map.insert("finish".into(), call.finish.clone().into());
        map.insert("stepStartSeq".into(), call.step_start_seq.into());
        map.insert(
            "inherited".into(),
            (call.step_start_seq < seed_length).into(),
        );
        map.insert("requestHeaderSeq".into(), call.header_seq.into());
        map.insert("request".into(), request);
        map.insert("requestContextSeq".into(), call.context_seq.into());
        map.insert("requestContext".into(), context);
        Ok(pretty_line(&Value::Object(map)))
    }
}
