//! The zstd frame scanner and the JSONL scanner behind it (spec §10.6): the
//! input becomes a `session.jsonl.zstd` in a scratch store and is read through
//! `JsonlStore`. The first byte picks the shape:
//!
//! - even: the rest is the file, bytes as they are (frame structure, checksums,
//!   torn frames, garbage);
//! - odd: the rest is JSONL plaintext, compressed the Harness's way (the header
//!   line alone in frame 0, then frames cut at the lines' `\x1e` markers), and
//!   then the file is cut short when the second byte says so, so that torn
//!   final frames carry real records.
//!
//! Checks: as `jsonl_scan` (no panic, fetch agrees with scan, resumed scans
//! continue, readable sessions render, repairs leave a clean log).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sessionfs::store::zstd_frames::encode_frame;
use sessionfs::store::zstd_frames::{FrameScan, decode_frame, scan_frame};
use sessionfs_fuzz::{check_jsonl_session, header_of, scratch, write_session};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let root = scratch("zstd_scan").join("store");
    let bytes = if mode & 1 == 0 {
        rest.to_vec()
    } else {
        let Some((&cut, plain)) = rest.split_first() else {
            return;
        };
        let header_end = plain
            .iter()
            .position(|b| *b == b'\n')
            .map_or(plain.len(), |n| n + 1);
        let mut file = encode_frame(&plain[..header_end]).expect("zstd encodes");
        for batch in plain[header_end..].split(|b| *b == 0x1e) {
            if !batch.is_empty() {
                file.extend(encode_frame(batch).expect("zstd encodes"));
            }
        }
        if cut != 0 {
            let keep = file.len() - (usize::from(cut) % file.len().max(1)).min(file.len());
            file.truncate(keep);
        }
        file
    };
    let header = match scan_frame(&bytes) {
        FrameScan::Complete(len) => decode_frame(&bytes[..len]).ok().and_then(|plain| {
            let line = plain.strip_suffix(b"\n")?.to_vec();
            header_of(&line)
        }),
        _ => None,
    };
    let path = write_session(&root, header.as_ref(), true, &bytes);
    check_jsonl_session(&root, &path);
});
