//! sessionfs: a FUSE filesystem over DeepSeek Harness session stores.
//!
//! Layers, from the bottom up (`model ← {store, render} ← view ← {persist, fs} ← fuse`):
//! - [`model`]: the pure session model (events, surface, transcript inputs,
//!   request header, crash repair, fork rules). No files, no FUSE.
//! - [`store`]: the on-disk formats (JSONL, zstd JSONL, SQLite) turned into
//!   logical events, and fork children written back. No FUSE.
//! - [`render`]: the bytes of generated files, complete so their size is exact.
//! - [`catalog`]: store listings as the root's index entries show them
//!   (`sessions.jsonl`), reading no log.
//! - [`view`]: one session's indexed state and the bytes of its generated files;
//!   its scan saved as bytes, and when saved bytes may be trusted.
//! - [`persist`]: the persistent index: saved scans and listing headers kept on
//!   disk between mounts, behind `view::SavedScans` and `store::KnownHeaders`.
//! - [`fs`]: the filesystem model (inodes, lookups, reads, control files, what
//!   `setattr` may change), with errors that carry an errno and a sentence.
//! - [`fuse`]: the thin fuser adapter (kernel requests → [`fs`] calls, and the
//!   threads that tell the kernel what changed); [`fuse_device`]: why
//!   `/dev/fuse` cannot be opened, said before mounting.
//!
//! Beside the layers:
//! - [`error`]: the one error type; every errno is chosen there.
//! - [`sync`]: locks that outlive a panic, for every layer.
//! - [`bytes`]: a file's bytes as shared frozen segments and a growing tail.
//! - [`digest`]: FNV-1a, for telling whether bytes seen once are the same.
//! - [`json`], [`json_len`]: JSON helpers, and the length of a pretty line
//!   computed without writing it.
//! - [`cli`]: the command line; [`mountinfo`]: which mount is this daemon's
//!   own; [`random`]: random identifiers from the kernel.

#![warn(missing_docs)]

pub mod bytes;
pub mod catalog;
pub mod cli;
pub mod digest;
pub mod error;
pub mod fs;
pub mod fuse;
pub mod fuse_device;
pub mod json;
pub mod json_len;
pub mod model;
pub mod mountinfo;
pub mod persist;
pub mod random;
pub mod render;
pub mod store;
pub mod sync;
pub mod view;
