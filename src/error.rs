//! The one error type of the filesystem model: an errno for the syscall and a
//! sentence for the user. Every errno choice is made here.
//!
//! Layers above name what went wrong, never an errno: a control command that
//! is refused is [`Error::Invalid`], [`Error::Exists`] or [`Error::NameTooLong`];
//! a session that cannot be read answers its [`Refusal`] (the store's own errno
//! when it cannot be read just now); a failed system call is [`Error::io`].
//! This file imports nothing above the model.

use std::fmt;
use std::io;

use crate::model::{Cause, Refusal};

/// What went wrong, as the filesystem model reports it: each variant chooses its errno
/// ([`Error::errno`]) and carries the sentence the user is shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// No such file or session (ENOENT). Expected during lookups: logged at debug.
    NotFound(String),
    /// A session's log cannot be read (EIO for damage, EOPNOTSUPP for a newer
    /// format, the store's own errno when it cannot be read now).
    Unreadable(Refusal),
    /// Malformed control-file input or a refused boundary (EINVAL).
    Invalid(String),
    /// A fork child name that is taken (EEXIST).
    Exists(String),
    /// A fork child name longer than the store can hold (ENAMETOOLONG).
    NameTooLong(String),
    /// A write to something that is not a control file, or on a read-only mount (EROFS).
    ReadOnly(String),
    /// Not a directory (ENOTDIR).
    NotDir(String),
    /// A directory where a file was expected (EISDIR).
    IsDir(String),
    /// An inode whose content was replaced since it was looked up (ESTALE).
    Stale(String),
    /// A store write failed (EIO, or ENOSPC when the disk is full).
    Io {
        /// The errno to answer with.
        errno: i32,
        /// What failed, as the user is told.
        message: String,
    },
}

impl Error {
    /// The errno the failed request is answered with.
    pub fn errno(&self) -> i32 {
        match self {
            Error::NotFound(_) => libc::ENOENT,
            Error::Unreadable(Refusal::Corrupt(_)) => libc::EIO,
            // The log is fine; this build cannot interpret it.
            Error::Unreadable(Refusal::Unsupported(_)) => libc::EOPNOTSUPP,
            Error::Unreadable(Refusal::Unavailable { cause, .. }) => unavailable_errno(*cause),
            Error::Invalid(_) => libc::EINVAL,
            Error::Exists(_) => libc::EEXIST,
            Error::NameTooLong(_) => libc::ENAMETOOLONG,
            Error::ReadOnly(_) => libc::EROFS,
            Error::NotDir(_) => libc::ENOTDIR,
            Error::IsDir(_) => libc::EISDIR,
            Error::Stale(_) => libc::ESTALE,
            Error::Io { errno, .. } => *errno,
        }
    }

    /// Routine errors are logged at debug level so lookups do not flood the log.
    pub fn is_routine(&self) -> bool {
        matches!(
            self,
            Error::NotFound(_) | Error::NotDir(_) | Error::IsDir(_) | Error::ReadOnly(_)
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotFound(m)
            | Error::Invalid(m)
            | Error::Exists(m)
            | Error::NameTooLong(m)
            | Error::ReadOnly(m)
            | Error::NotDir(m)
            | Error::IsDir(m)
            | Error::Stale(m)
            | Error::Io { message: m, .. } => f.write_str(m),
            Error::Unreadable(refusal) => f.write_str(refusal.message()),
        }
    }
}

/// Requests the tree never serves, answered by the adapter without asking
/// the filesystem model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unserved {
    /// Create, remove, rename or link a name, or set an attribute: the tree
    /// is generated from the store (EROFS; ENOSYS would read as a missing
    /// feature).
    NamespaceChange,
    /// An ioctl: tools probe every file they open (isatty's TCGETS), and
    /// ENOTTY is the answer that means "not a terminal".
    Ioctl,
    /// Extended attributes: there are none, and ENOSYS lets the kernel stop
    /// asking for the rest of the mount.
    Xattr,
    /// A handler that panicked: the request failed, the mount goes on (EIO).
    Panicked,
}

impl Unserved {
    /// The errno the adapter answers such a request with.
    pub fn errno(self) -> i32 {
        match self {
            Unserved::NamespaceChange => libc::EROFS,
            Unserved::Ioctl => libc::ENOTTY,
            Unserved::Xattr => libc::ENOSYS,
            Unserved::Panicked => libc::EIO,
        }
    }
}

/// The errno for a store that cannot be read now: a system call's own, else
/// the nearest one to what the store said.
fn unavailable_errno(cause: Cause) -> i32 {
    match cause {
        Cause::Busy => libc::EBUSY,
        Cause::Denied => libc::EACCES,
        Cause::Failed => libc::EIO,
        Cause::OutOfMemory => libc::ENOMEM,
        Cause::Removed => libc::ENOENT,
        Cause::System(errno) => errno,
    }
}

/// The errno for a failed store write: the system's own when it gave one (a
/// full disk is ENOSPC), else one that fits the kind, else EIO.
pub fn io_errno(error: &io::Error) -> i32 {
    if let Some(errno) = error.raw_os_error() {
        return errno;
    }
    match error.kind() {
        io::ErrorKind::StorageFull => libc::ENOSPC,
        io::ErrorKind::QuotaExceeded => libc::EDQUOT,
        io::ErrorKind::PermissionDenied => libc::EACCES,
        io::ErrorKind::ReadOnlyFilesystem => libc::EROFS,
        io::ErrorKind::ResourceBusy => libc::EBUSY,
        io::ErrorKind::AlreadyExists => libc::EEXIST,
        _ => libc::EIO,
    }
}

impl From<FlushError> for Error {
    fn from(error: FlushError) -> Error {
        Error::Io {
            errno: io_errno(&error.source),
            message: error.to_string(),
        }
    }
}

impl From<Refusal> for Error {
    fn from(refusal: Refusal) -> Error {
        Error::Unreadable(refusal)
    }
}

/// The first write of a flush that failed, with the store's own error, so the
/// errno it deserves (ENOSPC for a full disk) reaches the caller.
#[derive(Debug)]
pub struct FlushError {
    /// The id of the session whose write failed.
    pub session: String,
    /// The store's error; the caller's errno comes from it ([`io_errno`]).
    pub source: io::Error,
}

impl fmt::Display for FlushError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "writing session {:?} failed: {}",
            self.session, self.source
        )
    }
}

impl std::error::Error for FlushError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl Error {
    /// A system call of the filesystem's own failed while doing `what`: its
    /// errno, as for a store write ([`io_errno`]).
    pub fn io(what: &str, error: &io::Error) -> Error {
        Error::Io {
            errno: io_errno(error),
            message: format!("{what}: {error}"),
        }
    }
}

/// The result of a filesystem-model operation, whose error carries its errno.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_enospc_whether_the_system_or_sqlite_said_so() {
        let system = io::Error::from_raw_os_error(libc::ENOSPC);
        let sqlite = io::Error::new(io::ErrorKind::StorageFull, "database or disk is full");
        assert_eq!(io_errno(&system), libc::ENOSPC);
        assert_eq!(io_errno(&sqlite), libc::ENOSPC);
        assert_eq!(io_errno(&io::Error::other("a torn write")), libc::EIO);
        let flush = FlushError {
            session: "child".into(),
            source: sqlite,
        };
        assert_eq!(Error::from(flush).errno(), libc::ENOSPC);
    }
}
