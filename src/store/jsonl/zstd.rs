//! Scanning and fetching a `session.jsonl.zstd` (spec §10.6): checksummed
//! frames, each holding whole lines; a defect inside a complete frame is
//! damage, and only the last frame may be torn.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::record::{LineScanner, LineStop, RecordError, decode_events, decode_record};
use super::{
    DECODE_AHEAD_BYTES, JsonlStore, MAX_HEADER_BYTES, check_not_shorter, corrupt, io_refusal,
};
use crate::model::chunk_rows::JSONL_ROW_LIMITS;
use crate::model::{ChunkRun, ChunkStep, Refusal, quick};
use crate::store::tail::{Decoded, TailScanner};
use crate::store::zstd_frames::{
    Frame, FrameReader, FrameScan, Frames, FramesEnd, Prepare, decode_frame, decode_torn_frame,
    read_frames, scan_frame,
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
        let ahead = unread >= DECODE_AHEAD_BYTES;
        let read = read_frames(file, ahead, |compressed, plaintext, quick: &mut QuickLines| {
            let torn_record = || {
                corrupt(
                    path,
                    format!(
                        "corrupt Zstandard session log: complete frame at byte {here} contains a torn JSONL record"
                    ),
                )
            };
            let Some(lines) = frame_lines(plaintext) else {
                return ControlFlow::Break(torn_record());
            };
            let mut within = 0usize;
            for line in lines {
                let loc = EventLoc {
                    record: here,
                    within: within as u32,
                    member: 0,
                };
                match scanner.decoded(quick.decode(line), loc) {
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
                while let Some(newline) = rest.iter().position(|b| *b == b'\n') {
                    let loc = EventLoc {
                        record: here,
                        within: within as u32,
                        member: 0,
                    };
                    lenient
                        .line(&rest[..newline], loc)
                        .map_err(|stop| stop.refusal(path))?;
                    within += newline + 1;
                    rest = &rest[newline + 1..];
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
        let end = plaintext[start..]
            .iter()
            .position(|b| *b == b'\n')
            .map_or(plaintext.len(), |n| start + n);
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

/// A complete frame's lines, without their newlines; `None` when the frame does
/// not end with one (it holds a torn record).
fn frame_lines(plaintext: &[u8]) -> Option<impl Iterator<Item = &[u8]>> {
    Some(plaintext.strip_suffix(b"\n")?.split(|b| *b == b'\n'))
}

/// The streamed chunks among a batch's lines, read quickly (`model::quick`) by
/// the thread that decompressed them; the reader decodes the other lines in
/// full. Kept flat, so that preparing a batch makes a few allocations, which
/// the reading thread frees, rather than a few per line.
#[derive(Default)]
struct QuickLines {
    /// Each line's run in the order read, or `None` for a line read in full.
    lines: Vec<Option<QuickRun>>,
    /// The runs' members' times and sizes, run after run.
    times: Vec<i64>,
    sizes: Vec<u64>,
    /// The line and the member the reader takes next.
    next_line: usize,
    next_member: usize,
}

#[derive(Clone, Copy)]
struct QuickRun {
    seq0: u64,
    step: ChunkStep,
    members: usize,
}

impl Prepare for QuickLines {
    fn frame(&mut self, plaintext: &[u8]) {
        // A frame with a torn record stops the reader before its first line.
        let Some(lines) = frame_lines(plaintext) else {
            return;
        };
        for line in lines {
            let run = quick::jsonl_record(line, JSONL_ROW_LIMITS).map(|run| {
                self.times.extend_from_slice(&run.times);
                self.sizes.extend_from_slice(&run.sizes);
                QuickRun {
                    seq0: run.seq0,
                    step: run.step,
                    members: run.times.len(),
                }
            });
            self.lines.push(run);
        }
    }
}

impl QuickLines {
    /// The next line of the prepared frames, decoded as `decode_record` does.
    fn decode(&mut self, line: &[u8]) -> Result<Decoded, RecordError> {
        let Some(prepared) = self.lines.get(self.next_line).copied() else {
            // Every line the reader takes was prepared, cut by `frame_lines`
            // from the same plaintext; this only keeps a slip from misreading.
            debug_assert!(false, "a line the decompressing thread did not prepare");
            return decode_record(line);
        };
        self.next_line += 1;
        let Some(run) = prepared else {
            return decode_events(line).map(Decoded::Events);
        };
        let members = self.next_member..self.next_member + run.members;
        self.next_member = members.end;
        Ok(Decoded::Chunks(ChunkRun {
            seq0: run.seq0,
            times: self.times[members.clone()].to_vec(),
            sizes: self.sizes[members].to_vec(),
            step: run.step,
        }))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::zstd_frames::encode_frame;

    /// Every line of every fixture log, and lines the quick readers refuse.
    fn fixture_lines() -> Vec<Vec<u8>> {
        fn walk(dir: &Path, lines: &mut Vec<Vec<u8>>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, lines);
                } else if path.extension().is_some_and(|e| e == "jsonl") {
                    let text = std::fs::read(&path).unwrap();
                    lines.extend(text.split(|b| *b == b'\n').map(<[u8]>::to_vec));
                }
            }
        }
        let mut lines = Vec::new();
        walk(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"),
            &mut lines,
        );
        lines.extend(
            [
                "null",
                "[1]",
                "{\"type\":\"assistant/chunk\",",
                "{\"type\":\"text-chunks\",\"seq0\":1}",
                "",
            ]
            .map(|line| line.as_bytes().to_vec()),
        );
        lines
    }

    /// What `read_frames` hands the reader for each line, prepared ahead or in turn.
    fn decoded_lines(artifact: &[u8], ahead: bool) -> Vec<String> {
        let mut seen = Vec::new();
        read_frames(artifact, ahead, |_, plaintext, quick: &mut QuickLines| {
            for line in frame_lines(plaintext).unwrap() {
                seen.push(format!("{:?}", quick.decode(line)));
            }
            ControlFlow::<()>::Continue(())
        })
        .unwrap();
        seen
    }

    #[test]
    fn lines_prepared_where_they_were_decompressed_decode_as_a_line_read_alone() {
        let lines = fixture_lines();
        let quick_lines = lines
            .iter()
            .filter(|line| quick::jsonl_record(line, JSONL_ROW_LIMITS).is_some())
            .count();
        assert!(quick_lines > 100, "the fixtures hold streamed chunks");
        // Frames of one to five lines, repeated until several batches fill up.
        let mut artifact = Vec::new();
        let mut alone = Vec::new();
        let mut at = 0;
        while artifact.len() < 3 << 20 {
            let take = 1 + at % 5;
            let mut frame = Vec::new();
            for k in 0..take {
                let line = &lines[(at + k) % lines.len()];
                frame.extend_from_slice(line);
                frame.push(b'\n');
                alone.push(format!("{:?}", decode_record(line)));
            }
            artifact.extend(encode_frame(&frame).unwrap());
            at += take;
        }
        assert_eq!(decoded_lines(&artifact, false), alone);
        assert_eq!(decoded_lines(&artifact, true), alone);
    }
}
