//! The schema-17 `source_event_seqs` column decoder (spec §11.3): a LEB128
//! varint of the first seq, then zigzag varints of the differences
//! (`decode_source_seqs`), and its encoder.
//!
//! Checks: nothing panics; decoded seqs are safe integers; the encoding is
//! canonical, so a BLOB that decodes re-encodes to the same bytes; and seqs
//! read from the input as u64s (clamped to the safe range) encode and decode
//! back to themselves.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sessionfs::json::MAX_SAFE_INTEGER;
use sessionfs::store::sqlite::{decode_source_seqs, encode_source_seqs};

fuzz_target!(|data: &[u8]| {
    match decode_source_seqs(data) {
        Ok(seqs) => {
            assert!(seqs.iter().all(|s| *s <= MAX_SAFE_INTEGER as u64));
            assert_eq!(
                encode_source_seqs(&seqs),
                data,
                "a decodable BLOB is not canonical"
            );
        }
        Err(why) => assert!(!why.is_empty()),
    }
    let seqs: Vec<u64> = data
        .chunks(8)
        .map(|c| {
            let mut bytes = [0u8; 8];
            bytes[..c.len()].copy_from_slice(c);
            // Mostly small seqs, sometimes the whole safe range.
            let v = u64::from_le_bytes(bytes);
            if v & 1 == 0 {
                (v >> 1) % 4096
            } else {
                (v >> 1) % (MAX_SAFE_INTEGER as u64 + 1)
            }
        })
        .collect();
    assert_eq!(decode_source_seqs(&encode_source_seqs(&seqs)), Ok(seqs));
});
