//! The session header (spec §7) and the request header fold (spec §6).

use serde_json::{Map, Value};

use crate::json::{JsonMap, is_negative_zero, non_negative_safe_integer, safe_integer, str_field};

/// Metadata kept outside the log. Field order is the Harness's header key order.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SessionHeader {
    /// The stored format version; only 0 can be read.
    pub version: Value,
    /// The session id (`id`); a fold refuses a header whose id is not the session's.
    pub id: String,
    /// When the session was created (`createdAt`), in Unix milliseconds.
    pub created_at: i64,
    /// The working directory the session ran in (`cwd`); absolute when present.
    pub cwd: Option<String>,
    /// For a fork child, the id of the session it was forked from (`parentSession`).
    pub parent_session: Option<String>,
    /// For a fork child, how many parent events it was seeded with (`seedLength`).
    pub seed_length: Option<u64>,
    /// `"subagent"` for a session a subagent ran, the only value allowed (`origin`).
    pub origin: Option<String>,
    /// The subagent nesting depth (`delegationDepth`); unset is written as 0.
    pub delegation_depth: Option<u64>,
    /// The name of the agent preset the session ran with (`agentPreset`).
    pub agent_preset: Option<String>,
}

impl SessionHeader {
    /// A format-v0 header with only an id and a creation time.
    pub fn new(id: &str, created_at: i64) -> SessionHeader {
        SessionHeader {
            version: 0.into(),
            id: id.to_string(),
            created_at,
            cwd: None,
            parent_session: None,
            seed_length: None,
            origin: None,
            delegation_depth: None,
            agent_preset: None,
        }
    }

    /// Parses a JSONL header line's object (spec §10.3). `Err` is the reason it is
    /// not a session header.
    pub fn from_jsonl(line: &JsonMap) -> Result<SessionHeader, String> {
        if line.get("type").and_then(Value::as_str) != Some("session") {
            return Err("first line is not a session header (type is not \"session\")".into());
        }
        if line.contains_key("sandboxMode") || line.contains_key("approvalPolicy") {
            return Err("session header carries retired policy baseline fields (sandboxMode/approvalPolicy)".into());
        }
        let version = line.get("version").filter(|v| v.is_number()).cloned();
        let id = str_field(line, "id");
        let created_at = line
            .get("createdAt")
            .filter(|v| !is_negative_zero(v))
            .and_then(non_negative_safe_integer);
        let depth = line
            .get("delegationDepth")
            .filter(|v| !is_negative_zero(v))
            .and_then(non_negative_safe_integer);
        let (Some(version), Some(id), Some(created_at), Some(depth)) =
            (version, id, created_at, depth)
        else {
            return Err("first line is not a session header (version, id, createdAt or delegationDepth missing or malformed)".into());
        };
        let origin = match line.get("origin") {
            None => None,
            Some(Value::String(s)) if s == "subagent" => Some(s.clone()),
            Some(_) => {
                return Err(
                    "first line is not a session header (origin is not \"subagent\")".into(),
                );
            }
        };
        let agent_preset = match line.get("agentPreset") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                return Err(
                    "first line is not a session header (agentPreset is not a string)".into(),
                );
            }
        };
        let optional_string = |key: &str| -> Result<Option<String>, String> {
            match line.get(key) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(format!("session header field {key} is not a string")),
            }
        };
        let seed_length = match line.get("seedLength") {
            None => None,
            Some(v) => Some(
                non_negative_safe_integer(v)
                    .ok_or("session header seedLength is not a non-negative integer")?,
            ),
        };
        Ok(SessionHeader {
            version,
            id: id.to_string(),
            created_at: created_at as i64,
            cwd: optional_string("cwd")?,
            parent_session: optional_string("parentSession")?,
            seed_length,
            origin,
            delegation_depth: Some(depth),
            agent_preset,
        })
    }

    /// The stored version as an integer, if it is one.
    pub fn version_number(&self) -> Option<i64> {
        safe_integer(&self.version)
    }

    /// The direction-aware refusal of a non-zero version (spec §7.2), or `None` for v0.
    pub fn version_refusal(&self) -> Option<String> {
        if self.version_number() == Some(0) {
            return None;
        }
        let newer = self.version.as_f64().is_some_and(|v| v > 0.0);
        Some(if newer {
            format!(
                "session \"{}\" uses log format v{}, but this harness reads only v0: the log was written by a newer harness \u{2014} upgrade the harness to open it",
                self.id, self.version
            )
        } else {
            format!(
                "session \"{}\" uses log format v{}, which is older than v0: no upgrade path ships for it",
                self.id, self.version
            )
        })
    }

    /// Header validation made when a session is built (spec §7.1).
    pub fn validate(&self) -> Result<(), String> {
        if let Some(cwd) = &self.cwd
            && !cwd.starts_with('/')
        {
            return Err(format!(
                "session header cwd {cwd:?} is not an absolute path"
            ));
        }
        if self.origin.as_deref().is_some_and(|o| o != "subagent") {
            return Err("session header origin is not \"subagent\"".into());
        }
        Ok(())
    }

    /// The header as JSON in the Harness's key order. `delegationDepth` is always
    /// present (0 when unset) so that every backend shows the same header.
    pub fn to_json(&self) -> JsonMap {
        let mut map = Map::new();
        map.insert("version".into(), self.version.clone());
        map.insert("id".into(), self.id.clone().into());
        map.insert("createdAt".into(), self.created_at.into());
        if let Some(cwd) = &self.cwd {
            map.insert("cwd".into(), cwd.clone().into());
        }
        if let Some(parent) = &self.parent_session {
            map.insert("parentSession".into(), parent.clone().into());
        }
        if let Some(seed) = self.seed_length {
            map.insert("seedLength".into(), seed.into());
        }
        if let Some(origin) = &self.origin {
            map.insert("origin".into(), origin.clone().into());
        }
        map.insert(
            "delegationDepth".into(),
            self.delegation_depth.unwrap_or(0).into(),
        );
        if let Some(preset) = &self.agent_preset {
            map.insert("agentPreset".into(), preset.clone().into());
        }
        map
    }

    /// The JSONL header line (spec §10.3): `type` first, `delegationDepth` mandatory.
    pub fn to_jsonl_line(&self) -> String {
        let mut line = Map::new();
        line.insert("type".into(), "session".into());
        line.extend(self.to_json());
        serde_json::to_string(&line).unwrap_or_default()
    }
}

/// The canonical form of a `request/header` snapshot (spec §6.2): `config`,
/// `adapterDefaults` only when it marks something, non-empty `system`, non-empty `tools`.
pub fn canonical_request_header(header: &Value) -> Value {
    let mut out = Map::new();
    let Some(header) = header.as_object() else {
        return Value::Object(out);
    };
    if let Some(config) = header.get("config") {
        out.insert("config".into(), config.clone());
    }
    if let Some(defaults) = header.get("adapterDefaults").and_then(Value::as_object)
        && (defaults.get("reasoningEffort") == Some(&Value::Bool(true))
            || defaults.get("maxTokens") == Some(&Value::Bool(true)))
    {
        out.insert("adapterDefaults".into(), Value::Object(defaults.clone()));
    }
    if let Some(system) = header
        .get("system")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        out.insert("system".into(), system.into());
    }
    if let Some(tools) = header
        .get("tools")
        .and_then(Value::as_array)
        .filter(|t| !t.is_empty())
    {
        out.insert("tools".into(), Value::Array(tools.clone()));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(text: &str) -> JsonMap {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn parses_and_reprints_the_header_line() {
        let text = r#"{"type":"session","version":0,"id":"sub-reviewer-7","createdAt":1773496560000,"cwd":"/home/ana/src/café menu","parentSession":"orbit-debug-tools","origin":"subagent","delegationDepth":2,"agentPreset":"reviewer"}"#;
        let header = SessionHeader::from_jsonl(&line(text)).unwrap();
        assert_eq!(header.to_jsonl_line(), text);
        assert_eq!(header.version_refusal(), None);
    }

    #[test]
    fn refuses_bad_header_lines() {
        for text in [
            r#"{"type":"session","version":0,"id":"a","createdAt":1}"#,
            r#"{"type":"session","version":0,"id":"a","createdAt":1,"delegationDepth":-0}"#,
            r#"{"type":"session","version":"0","id":"a","createdAt":1,"delegationDepth":0}"#,
            r#"{"type":"session","version":0,"id":"a","createdAt":1,"delegationDepth":0,"sandboxMode":"x"}"#,
            r#"{"type":"event","version":0,"id":"a","createdAt":1,"delegationDepth":0}"#,
            r#"{"type":"session","version":0,"id":"a","createdAt":1,"delegationDepth":0,"origin":"parent"}"#,
        ] {
            assert!(SessionHeader::from_jsonl(&line(text)).is_err(), "{text}");
        }
    }

    #[test]
    fn newer_versions_are_refused_with_the_harness_message() {
        let header = SessionHeader::from_jsonl(&line(
            r#"{"type":"session","version":2,"id":"drill","createdAt":1,"delegationDepth":0}"#,
        ))
        .unwrap();
        assert_eq!(
            header.version_refusal().unwrap(),
            "session \"drill\" uses log format v2, but this harness reads only v0: the log was written by a newer harness \u{2014} upgrade the harness to open it"
        );
    }

    #[test]
    fn canonical_request_header_drops_empty_parts() {
        let raw = json!({"config": {"provider": "p", "model": "m"}, "system": "", "tools": [], "adapterDefaults": {}, "messagePrefix": []});
        assert_eq!(
            canonical_request_header(&raw),
            json!({"config": {"provider": "p", "model": "m"}})
        );
        let full = json!({"tools": [{"name": "t"}], "system": "s", "adapterDefaults": {"maxTokens": true}, "config": {"provider": "p", "model": "m", "maxTokens": 5}});
        assert_eq!(
            serde_json::to_string(&canonical_request_header(&full)).unwrap(),
            r#"{"config":{"provider":"p","model":"m","maxTokens":5},"adapterDefaults":{"maxTokens":true},"system":"s","tools":[{"name":"t"}]}"#
        );
    }
}
