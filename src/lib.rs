//! sessionfs: a FUSE filesystem over DeepSeek Harness session stores.
//!
//! Layers, from the bottom up:
//! - [`model`]: the pure session model (events, surface, transcript inputs,
//!   request header, crash repair, fork rules). No files, no FUSE.
//! - [`store`]: the on-disk formats (JSONL, zstd JSONL, SQLite) turned into
//!   logical events, and fork children written back. No FUSE.
//! - [`catalog`]: store listings as the root's index entries show them
//!   (`sessions.jsonl`), reading no log.
//! - [`view`]: one session's indexed state and the bytes of its generated files.
//! - [`fs`]: the filesystem model (inodes, lookups, reads, control files), with
//!   errors that carry an errno and a sentence.
//! - [`fuse_adapter`]: the thin fuser adapter; [`fuse_device`]: why `/dev/fuse`
//!   cannot be opened, said before mounting.

pub mod bytes;
pub mod catalog;
pub mod cli;
pub mod error;
pub mod fs;
pub mod fuse_adapter;
pub mod fuse_device;
pub mod json;
pub mod json_len;
pub mod model;
pub mod mountinfo;
pub mod random;
pub mod render;
pub mod store;
pub mod view;
