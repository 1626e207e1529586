//! The names the mount shows: a session's directory name from its id and back,
//! and the longest name shown.

use crate::model::ids::{decode_segment, encode_segment};

/// The longest directory name shown: Linux's NAME_MAX. Tools such as tar and
/// rsync cannot handle longer names, and JSONL stores cannot hold them.
pub const NAME_MAX: usize = 255;

/// The name the id `flush` is shown under, so the root control file keeps its
/// name: an escape no id encodes to.
const FLUSH_ESCAPED: &str = "~0066lush";

/// A session's directory name in the mount: the Harness's own id encoding, except
/// that the id `flush` is shown as `~0066lush` (an escape no id encodes to), so the
/// root control file keeps its name and never collides with a session.
pub fn mount_name(id: &str) -> Option<String> {
    match encode_segment(id)? {
        name if name == "flush" => Some(FLUSH_ESCAPED.into()),
        name => Some(name),
    }
}

/// The session id a directory name shows, when `name` is the one name
/// [`mount_name`] gives that id.
pub fn id_of(name: &str) -> Option<String> {
    let id = match name {
        FLUSH_ESCAPED => "flush".to_string(),
        _ => decode_segment(name)?,
    };
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
        for id in ["session-1", "flush", "a/b", "~0066lush"] {
            let name = mount_name(id).unwrap();
            assert_eq!(
                id_of(&name).as_deref(),
                Some(id),
                "{id:?} shown as {name:?}"
            );
        }
        assert_eq!(mount_name("flush").as_deref(), Some("~0066lush"));
        assert_eq!(id_of("flush"), None, "the root control file is no session");
        assert!(shown_name(&"x".repeat(NAME_MAX + 1)).is_none());
    }
}
