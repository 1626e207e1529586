//! The names the mount shows: a session's directory name from its id and back,
//! and the longest name a fork child's id may encode to.
//!
//! The rule itself is [`crate::model::catalog::readable_name`]: an id as it
//! is wherever a Linux file name can hold it, escaped only where it must be.

use crate::model::catalog::{ROOT_ENTRIES, old_name_id, readable_name};
use crate::model::ids::decode_segment;

/// A JSONL store keeps each session in a directory named by its encoded id,
/// so a fork child's encoded id must fit in a file name.
pub use crate::model::catalog::NAME_MAX;

/// A session's directory name in the mount.
pub fn mount_name(id: &str) -> String {
    readable_name(id)
}

/// The session id a directory name shows, when the name alone tells it: an id
/// shown as it is, or escaped. A digest name (an id over 255 bytes) cannot be
/// read back; such a session is found once a listing holds it.
pub fn id_of(name: &str) -> Option<String> {
    if readable_name(name) == name {
        return Some(name.to_string());
    }
    // A root entry's escape (`~0066lush`) is none the Harness writes.
    if let Some(entry) = ROOT_ENTRIES.iter().find(|e| readable_name(e) == name) {
        return Some(entry.to_string());
    }
    decode_segment(name).filter(|id| readable_name(id) == name)
}

/// The session id an old name stands for: before readable names the root
/// showed each id in the Harness's on-disk escape (`notes~0020draft`). `None`
/// when `name` is no old name, or is the session's shown name anyway.
pub fn old_name_of(name: &str) -> Option<String> {
    old_name_id(name).filter(|id| readable_name(id) != name)
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
            "notes 2026 «draft» 🦀",
            ".",
            "x~y",
        ] {
            let name = mount_name(id);
            assert_eq!(
                id_of(&name).as_deref(),
                Some(id),
                "{id:?} shown as {name:?}"
            );
        }
        assert_eq!(mount_name("flush"), "~0066lush");
        assert_eq!(id_of("flush"), None, "the root control file is no session");
        assert_eq!(mount_name("by-project"), "~0062y-project");
        assert_eq!(id_of("by-project"), None);
        assert_eq!(mount_name("a b"), "a b");
        let long = "x".repeat(NAME_MAX + 1);
        assert!(mount_name(&long).len() <= NAME_MAX);
        assert_eq!(
            id_of(&mount_name(&long)),
            None,
            "a digest name reads back no id"
        );
    }

    #[test]
    fn old_names_read_back_only_where_they_differ() {
        assert_eq!(old_name_of("a~0020b").as_deref(), Some("a b"));
        assert_eq!(old_name_of("~0066lush").as_deref(), None, "shown so today");
        assert_eq!(old_name_of("flush").as_deref(), None);
        assert_eq!(old_name_of("session-1"), None, "the same name both ways");
        assert_eq!(old_name_of("a b"), None);
    }
}
