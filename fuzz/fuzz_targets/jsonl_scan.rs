//! The JSONL record scanner (spec §10.4, §10.5) and everything a raw session
//! log feeds: the input is written as `session.jsonl` in a scratch store (at
//! the path its header names, so the identity check passes) and read through
//! `JsonlStore` as the mount reads it.
//!
//! Checks: nothing panics; every scanned event fetches back identically; a scan
//! resumed at its returned point continues it exactly; a readable session
//! renders header, surface, transcript and index; applying its repair plan
//! leaves a session that loads with nothing torn and no turn open.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sessionfs_fuzz::{check_jsonl_session, header_of, scratch, write_session};

fuzz_target!(|data: &[u8]| {
    let root = scratch("jsonl_scan").join("store");
    let first_line = data.split(|b| *b == b'\n').next().unwrap_or_default();
    let path = write_session(&root, header_of(first_line).as_ref(), false, data);
    check_jsonl_session(&root, &path);
});
