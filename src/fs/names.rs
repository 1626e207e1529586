//! The names the mount shows: a session's directory name from its id and back,
//! and the longest name shown.

use crate::model::catalog::ROOT_ENTRIES;
use crate::model::ids::{decode_segment, encode_segment};

/// The longest directory name shown: Linux's NAME_MAX. Tools such as tar and
/// rsync cannot handle longer names, and JSONL stores cannot hold them.
pub const NAME_MAX: usize = 255;

/// A session's directory name in the mount: the Harness's own id encoding,
/// except that an id spelled like one of the root's own entries (`flush`,
/// `sessions.jsonl`, `by-project`, ...) has its first character escaped too
/// (`~0066lush`: an escape the Harness never writes, so no other id shows so).
pub fn mount_name(id: &str) -> Option<String> {
    let name = encode_segment(id)?;
    if !ROOT_ENTRIES.contains(&name.as_str()) {
        return Some(name);
    }
    let first = name.chars().next()?;
    Some(format!(
        "~{:04X}{}",
        first as u32,
        &name[first.len_utf8()..]
    ))
}

/// The session id a directory name shows, when `name` is the one name
/// [`mount_name`] gives that id.
pub fn id_of(name: &str) -> Option<String> {
    // A root entry's own escape is none the Harness writes: found by name.
    if let Some(entry) = ROOT_ENTRIES
        .iter()
        .find(|entry| mount_name(entry).as_deref() == Some(name))
    {
        return Some(entry.to_string());
    }
    let id = decode_segment(name)?;
    (mount_name(&id).as_deref() == Some(name)).then_some(id)
}

/// The name a session's directory would have, when it can be shown at all.
pub fn shown_name(id: &str) -> Option<String> {
    mount_name(id).filter(|name| name.len() <= NAME_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for id in [
            "session-1",
            "flush",
            "a/b",
            "~0066lush",
            "by-date",
            "sessions.jsonl",
        ] {
            let name = mount_name(id).unwrap();
            assert_eq!(
                id_of(&name).as_deref(),
                Some(id),
                "{id:?} shown as {name:?}"
            );
        }
        assert_eq!(mount_name("flush").as_deref(), Some("~0066lush"));
        assert_eq!(id_of("flush"), None, "the root control file is no session");
        assert_eq!(mount_name("by-project").as_deref(), Some("~0062y-project"));
        assert_eq!(id_of("by-project"), None);
        assert!(shown_name(&"x".repeat(NAME_MAX + 1)).is_none());
    }
}
