//! The zstd container of a `session.jsonl.zstd` artifact (spec §10.6): a plain
//! concatenation of standard frames, scanned structurally (nothing is
//! decompressed) so that a torn final frame is told apart from corruption.

use std::io::{self, Read};
use std::ops::ControlFlow;
use std::sync::mpsc;

/// The magic number that starts every zstd frame (little-endian on disk).
pub const FRAME_MAGIC: u32 = 0xFD2F_B528;

/// The largest plaintext one frame may decode to. A frame that claims or yields
/// more is refused rather than allowed to exhaust memory.
pub const MAX_FRAME_PLAINTEXT: usize = 64 << 20;

/// The most stored bytes one frame may take: its plaintext limit plus room for
/// block headers. A longer frame cannot decode within the limit and is refused
/// before it is held in memory.
pub const MAX_FRAME_BYTES: usize = MAX_FRAME_PLAINTEXT + (MAX_FRAME_PLAINTEXT >> 4);

/// One step of the structural scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameScan {
    /// A complete frame of this many bytes starts here.
    Complete(usize),
    /// The bytes from here to the end are an incomplete (torn) frame.
    Torn,
    /// The bytes here are not a zstd frame.
    Corrupt(String),
}

/// Scans the frame starting at `bytes[0]`.
pub fn scan_frame(bytes: &[u8]) -> FrameScan {
    if bytes.len() < 4 {
        return FrameScan::Torn;
    }
    let magic = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    if magic != FRAME_MAGIC {
        return FrameScan::Corrupt(format!("invalid frame magic {magic:#010x}"));
    }
    let Some(&descriptor) = bytes.get(4) else {
        return FrameScan::Torn;
    };
    if descriptor & 0x18 != 0 {
        return FrameScan::Corrupt(format!(
            "reserved bits set in frame header descriptor {descriptor:#04x}"
        ));
    }
    let single_segment = descriptor & 0x20 != 0;
    let dictionary_bytes = [0, 1, 2, 4][(descriptor & 0x03) as usize];
    let content_size_bytes = match descriptor >> 6 {
        0 if single_segment => 1,
        0 => 0,
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let header_len = 5 + usize::from(!single_segment) + dictionary_bytes + content_size_bytes;
    if bytes.len() < header_len {
        return FrameScan::Torn;
    }
    let mut at = header_len;
    loop {
        let Some(block_header) = bytes.get(at..at + 3) else {
            return FrameScan::Torn;
        };
        let raw = u32::from(block_header[0])
            | u32::from(block_header[1]) << 8
            | u32::from(block_header[2]) << 16;
        let last = raw & 1 != 0;
        let block_type = (raw >> 1) & 3;
        let size = (raw >> 3) as usize;
        let payload = match block_type {
            0 | 2 => size,
            1 => 1,
            _ => return FrameScan::Corrupt(format!("reserved block type at frame offset {at}")),
        };
        at += 3 + payload;
        if bytes.len() < at {
            return FrameScan::Torn;
        }
        if last {
            break;
        }
    }
    if descriptor & 0x04 != 0 {
        at += 4;
        if bytes.len() < at {
            return FrameScan::Torn;
        }
    }
    FrameScan::Complete(at)
}

/// A decompression context and output buffer reused across frames: a session
/// log can hold hundreds of thousands of small frames, and a fresh context or a
/// freshly zeroed buffer per frame would dominate.
pub struct FrameDecoder {
    /// Decodes a frame in one call straight into `out`.
    whole: zstd::zstd_safe::DCtx<'static>,
    /// Decodes a frame piece by piece: what says why one call failed. Made
    /// when first needed: a header read decodes one sound frame.
    raw: Option<zstd::stream::raw::Decoder<'static>>,
    /// The buffer the next frame is decoded into; grows to the largest frame.
    out: Vec<u8>,
}

impl FrameDecoder {
    /// A fresh decoder; `Err` when zstd cannot make a context.
    pub fn new() -> Result<FrameDecoder, String> {
        Ok(FrameDecoder {
            whole: zstd::zstd_safe::DCtx::try_create().ok_or("cannot make a zstd context")?,
            raw: None,
            out: Vec::new(),
        })
    }

    /// Decompresses one complete frame, verifying its checksum.
    pub fn decode(&mut self, frame: &[u8]) -> Result<&[u8], String> {
        use zstd::zstd_safe::zstd_sys::{ZSTD_ErrorCode, ZSTD_getErrorCode};
        // In one call where the buffer holds the frame: the streaming decoder
        // copies every byte through its window (4% of a cold scan's CPU).
        loop {
            self.out.clear();
            if self.out.capacity() == 0 {
                self.out.reserve(64 << 10);
            }
            match self.whole.decompress(&mut self.out, frame) {
                Ok(len) if len <= MAX_FRAME_PLAINTEXT => return Ok(&self.out[..len]),
                // Past the limit (the buffer may have grown past it refusing
                // a frame before): refused as the streaming decoder refuses it.
                Ok(_) => return self.decode_in_pieces(frame),
                // SAFETY: ZSTD_getErrorCode only reads the code it is given.
                Err(code)
                    if unsafe { ZSTD_getErrorCode(code) }
                        == ZSTD_ErrorCode::ZSTD_error_dstSize_tooSmall
                        && self.out.capacity() < MAX_FRAME_PLAINTEXT =>
                {
                    let grown = (self.out.capacity() * 2).min(MAX_FRAME_PLAINTEXT);
                    self.out.reserve_exact(grown);
                }
                Err(_) => return self.decode_in_pieces(frame),
            }
        }
    }

    /// Decompresses one complete frame through the streaming decoder, which
    /// names what is wrong with a frame that does not decode.
    fn decode_in_pieces(&mut self, frame: &[u8]) -> Result<&[u8], String> {
        use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
        let raw = match &mut self.raw {
            Some(raw) => {
                raw.reinit().map_err(|e| e.to_string())?;
                raw
            }
            None => self
                .raw
                .insert(zstd::stream::raw::Decoder::new().map_err(|e| e.to_string())?),
        };
        let mut input = InBuffer::around(frame);
        let mut len = 0;
        loop {
            if self.out.len() - len < 64 << 10 {
                let grown = (self.out.len() * 2).max(len + (64 << 10));
                self.out.resize(grown, 0);
            }
            let mut output = OutBuffer::around(&mut self.out[len..]);
            let remaining = raw
                .run(&mut input, &mut output)
                .map_err(|e| e.to_string())?;
            let produced = output.pos();
            len += produced;
            if len > MAX_FRAME_PLAINTEXT {
                return Err(format!(
                    "frame decodes to more than {MAX_FRAME_PLAINTEXT} bytes"
                ));
            }
            if remaining == 0 {
                return if input.pos() == frame.len() {
                    Ok(&self.out[..len])
                } else {
                    Err("bytes follow the end of the frame".into())
                };
            }
            if input.pos() == frame.len() && produced == 0 {
                return Err("the frame ends before its content does".into());
            }
        }
    }
}

/// Decompresses one complete frame, verifying its checksum.
pub fn decode_frame(frame: &[u8]) -> Result<Vec<u8>, String> {
    FrameDecoder::new()?.decode(frame).map(<[u8]>::to_vec)
}

/// Reads a zstd artifact frame by frame, holding one frame in memory at a time.
pub struct FrameReader<R> {
    source: R,
    buffer: Vec<u8>,
    start: usize,
    eof: bool,
}

/// The next piece of an artifact.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A complete frame's bytes.
    Complete(&'a [u8]),
    /// The bytes from here to the end are an incomplete final frame.
    Torn(&'a [u8]),
    /// The bytes here are not a zstd frame, or one too long to accept.
    Corrupt(String),
    /// No bytes are left.
    End,
}

impl<R: Read> FrameReader<R> {
    /// A reader of `source`'s frames, from its current position.
    pub fn new(source: R) -> FrameReader<R> {
        FrameReader {
            source,
            buffer: Vec::new(),
            start: 0,
            eof: false,
        }
    }

    /// The next frame, without decompressing it; read errors of `source` pass through.
    pub fn next_frame(&mut self) -> std::io::Result<Frame<'_>> {
        loop {
            let available = &self.buffer[self.start..];
            if available.is_empty() && self.eof {
                return Ok(Frame::End);
            }
            match scan_frame(available) {
                FrameScan::Complete(len) => {
                    let frame = self.start..self.start + len;
                    self.start += len;
                    return Ok(Frame::Complete(&self.buffer[frame]));
                }
                FrameScan::Corrupt(why) => return Ok(Frame::Corrupt(why)),
                FrameScan::Torn if self.eof => {
                    let torn = self.start..self.buffer.len();
                    self.start = self.buffer.len();
                    return Ok(Frame::Torn(&self.buffer[torn]));
                }
                FrameScan::Torn if available.len() > MAX_FRAME_BYTES => {
                    return Ok(Frame::Corrupt(format!(
                        "a frame longer than {MAX_FRAME_BYTES} bytes"
                    )));
                }
                FrameScan::Torn => {
                    // Drop consumed frames, then read more of this one. Reads grow with
                    // the frame, so a long frame is rescanned only a few times.
                    self.buffer.drain(..self.start);
                    self.start = 0;
                    let before = self.buffer.len();
                    self.buffer.resize(before + before.max(256 << 10), 0);
                    let read = self.source.read(&mut self.buffer[before..])?;
                    self.buffer.truncate(before + read);
                    self.eof = read == 0;
                }
            }
        }
    }
}

/// How reading an artifact's frames ended, when the reader did not stop it.
#[derive(Debug)]
pub enum FramesEnd {
    /// Every frame was read.
    End,
    /// A complete frame failed to decompress or verify.
    Undecodable,
    /// The bytes here are not a frame.
    Corrupt(String),
    /// An incomplete final frame: its bytes.
    Torn(Vec<u8>),
}

/// Either what the reader stopped with, or how the artifact ended.
pub enum Frames<T> {
    /// The frame callback broke with this value.
    Stopped(T),
    /// The callback never broke: how the frames ended.
    Ended(FramesEnd),
}

/// Plaintext handed from a decompressing thread to the reading one: whole
/// frames, batched so that the hand-over costs little per frame.
#[derive(Default)]
struct Batch {
    plaintext: Vec<u8>,
    /// Each frame's compressed length and the end of its plaintext.
    frames: Vec<(u64, usize)>,
    end: Option<io::Result<FramesEnd>>,
}

/// Compressed frames cut from the artifact, in order, for one decompressing
/// thread; the `end` of the artifact rides on the batch it follows.
struct Work {
    index: usize,
    compressed: Vec<u8>,
    lengths: Vec<usize>,
    end: Option<io::Result<FramesEnd>>,
}

/// Compressed bytes per batch: large enough to amortise the hand-over, small
/// enough that the few batches in flight stay in the CPU cache.
const BATCH_BYTES: usize = 128 << 10;

/// Threads that decompress batches of frames: one per core (frames are
/// independent), up to a few.
fn decoders() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, 8))
}

/// Reads the frames of `source` in order and hands each complete frame's
/// compressed length and plaintext to `frame`, until it breaks or the frames end.
/// With `ahead`, batches of frames are decompressed on one thread per core while
/// `frame` works on earlier ones, and handed over in the artifact's order: a
/// large artifact is read in the time of the slower side.
pub fn read_frames<R: Read + Send, T>(
    source: R,
    ahead: bool,
    mut frame: impl FnMut(u64, &[u8]) -> ControlFlow<T>,
) -> io::Result<Frames<T>> {
    if !ahead {
        let mut frames = FrameReader::new(source);
        let mut decoder = FrameDecoder::new().map_err(io::Error::other)?;
        loop {
            let piece = match frames.next_frame()? {
                Frame::Complete(bytes) => match decoder.decode(bytes) {
                    Ok(plaintext) => match frame(bytes.len() as u64, plaintext) {
                        ControlFlow::Break(stopped) => return Ok(Frames::Stopped(stopped)),
                        ControlFlow::Continue(()) => continue,
                    },
                    Err(_) => FramesEnd::Undecodable,
                },
                Frame::Torn(bytes) => FramesEnd::Torn(bytes.to_vec()),
                Frame::Corrupt(why) => FramesEnd::Corrupt(why),
                Frame::End => FramesEnd::End,
            };
            return Ok(Frames::Ended(piece));
        }
    }
    let decoders = decoders();
    let (work, queue) = mpsc::channel::<Work>();
    let queue = std::sync::Mutex::new(queue);
    // Buffers handed back for the next batches: a fresh one for each batch
    // faulted its pages in again (and the allocator trimmed them).
    let (spent_plaintext, spare_plaintext) = mpsc::channel::<Vec<u8>>();
    let (spent_compressed, spare_compressed) = mpsc::channel::<Vec<u8>>();
    let spare_plaintext = std::sync::Mutex::new(spare_plaintext);
    std::thread::scope(|scope| {
        // A batch in flight holds a token until it has been read: at most this
        // many are decompressed ahead of the reader, whatever the order they
        // finish in.
        let in_flight = 2 * decoders + 1;
        let (tokens, token) = mpsc::sync_channel::<()>(in_flight);
        for _ in 0..in_flight {
            let _ = tokens.send(());
        }
        let (done, decoded) = mpsc::channel::<(usize, Batch)>();
        scope.spawn(move || split_frames(source, work, token, spare_compressed));
        for _ in 0..decoders {
            let done = done.clone();
            let (queue, spare, spent) = (&queue, &spare_plaintext, spent_compressed.clone());
            scope.spawn(move || decode_batches(queue, done, spare, spent));
        }
        drop((done, spent_compressed));
        let mut waiting = std::collections::BTreeMap::new();
        for next in 0.. {
            let batch = loop {
                if let Some(batch) = waiting.remove(&next) {
                    break batch;
                }
                let Ok((index, batch)) = decoded.recv() else {
                    return Err(io::Error::other("the decompressing threads stopped"));
                };
                waiting.insert(index, batch);
            };
            let Batch {
                plaintext,
                frames,
                end,
            } = batch;
            let mut start = 0;
            for (compressed, end) in frames {
                if let ControlFlow::Break(stopped) = frame(compressed, &plaintext[start..end]) {
                    return Ok(Frames::Stopped(stopped));
                }
                start = end;
            }
            if let Some(end) = end {
                return end.map(Frames::Ended);
            }
            // One huge frame's buffer is not kept for the rest of the scan.
            if plaintext.capacity() <= 8 * BATCH_BYTES {
                let _ = spent_plaintext.send(plaintext);
            }
            let _ = tokens.send(());
        }
        unreachable!("batches are numbered without end")
    })
}

/// Cuts the artifact into batches of whole compressed frames (a structural scan,
/// nothing decompressed); stops when the reading side hangs up.
fn split_frames<R: Read>(
    source: R,
    work: mpsc::Sender<Work>,
    token: mpsc::Receiver<()>,
    spare: mpsc::Receiver<Vec<u8>>,
) {
    let mut frames = FrameReader::new(source);
    for index in 0.. {
        if token.recv().is_err() {
            return;
        }
        let compressed = match spare.try_recv() {
            Ok(mut spare) => {
                spare.clear();
                spare
            }
            Err(_) => Vec::with_capacity(BATCH_BYTES + (BATCH_BYTES >> 2)),
        };
        let mut batch = Work {
            index,
            compressed,
            lengths: Vec::new(),
            end: None,
        };
        while batch.end.is_none() && batch.compressed.len() < BATCH_BYTES {
            match frames.next_frame() {
                Ok(Frame::Complete(bytes)) => {
                    batch.compressed.extend_from_slice(bytes);
                    batch.lengths.push(bytes.len());
                }
                Ok(Frame::Torn(bytes)) => batch.end = Some(Ok(FramesEnd::Torn(bytes.to_vec()))),
                Ok(Frame::Corrupt(why)) => batch.end = Some(Ok(FramesEnd::Corrupt(why))),
                Ok(Frame::End) => batch.end = Some(Ok(FramesEnd::End)),
                Err(e) => batch.end = Some(Err(e)),
            }
        }
        let last = batch.end.is_some();
        if work.send(batch).is_err() || last {
            return;
        }
    }
}

/// One decompressing thread: takes the next batch of frames, decompresses it,
/// hands it back; stops when the batches end or the reading side hangs up. A
/// frame that does not decompress ends its batch, and the artifact with it.
fn decode_batches(
    queue: &std::sync::Mutex<mpsc::Receiver<Work>>,
    done: mpsc::Sender<(usize, Batch)>,
    spare: &std::sync::Mutex<mpsc::Receiver<Vec<u8>>>,
    spent: mpsc::Sender<Vec<u8>>,
) {
    let mut decoder = FrameDecoder::new();
    loop {
        let next = crate::sync::lock(queue).recv();
        let Ok(work) = next else { return };
        let mut batch = Batch::default();
        if let Ok(mut plaintext) = crate::sync::lock(spare).try_recv() {
            plaintext.clear();
            batch.plaintext = plaintext;
        }
        match &mut decoder {
            Err(why) => batch.end = Some(Err(io::Error::other(why.clone()))),
            Ok(decoder) => {
                let mut start = 0;
                for &len in &work.lengths {
                    let bytes = &work.compressed[start..start + len];
                    start += len;
                    match decoder.decode(bytes) {
                        Ok(plaintext) => {
                            batch.plaintext.extend_from_slice(plaintext);
                            batch.frames.push((len as u64, batch.plaintext.len()));
                        }
                        Err(_) => {
                            batch.end = Some(Ok(FramesEnd::Undecodable));
                            break;
                        }
                    }
                }
            }
        }
        if batch.end.is_none() {
            batch.end = work.end;
        }
        let _ = spent.send(work.compressed);
        if done.send((work.index, batch)).is_err() {
            return;
        }
    }
}

/// Decodes as much of a torn final frame as its complete blocks allow (spec §10.6
/// step 5): a flush, not a finish, so a missing end or checksum is not an error.
pub fn decode_torn_frame(frame: &[u8]) -> Vec<u8> {
    use zstd::stream::raw::{Decoder, InBuffer, Operation, OutBuffer};
    let Ok(mut decoder) = Decoder::new() else {
        return Vec::new();
    };
    let mut input = InBuffer::around(frame);
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 128 << 10];
    loop {
        let mut output = OutBuffer::around(&mut chunk[..]);
        match decoder.run(&mut input, &mut output) {
            Ok(_) => {
                let produced = output.pos();
                out.extend_from_slice(&chunk[..produced]);
                if out.len() > MAX_FRAME_PLAINTEXT {
                    out.truncate(MAX_FRAME_PLAINTEXT);
                    return out;
                }
                if produced == 0 && input.pos() == frame.len() {
                    return out;
                }
                if produced == 0 && input.pos() < frame.len() {
                    continue;
                }
            }
            Err(_) => return out,
        }
    }
}

/// Encodes one frame as the Harness does: level 3, content checksum on.
pub fn encode_frame(plaintext: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = zstd::bulk::Compressor::new(3)?;
    encoder.include_checksum(true)?;
    encoder.include_contentsize(false)?;
    encoder.compress(plaintext)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything `read_frames` reports: each frame's length and plaintext, then the end.
    fn read_all(artifact: &[u8], ahead: bool, stop_after: usize) -> (Vec<(u64, Vec<u8>)>, String) {
        let mut seen = Vec::new();
        let read = read_frames(artifact, ahead, |len, plaintext| {
            seen.push((len, plaintext.to_vec()));
            match seen.len() == stop_after {
                true => ControlFlow::Break(seen.len()),
                false => ControlFlow::Continue(()),
            }
        })
        .unwrap();
        let end = match read {
            Frames::Stopped(n) => format!("stopped after {n}"),
            Frames::Ended(end) => format!("{end:?}"),
        };
        (seen, end)
    }

    #[test]
    fn reading_ahead_gives_what_reading_in_turn_gives() {
        // Frames of varied sizes that compress poorly, so that they fill many
        // batches and the decompressing threads finish them out of order.
        let mut artifact = Vec::new();
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for k in 0..4000usize {
            let pad: String = (0..k % 700)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1);
                    char::from(b'a' + (state >> 59) as u8)
                })
                .collect();
            let line = format!("{{\"k\":{k},\"pad\":\"{pad}\"}}\n");
            artifact.extend(encode_frame(line.as_bytes()).unwrap());
        }
        let whole = artifact.len();
        let mut corrupt_middle = artifact.clone();
        corrupt_middle[whole / 2] ^= 0x55;
        let torn_end = artifact[..whole - 7].to_vec();
        let mut not_a_frame = artifact.clone();
        not_a_frame.extend(b"garbage that is no frame");
        for (name, bytes) in [
            ("whole", &artifact),
            ("corrupt", &corrupt_middle),
            ("torn", &torn_end),
            ("trailing", &not_a_frame),
        ] {
            for stop_after in [usize::MAX, 1, 2500] {
                let in_turn = read_all(bytes, false, stop_after);
                let ahead = read_all(bytes, true, stop_after);
                assert_eq!(in_turn.1, ahead.1, "{name}, stop after {stop_after}");
                assert!(
                    in_turn.0 == ahead.0,
                    "{name}, stop after {stop_after}: frames differ"
                );
            }
        }
        assert_eq!(read_all(&artifact, true, usize::MAX).0.len(), 4000);
        assert!(
            read_all(&corrupt_middle, true, usize::MAX)
                .1
                .contains("Undecodable")
                || read_all(&corrupt_middle, true, usize::MAX)
                    .1
                    .contains("Corrupt")
        );
        assert!(read_all(&torn_end, true, usize::MAX).1.starts_with("Torn"));
    }

    /// The one-call decoder against the streaming one it stands in for, on
    /// frames of many sizes (some past the buffer it has grown to) and on
    /// the same frames damaged: the same bytes, or an error from both.
    #[test]
    fn decoding_in_one_call_gives_what_decoding_in_pieces_gives() {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut whole, mut pieces) = (FrameDecoder::new().unwrap(), FrameDecoder::new().unwrap());
        let (mut decoded, mut refused) = (0, 0);
        for case in 0..600 {
            let len = match case % 4 {
                0 => (next() % 200) as usize,
                1 => (next() % 70_000) as usize,
                2 => (next() % 600_000) as usize,
                _ => (next() % 3_000_000) as usize,
            };
            let text: Vec<u8> = (0..len)
                .map(|_| b"ab\n{}\"x"[(next() % 7) as usize])
                .collect();
            let mut frame = encode_frame(&text).unwrap();
            if case % 3 == 1 {
                let at = (next() as usize) % frame.len();
                frame[at] ^= 1 << (next() % 8);
            }
            let one = whole.decode(&frame).map(<[u8]>::to_vec);
            let other = pieces.decode_in_pieces(&frame).map(<[u8]>::to_vec);
            assert_eq!(one, other, "case {case}, {len} bytes");
            if let Ok(bytes) = one {
                decoded += 1;
                if case % 3 != 1 {
                    assert!(bytes == text, "case {case}");
                }
            } else {
                refused += 1;
            }
        }
        assert!(
            decoded > 300 && refused > 50,
            "{decoded} decoded, {refused} refused"
        );
    }

    #[test]
    fn scans_encodes_and_decodes_frames() {
        let frame = encode_frame(b"hello\n").unwrap();
        assert_eq!(
            frame[4], 0x04,
            "checksum on, no content size, as the Harness writes"
        );
        assert_eq!(scan_frame(&frame), FrameScan::Complete(frame.len()));
        assert_eq!(decode_frame(&frame).unwrap(), b"hello\n");
        for cut in 0..frame.len() {
            assert_eq!(scan_frame(&frame[..cut]), FrameScan::Torn, "cut at {cut}");
        }
        assert!(matches!(scan_frame(b"abcdefgh"), FrameScan::Corrupt(_)));
        let mut skippable = 0x184D2A50u32.to_le_bytes().to_vec();
        skippable.extend([0, 0, 0, 0]);
        assert!(matches!(scan_frame(&skippable), FrameScan::Corrupt(_)));
    }

    #[test]
    fn the_reader_yields_frames_then_the_torn_rest() {
        let mut bytes = encode_frame(b"one\n").unwrap();
        let second = encode_frame(&vec![b'x'; 300_000]).unwrap();
        bytes.extend(&second);
        bytes.extend(&encode_frame(b"three\n").unwrap()[..5]);
        let mut reader = FrameReader::new(&bytes[..]);
        let mut decoder = FrameDecoder::new().unwrap();
        let Frame::Complete(first) = reader.next_frame().unwrap() else {
            panic!("first frame")
        };
        assert_eq!(decoder.decode(first).unwrap(), b"one\n");
        let Frame::Complete(big) = reader.next_frame().unwrap() else {
            panic!("second frame")
        };
        assert_eq!(decoder.decode(big).unwrap().len(), 300_000);
        assert!(matches!(reader.next_frame().unwrap(), Frame::Torn(rest) if rest.len() == 5));
        assert_eq!(reader.next_frame().unwrap(), Frame::End);
    }

    #[test]
    fn a_bad_checksum_fails_and_a_torn_frame_yields_complete_blocks() {
        let mut frame = encode_frame(&vec![b'a'; 1000]).unwrap();
        let last = frame.len() - 4;
        frame[last] ^= 1;
        assert!(decode_frame(&frame).is_err());
        let text: Vec<u8> = (0..400_000u32)
            .flat_map(|i| format!("{i}\n").into_bytes())
            .collect();
        let big = encode_frame(&text).unwrap();
        let torn = &big[..big.len() / 2];
        assert_eq!(scan_frame(torn), FrameScan::Torn);
        let partial = decode_torn_frame(torn);
        assert!(!partial.is_empty() && partial.len() < text.len());
        assert_eq!(&text[..partial.len()], &partial[..]);
    }
}
