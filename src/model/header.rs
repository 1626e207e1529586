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

    /// Reads a JSONL header line of the common shape without building a JSON
    /// map: what a listing of 100,000 sessions does for each. Strict and
    /// narrow, like `model::quick`: `None` never means "not a header", only
    /// "parse it in full with [`SessionHeader::from_jsonl`]", which then gives
    /// the authoritative answer; a differential test holds the two equal.
    pub fn quick_jsonl(line: &[u8]) -> Option<SessionHeader> {
        let common: CommonHeader = serde_json::from_slice(line).ok()?;
        let safe = |n: u64| (n <= crate::json::MAX_SAFE_INTEGER as u64).then_some(n);
        if common.kind != "session"
            || common.sandbox_mode.0.is_some()
            || common.approval_policy.0.is_some()
            || common.origin.0.is_some_and(|origin| origin != "subagent")
        {
            return None;
        }
        Some(SessionHeader {
            version: common.version.into(),
            id: common.id.to_string(),
            created_at: safe(common.created_at)? as i64,
            cwd: common.cwd.0.map(str::to_string),
            parent_session: common.parent_session.0.map(str::to_string),
            seed_length: match common.seed_length.0 {
                Some(n) => Some(safe(n)?),
                None => None,
            },
            origin: common.origin.0.map(str::to_string),
            delegation_depth: Some(safe(common.delegation_depth)?),
            agent_preset: common.agent_preset.0.map(str::to_string),
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

/// The header fields [`SessionHeader::quick_jsonl`] reads: strings without
/// escapes, numbers that are plain non-negative integers. Anything else (a
/// `null`, a float, an escaped string, a repeated key) fails to deserialize,
/// and the line is parsed in full.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct CommonHeader<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    version: u64,
    id: &'a str,
    created_at: u64,
    delegation_depth: u64,
    #[serde(default, borrow)]
    cwd: Given<&'a str>,
    #[serde(default, borrow)]
    parent_session: Given<&'a str>,
    #[serde(default)]
    seed_length: Given<u64>,
    #[serde(default, borrow)]
    origin: Given<&'a str>,
    #[serde(default, borrow)]
    agent_preset: Given<&'a str>,
    #[serde(default)]
    sandbox_mode: Given<serde::de::IgnoredAny>,
    #[serde(default)]
    approval_policy: Given<serde::de::IgnoredAny>,
}

/// A field that may be absent but, when given, is a `T`: unlike `Option`, a
/// `null` does not deserialize.
struct Given<T>(Option<T>);

impl<T> Default for Given<T> {
    fn default() -> Given<T> {
        Given(None)
    }
}

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Given<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Given<T>, D::Error> {
        T::deserialize(deserializer).map(|value| Given(Some(value)))
    }
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

    #[test]
    fn a_header_read_quickly_is_the_header_parsed_in_full() {
        let base = r#"{"type":"session","version":0,"id":"sub-reviewer-7","createdAt":1773496560000,"cwd":"/home/ana/src/café menu","parentSession":"orbit-debug-tools","seedLength":12,"origin":"subagent","delegationDepth":2,"agentPreset":"reviewer"}"#;
        let fields = [
            (
                "type",
                vec!["\"session\"", "\"event\"", "\"sess\\u0069on\"", "null"],
            ),
            (
                "version",
                vec![
                    "0",
                    "2",
                    "-0",
                    "0.0",
                    "1e0",
                    "-1",
                    "\"0\"",
                    "null",
                    "9007199254740993",
                ],
            ),
            ("id", vec!["\"a\"", "\"\"", "\"esc\\\"aped\"", "7", "null"]),
            (
                "createdAt",
                vec![
                    "1",
                    "-0",
                    "1.0",
                    "-5",
                    "9007199254740991",
                    "9007199254740992",
                    "null",
                ],
            ),
            ("cwd", vec!["\"/x\"", "null", "3", "\"\\/x\""]),
            ("parentSession", vec!["\"p\"", "null", "[]"]),
            (
                "seedLength",
                vec!["0", "-0", "2.0", "-1", "9007199254740992", "null"],
            ),
            ("origin", vec!["\"subagent\"", "\"parent\"", "null"]),
            ("delegationDepth", vec!["0", "-0", "0.5", "null", "\"1\""]),
            ("agentPreset", vec!["\"r\"", "null", "{}"]),
            ("sandboxMode", vec!["\"x\"", "null"]),
            ("approvalPolicy", vec!["{}"]),
            ("extra", vec!["{\"nested\":[1,2]}", "null"]),
        ];
        let full = |text: &str| {
            serde_json::from_str::<JsonMap>(text)
                .map_err(|e| e.to_string())
                .and_then(|map| SessionHeader::from_jsonl(&map))
        };
        let mut quick_read = 0;
        let mut lines = vec![base.to_string()];
        for (key, values) in &fields {
            let map: Vec<(String, String)> = serde_json::from_str::<JsonMap>(base)
                .unwrap()
                .into_iter()
                .map(|(k, v)| (k, v.to_string()))
                .collect();
            for value in values {
                // The field given this value, then repeated, then removed.
                let mut given = map.clone();
                match given.iter_mut().find(|(k, _)| k == key) {
                    Some(field) => field.1 = value.to_string(),
                    None => given.push((key.to_string(), value.to_string())),
                }
                let join = |fields: &[(String, String)]| {
                    let body: Vec<String> =
                        fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                    format!("{{{}}}", body.join(","))
                };
                lines.push(join(&given));
                let mut repeated = given.clone();
                repeated.push((key.to_string(), value.to_string()));
                lines.push(join(&repeated));
                given.retain(|(k, _)| k != key);
                lines.push(join(&given));
            }
        }
        lines.extend(["", "null", "[]", "{", "{}"].map(String::from));
        for text in &lines {
            if let Some(quick) = SessionHeader::quick_jsonl(text.as_bytes()) {
                quick_read += 1;
                assert_eq!(Ok(quick), full(text), "{text}");
            }
        }
        assert!(
            quick_read > 20,
            "the common shape is read quickly: {quick_read}"
        );
        assert!(SessionHeader::quick_jsonl(base.as_bytes()).is_some());
    }
}
