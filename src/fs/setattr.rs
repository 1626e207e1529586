//! What `setattr` may change: nothing but a control file's size, to 0.
//!
//! `echo N > fork` opens with `O_TRUNC`; without atomic `O_TRUNC` the kernel
//! first sends a truncating `setattr`, often with the mtime and ctime it sets
//! along. fuser's default would answer ENOSYS ("Function not implemented"), so
//! that truncation is accepted as a no-op. Every other change (chmod, chown,
//! utimens, a truncation to another size, any truncation of a generated file)
//! is refused with the read-only error.

#![warn(missing_docs)]

use super::{Attr, SessionFs};
use crate::error::{Error, Result};

/// What one `setattr` asks to change, in the filesystem's terms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AttrChange {
    /// The new size, when the file is to be truncated or extended.
    pub size: Option<u64>,
    /// A new mode, owner, group or (BSD) file flags.
    pub mode_or_owner: bool,
    /// A new mtime or ctime: what a truncation carries along.
    pub modification_times: bool,
    /// A new atime, or a creation, change or backup time (macOS).
    pub other_times: bool,
}

impl SessionFs {
    /// Applies a `setattr`, answering the node's attributes as they now are.
    pub fn setattr(&self, ino: u64, change: AttrChange) -> Result<Attr> {
        let truncating = change.size == Some(0);
        let refused = change.mode_or_owner
            || change.other_times
            || (change.modification_times && !truncating)
            || change.size.is_some_and(|size| size != 0);
        if refused {
            return Err(Error::ReadOnly(
                "sessionfs files' times, modes, owners and sizes cannot be changed".into(),
            ));
        }
        match change.size {
            Some(_) => self.truncate(ino),
            None => self.getattr(ino),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::FsConfig;
    use crate::fs::inode::ROOT;
    use crate::model::header::SessionHeader;
    use crate::store::memory::MemoryStore;
    use std::sync::Arc;

    /// A mount of one empty session, and the inodes of its `fork` and `header.json`.
    fn one_session(config: FsConfig) -> (Arc<SessionFs>, u64, u64) {
        let store = MemoryStore::default();
        store.insert(SessionHeader::new("s", 1_772_457_300_000), Vec::new());
        let fs = SessionFs::new(Box::new(store), config);
        let dir = fs.lookup(ROOT, "s").expect("session").ino;
        let fork = fs.lookup(dir, "fork").expect("fork").ino;
        let header = fs.lookup(dir, "header.json").expect("header").ino;
        (fs, fork, header)
    }

    fn errno(result: Result<Attr>) -> i32 {
        result.expect_err("refused").errno()
    }

    const TRUNCATE: AttrChange = AttrChange {
        size: Some(0),
        mode_or_owner: false,
        modification_times: false,
        other_times: false,
    };

    #[test]
    fn truncating_a_control_file_is_a_no_op_with_or_without_its_times() {
        let (fs, fork, _) = one_session(FsConfig::default());
        let before = fs.getattr(fork).expect("attr");
        assert_eq!(fs.setattr(fork, TRUNCATE), Ok(before.clone()));
        let with_times = AttrChange {
            modification_times: true,
            ..TRUNCATE
        };
        assert_eq!(fs.setattr(fork, with_times), Ok(before.clone()));
        let root_flush = fs.lookup(ROOT, "flush").expect("flush").ino;
        assert!(fs.setattr(root_flush, TRUNCATE).is_ok());
        // A change of nothing answers the attributes as they are.
        assert_eq!(fs.setattr(fork, AttrChange::default()), Ok(before));
    }

    #[test]
    fn chmod_chown_utimens_and_other_sizes_are_read_only() {
        let (fs, fork, header) = one_session(FsConfig::default());
        let refused = [
            AttrChange {
                mode_or_owner: true,
                ..AttrChange::default()
            },
            AttrChange {
                modification_times: true,
                ..AttrChange::default()
            },
            AttrChange {
                other_times: true,
                ..AttrChange::default()
            },
            AttrChange {
                other_times: true,
                ..TRUNCATE
            },
            AttrChange {
                size: Some(5),
                ..AttrChange::default()
            },
        ];
        for ino in [fork, header] {
            for change in refused {
                assert_eq!(errno(fs.setattr(ino, change)), libc::EROFS, "{change:?}");
            }
        }
    }

    #[test]
    fn generated_files_and_read_only_mounts_refuse_truncation() {
        let (fs, _, header) = one_session(FsConfig::default());
        assert_eq!(errno(fs.setattr(header, TRUNCATE)), libc::EROFS);
        let read_only = FsConfig {
            read_only: Some("the mount is read-only (-o ro)".into()),
            ..FsConfig::default()
        };
        let (fs, fork, _) = one_session(read_only);
        assert_eq!(errno(fs.setattr(fork, TRUNCATE)), libc::EROFS);
    }
}
