//! One line of the root's `sessions.jsonl`: what the listing knows of a
//! session, with no log read for it. Fields the listing does not know are
//! `null` (a header that cannot be read; a store that keeps no per-session
//! file, as SQLite).

use serde_json::{Map, Value};

use crate::json::compact_line;

/// What a listing knows of one session, as `sessions.jsonl` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CatalogLine<'a> {
    /// The session's name at the mount root.
    pub name: &'a str,
    /// The session id.
    pub id: &'a str,
    /// The header's cwd.
    pub cwd: Option<&'a str>,
    /// The header's createdAt, in ms since the Unix epoch.
    pub created_at: Option<i64>,
    /// The log file's last modification, in ms since the Unix epoch.
    pub last_write: Option<i64>,
    /// The log file's size in bytes as stored (compressed, for zstd).
    pub size: Option<u64>,
    /// The store kind: `jsonl`, `zstd` or `sqlite`.
    pub store: &'a str,
    /// The header's parentSession.
    pub parent: Option<&'a str>,
    /// The header's delegationDepth.
    pub delegation_depth: Option<u64>,
}

impl CatalogLine<'_> {
    /// The line, `\n`-terminated, with keys always in this order.
    pub fn render(&self) -> Vec<u8> {
        let text = |v: Option<&str>| v.map_or(Value::Null, Value::from);
        let mut line = Map::new();
        line.insert("name".into(), self.name.into());
        line.insert("id".into(), self.id.into());
        line.insert("cwd".into(), text(self.cwd));
        line.insert("createdAt".into(), self.created_at.into());
        line.insert("lastWrite".into(), self.last_write.into());
        line.insert("size".into(), self.size.into());
        line.insert("store".into(), self.store.into());
        line.insert("parent".into(), text(self.parent));
        line.insert("delegationDepth".into(), self.delegation_depth.into());
        compact_line(&line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_holds_the_listing_fields_in_order() {
        let line = CatalogLine {
            name: "notes «draft»",
            id: "notes «draft»",
            cwd: Some("/home/ana/src/café menu"),
            created_at: Some(1_773_496_560_000),
            last_write: Some(1_773_496_561_234),
            size: Some(4096),
            store: "zstd",
            parent: Some("orbit-debug-tools"),
            delegation_depth: Some(2),
        };
        assert_eq!(
            String::from_utf8(line.render()).unwrap(),
            concat!(
                r#"{"name":"notes «draft»","id":"notes «draft»","cwd":"/home/ana/src/café menu","#,
                r#""createdAt":1773496560000,"lastWrite":1773496561234,"size":4096,"store":"zstd","#,
                r#""parent":"orbit-debug-tools","delegationDepth":2}"#,
                "\n"
            )
        );
        let unknown = CatalogLine {
            cwd: None,
            created_at: None,
            last_write: None,
            size: None,
            parent: None,
            delegation_depth: None,
            store: "sqlite",
            ..line
        };
        let parsed: Value = serde_json::from_slice(&unknown.render()).unwrap();
        assert_eq!(parsed["cwd"], Value::Null);
        assert_eq!(parsed["size"], Value::Null);
        assert_eq!(parsed["store"], "sqlite");
    }
}
