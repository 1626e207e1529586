//! The structural zstd frame scanner and the frame decoders
//! (`sessionfs::store::zstd_frames`), on arbitrary bytes.
//!
//! Checks: nothing panics or runs away; `Complete(n)` never exceeds the input
//! and every shorter prefix of a complete frame scans as `Torn` (a torn tail is
//! never mistaken for corruption, nor the other way round); a frame that
//! decodes yields at most `MAX_FRAME_PLAINTEXT` bytes, and its torn decode is a
//! prefix of its full decode; a torn decode is bounded too; a plaintext encoded
//! with `encode_frame` scans complete and decodes back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sessionfs::store::zstd_frames::{
    FrameScan, MAX_FRAME_PLAINTEXT, decode_frame, decode_torn_frame, encode_frame, scan_frame,
};

fuzz_target!(|data: &[u8]| {
    match scan_frame(data) {
        FrameScan::Complete(len) => {
            assert!(len <= data.len(), "Complete({len}) on {} bytes", data.len());
            for cut in [len - 1, len / 2, len.saturating_sub(4)] {
                if cut < len {
                    assert_eq!(
                        scan_frame(&data[..cut]),
                        FrameScan::Torn,
                        "a prefix of {cut} of a {len}-byte frame"
                    );
                }
            }
            let torn = decode_torn_frame(&data[..len]);
            assert!(torn.len() <= MAX_FRAME_PLAINTEXT);
            if let Ok(plain) = decode_frame(&data[..len]) {
                assert!(plain.len() <= MAX_FRAME_PLAINTEXT);
                assert!(
                    plain.starts_with(&torn),
                    "the torn decode is not a prefix of the full decode"
                );
            }
        }
        FrameScan::Torn => {
            assert!(decode_torn_frame(data).len() <= MAX_FRAME_PLAINTEXT);
        }
        FrameScan::Corrupt(why) => assert!(!why.is_empty()),
    }
    let frame = encode_frame(data).expect("zstd encodes");
    assert_eq!(scan_frame(&frame), FrameScan::Complete(frame.len()));
    assert_eq!(decode_frame(&frame).as_deref(), Ok(data));
    assert_eq!(decode_torn_frame(&frame), data);
});
