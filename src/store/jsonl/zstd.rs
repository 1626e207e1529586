//! Scanning and fetching a `session.jsonl.zstd` (spec §10.6): checksummed
//! frames, each holding whole lines; a defect inside a complete frame is
//! damage, and only the last frame may be torn.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::record::{LineScanner, LineStop};
use super::{
    DECODE_AHEAD_BYTES, JsonlStore, MAX_HEADER_BYTES, check_not_shorter, corrupt, io_refusal,
};
use crate::model::Refusal;
use crate::store::lines::{newline, split_lines};
use crate::store::tail::TailScanner;
use crate::store::zstd_frames::{
    Frame, FrameReader, FrameScan, Frames, FramesEnd, decode_frame, decode_torn_frame, read_frames,
    scan_frame,
};
use crate::store::{EventLoc, EventSink, ScanEnd, ScanPoint};
use crate::sync::lock;

pub(super) struct CachedFrame {
    path: PathBuf,
    offset: u64,
    plaintext: Arc<Vec<u8>>,
}

impl JsonlStore {
    pub(super) fn scan_zstd(
        &self,
        path: &Path,
        from: &ScanPoint,
        sink: &mut EventSink,
    ) -> Result<(ScanPoint, ScanEnd), Refusal> {
        let mut file = File::open(path).map_err(|e| io_refusal(path, e))?;
        let stated = check_not_shorter(path, &file, from)?;
        let mut here = from.offset;
        let mut frames = from.frames;
        if frames == 0 {
            match FrameReader::new(&mut file)
                .next_frame()
                .map_err(|e| io_refusal(path, e))?
            {
                Frame::Complete(frame) => {
                    decode_header_frame(frame).map_err(|why| corrupt(path, why))?;
                    here += frame.len() as u64;
                    frames = 1;
                }
                _ => {
                    return Err(corrupt(
                        path,
                        "corrupt Zstandard session log: empty or header-less Zstandard session log",
                    ));
                }
            }
        }
        file.seek(SeekFrom::Start(here))
            .map_err(|e| io_refusal(path, e))?;
        let unread = stated.saturating_sub(here);
        let mut scanner = LineScanner {
            tail: TailScanner::strict(from.events),
            line_number: from.plain,
            sink,
            path,
        };
        let read = read_frames(file, unread >= DECODE_AHEAD_BYTES, |compressed, plaintext| {
            let torn_record = || {
                corrupt(
                    path,
                    format!(
                        "corrupt Zstandard session log: complete frame at byte {here} contains a torn JSONL record"
                    ),
                )
            };
            let Some(body) = plaintext.strip_suffix(b"\n") else {
                return ControlFlow::Break(torn_record());
            };
            let mut within = 0usize;
            for line in split_lines(body) {
                let loc = EventLoc {
                    record: here,
                    within: within as u32,
                    member: 0,
                };
                match scanner.line(line, loc) {
                    Ok(_) => {}
                    // In a checksummed frame, a line that does not decode or
                    // continue the log was written so: the frame is damage.
                    Err(LineStop::Defect(_)) => return ControlFlow::Break(torn_record()),
                    Err(LineStop::Refused(refusal)) => return ControlFlow::Break(refusal),
                }
                within += line.len() + 1;
            }
            here += compressed;
            frames += 1;
            ControlFlow::Continue(())
        })
        .map_err(|e| io_refusal(path, e))?;
        let committed = ScanPoint {
            events: scanner.tail.next_seq(),
            offset: here,
            plain: scanner.line_number,
            frames,
        };
        match read {
            Frames::Stopped(refusal) => Err(refusal),
            Frames::Ended(FramesEnd::End) if here < stated => Ok((committed, ScanEnd::ShortRead)),
            Frames::Ended(FramesEnd::End) => Ok((committed, ScanEnd::Complete)),
            Frames::Ended(FramesEnd::Corrupt(why)) => Err(corrupt(
                path,
                format!("corrupt Zstandard session log: {why} at byte {here}"),
            )),
            Frames::Ended(FramesEnd::Undecodable) => Err(corrupt(
                path,
                format!("corrupt Zstandard session log: frame at byte {here} failed validation"),
            )),
            Frames::Ended(FramesEnd::Torn(bytes)) => {
                let plaintext = decode_torn_frame(&bytes);
                let mut lenient = LineScanner {
                    tail: TailScanner::new(scanner.tail.next_seq()),
                    line_number: scanner.line_number,
                    sink: scanner.sink,
                    path,
                };
                let mut within = 0usize;
                let mut rest = &plaintext[..];
                while let Some(end) = newline(rest) {
                    let loc = EventLoc {
                        record: here,
                        within: within as u32,
                        member: 0,
                    };
                    lenient
                        .line(&rest[..end], loc)
                        .map_err(|stop| stop.refusal(path))?;
                    within += end + 1;
                    rest = &rest[end + 1..];
                }
                // Events recovered from the torn frame are shown, but the next scan
                // starts again at the torn frame: it may still be being written.
                Ok((
                    committed,
                    ScanEnd::Torn {
                        at: format!("byte {here} (an incomplete final frame)"),
                    },
                ))
            }
        }
    }

    /// The stored line at `loc`, read again from its frame's plaintext.
    pub(super) fn zstd_line(&self, path: &Path, loc: EventLoc) -> Result<Vec<u8>, Refusal> {
        let plaintext = self.frame_plaintext(path, loc.record)?;
        let start = (loc.within as usize).min(plaintext.len());
        let end = newline(&plaintext[start..]).map_or(plaintext.len(), |n| start + n);
        Ok(plaintext[start..end].to_vec())
    }

    /// The plaintext of the frame starting at `offset` (complete or torn), cached.
    fn frame_plaintext(&self, path: &Path, offset: u64) -> Result<Arc<Vec<u8>>, Refusal> {
        let mut cache = lock(&self.frame_cache);
        if let Some(cached) = cache.as_ref()
            && cached.path == path
            && cached.offset == offset
        {
            return Ok(cached.plaintext.clone());
        }
        let mut file = File::open(path).map_err(|e| io_refusal(path, e))?;
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| io_refusal(path, e))?;
        let mut reader = FrameReader::new(file);
        let plaintext = match reader.next_frame().map_err(|e| io_refusal(path, e))? {
            Frame::Complete(frame) => {
                Arc::new(decode_frame(frame).map_err(|why| corrupt(path, why))?)
            }
            Frame::Torn(bytes) => Arc::new(decode_torn_frame(bytes)),
            Frame::Corrupt(why) => return Err(corrupt(path, why)),
            Frame::End => return Err(corrupt(path, format!("no frame at byte {offset}"))),
        };
        *cache = Some(CachedFrame {
            path: path.to_path_buf(),
            offset,
            plaintext: plaintext.clone(),
        });
        Ok(plaintext)
    }
}

/// Reads only the first frame, in 8 KiB steps, and applies the header-frame rule.
pub(super) fn read_zstd_header(path: &Path) -> Result<Vec<u8>, String> {
    let mut file = File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 8 << 10];
    loop {
        match scan_frame(&bytes) {
            FrameScan::Complete(len) => return decode_header_frame(&bytes[..len]),
            FrameScan::Corrupt(why) => {
                return Err(format!("first frame is not a zstd frame: {why}"));
            }
            FrameScan::Torn if bytes.len() > MAX_HEADER_BYTES => {
                return Err("first frame is larger than a header frame can be".into());
            }
            FrameScan::Torn => {
                let n = file
                    .read(&mut chunk)
                    .map_err(|e| format!("cannot read: {e}"))?;
                if n == 0 {
                    return Err("empty or header-less Zstandard session log (the first frame is incomplete)".into());
                }
                bytes.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

/// Frame 0 holds exactly the header line and its newline.
pub(super) fn decode_header_frame(frame: &[u8]) -> Result<Vec<u8>, String> {
    let mut plaintext = decode_frame(frame).map_err(|_| {
        "corrupt Zstandard session log: frame at byte 0 failed validation".to_string()
    })?;
    if plaintext.last() != Some(&b'\n') || plaintext.iter().filter(|b| **b == b'\n').count() != 1 {
        return Err(
            "corrupt Zstandard session log: first frame is not exactly one header line".into(),
        );
    }
    plaintext.pop();
    Ok(plaintext)
}
