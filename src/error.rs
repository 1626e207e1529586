//! The one error type of the filesystem model: an errno for the syscall and a
//! sentence for the user. Every errno choice is made here.

use std::fmt;

use crate::model::Refusal;

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
    /// A store write failed (EIO, or ENOSPC when the disk is full).
    Io { errno: i32, message: String },
}

impl Error {
    pub fn errno(&self) -> i32 {
        match self {
            Error::NotFound(_) => libc::ENOENT,
            Error::Unreadable(Refusal::Corrupt(_)) => libc::EIO,
            // The log is fine; this build cannot interpret it.
            Error::Unreadable(Refusal::Unsupported(_)) => libc::EOPNOTSUPP,
            Error::Unreadable(Refusal::Unavailable { errno, .. }) => *errno,
            Error::Invalid(_) => libc::EINVAL,
            Error::Exists(_) => libc::EEXIST,
            Error::NameTooLong(_) => libc::ENAMETOOLONG,
            Error::ReadOnly(_) => libc::EROFS,
            Error::NotDir(_) => libc::ENOTDIR,
            Error::IsDir(_) => libc::EISDIR,
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
            | Error::Io { message: m, .. } => f.write_str(m),
            Error::Unreadable(refusal) => f.write_str(refusal.message()),
        }
    }
}

impl From<Refusal> for Error {
    fn from(refusal: Refusal) -> Error {
        Error::Unreadable(refusal)
    }
}

pub type Result<T> = std::result::Result<T, Error>;
