//! One line of the root's `sessions.jsonl`: what the listing knows of a
//! session, with no log read for it. Fields the listing does not know are
//! `null` (a header that cannot be read; a store that keeps no per-session
//! file, as SQLite).

use serde::Serialize;

use crate::json::{compact_line, compact_line_into};

/// What a listing knows of one session, as `sessions.jsonl` shows it; its
/// fields are serialised in this order, by these names in camel case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
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
        // Serialised from the struct, not built as a map: a 100,000-session
        // root renders one line per session at its first `stat`.
        compact_line(self)
    }

    /// The line appended to `out`.
    pub fn render_into(&self, out: &mut Vec<u8>) {
        compact_line_into(self, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, Value};

    /// The line built as a JSON map, key by key, as it was rendered before.
    fn rendered_as_a_map(line: &CatalogLine) -> Vec<u8> {
        let text = |v: Option<&str>| v.map_or(Value::Null, Value::from);
        let mut map = Map::new();
        map.insert("name".into(), line.name.into());
        map.insert("id".into(), line.id.into());
        map.insert("cwd".into(), text(line.cwd));
        map.insert("createdAt".into(), line.created_at.into());
        map.insert("lastWrite".into(), line.last_write.into());
        map.insert("size".into(), line.size.into());
        map.insert("store".into(), line.store.into());
        map.insert("parent".into(), text(line.parent));
        map.insert("delegationDepth".into(), line.delegation_depth.into());
        compact_line(&map)
    }

    #[test]
    fn a_line_is_the_json_map_of_its_fields() {
        let names = [
            "a",
            "",
            "quote \" back\\slash",
            "tab\tnew\nline \u{1}",
            "sep \u{2028}\u{2029} «é» 🦀",
        ];
        let numbers = [None, Some(0), Some(-1), Some(i64::MAX), Some(i64::MIN)];
        for (k, name) in names.iter().enumerate() {
            for (j, number) in numbers.iter().enumerate() {
                let line = CatalogLine {
                    name,
                    id: names[(k + 1) % names.len()],
                    cwd: (j % 2 == 0).then_some(names[(k + 2) % names.len()]),
                    created_at: *number,
                    last_write: numbers[(j + 1) % numbers.len()],
                    size: number.map(i64::unsigned_abs),
                    store: names[(k + 3) % names.len()],
                    parent: (j % 3 == 0).then_some(*name),
                    delegation_depth: number.map(|n| n as u64),
                };
                assert_eq!(
                    String::from_utf8(line.render()).unwrap(),
                    String::from_utf8(rendered_as_a_map(&line)).unwrap()
                );
            }
        }
    }

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
