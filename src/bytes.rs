//! The bytes of a generated file, held as frozen segments shared by every
//! snapshot, then a tail. A file that only grows (the transcript of a live
//! session) is appended to without copying what was written before: a
//! snapshot costs two reference counts, and the writer's next append copies at
//! most the tail it shares with that snapshot, never the frozen segments.
//!
//! Contract (held to a plain `Vec<u8>` by `tests/bytes_segments.rs`): a
//! `Bytes` reads as the concatenation of everything appended to it, wherever
//! the segments split it; a clone is a snapshot that later appends to either
//! side never change; `len`, `slice`, `pieces` and `starts_with` answer as
//! they would on the concatenated bytes.
//!
//! An `Arc<Vec<u8>>` here is never changed while it is shared (appends go
//! through `Arc::make_mut`), so two pieces that are the same allocation hold the
//! same bytes: a prefix check skips them without reading them.

use std::ops::Range;
use std::sync::Arc;

/// The length of every frozen segment. Large enough that a 1 GiB transcript is
/// a thousand segments, small enough that copying a shared tail costs little;
/// a multiple of the page size and of the 1 MiB reads `cat` makes (`st_blksize`),
/// so such a read never spans two segments and the kernel's page cache is
/// filled segment by segment; at the allocator's mmap threshold (`main.rs`),
/// so a freed segment goes back to the system.
pub const SEGMENT: usize = 1 << 20;

/// A generated file's bytes: frozen segments shared by every snapshot, then a tail that
/// grows. A clone is a snapshot that later appends to either side never change.
#[derive(Clone, Debug, Default)]
pub struct Bytes {
    /// Never changed once frozen; the list itself is copied only when the
    /// writer freezes a segment while a snapshot shares it.
    frozen: Arc<Vec<Segment>>,
    /// The bytes after the frozen segments.
    tail: Arc<Vec<u8>>,
}

#[derive(Clone, Debug)]
struct Segment {
    /// Offset just past this segment's last byte.
    end: usize,
    bytes: Arc<Vec<u8>>,
}

/// A range of one piece of a [`Bytes`]: what a read returns, without copying
/// unless the range spans pieces.
pub struct Slice {
    piece: Arc<Vec<u8>>,
    range: Range<usize>,
}

impl Slice {
    /// The bytes of the range, borrowed from the piece.
    pub fn as_slice(&self) -> &[u8] {
        &self.piece[self.range.clone()]
    }
}

impl From<Vec<u8>> for Bytes {
    /// One piece, not copied: files rewritten rather than grown need no segments.
    fn from(bytes: Vec<u8>) -> Bytes {
        Bytes {
            frozen: Arc::default(),
            tail: Arc::new(bytes),
        }
    }
}

impl Bytes {
    fn frozen_len(&self) -> usize {
        self.frozen.last().map_or(0, |s| s.end)
    }

    /// The number of bytes, frozen segments and tail together.
    pub fn len(&self) -> usize {
        self.frozen_len() + self.tail.len()
    }

    /// True when the file holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The vector to append to. Bytes already in it must stay as they are:
    /// snapshots taken before would no longer be a prefix of the ones after.
    /// A tail of a segment or more is frozen first, so it is shared from then
    /// on and never copied again; a tail a snapshot shares is copied (about a
    /// segment at most).
    pub fn tail_mut(&mut self) -> &mut Vec<u8> {
        if self.tail.len() >= SEGMENT {
            self.freeze();
        }
        Arc::make_mut(&mut self.tail)
    }

    /// Moves the tail's whole segments into `frozen`; what passes them stays.
    fn freeze(&mut self) {
        let mut end = self.frozen_len();
        let frozen = Arc::make_mut(&mut self.frozen);
        let mut tail = std::mem::take(&mut self.tail);
        let whole = tail.len() / SEGMENT * SEGMENT;
        // The usual case: the vector becomes the segment, and only the bytes
        // past it (part of the last entry) are copied.
        if let Some(bytes) = Arc::get_mut(&mut tail).filter(|_| whole == SEGMENT) {
            self.tail = Arc::new(bytes.split_off(SEGMENT));
            bytes.shrink_to_fit();
            frozen.push(Segment {
                end: end + SEGMENT,
                bytes: tail,
            });
            return;
        }
        // Shared with a snapshot (which keeps reading it), or one entry longer
        // than a segment: copied.
        for chunk in tail[..whole].chunks(SEGMENT) {
            end += SEGMENT;
            frozen.push(Segment {
                end,
                bytes: Arc::new(chunk.to_vec()),
            });
        }
        self.tail = Arc::new(tail[whole..].to_vec());
    }

    /// Returns the tail's spare room, when no snapshot shares it.
    pub fn shrink(&mut self) {
        if let Some(tail) = Arc::get_mut(&mut self.tail) {
            tail.shrink_to_fit();
        }
    }

    /// Memory held, counting shared segments in full.
    pub fn memory(&self) -> usize {
        self.frozen.capacity() * std::mem::size_of::<Segment>()
            + self
                .frozen
                .iter()
                .map(|s| s.bytes.capacity())
                .sum::<usize>()
            + self.tail.capacity()
    }

    /// Every piece with its offset, in order.
    fn offset_pieces(&self) -> impl Iterator<Item = (usize, &Arc<Vec<u8>>)> {
        let starts = std::iter::once(0).chain(self.frozen.iter().map(|s| s.end));
        let pieces = self.frozen.iter().map(|s| &s.bytes);
        starts.zip(pieces.chain(std::iter::once(&self.tail)))
    }

    /// The bytes in order, piece by piece (for the kernel's page cache).
    pub fn pieces(&self) -> impl Iterator<Item = &[u8]> {
        self.offset_pieces().map(|(_, piece)| piece.as_slice())
    }

    /// All the bytes in one vector (a copy: for tests and small files).
    pub fn to_vec(&self) -> Vec<u8> {
        self.pieces().collect::<Vec<_>>().concat()
    }

    /// The index of the piece holding offset `at` (the tail's is the number of
    /// frozen segments, and holds every offset past the end), and its offset.
    fn locate(&self, at: usize) -> (usize, usize) {
        let index = self.frozen.partition_point(|s| s.end <= at);
        let start = index.checked_sub(1).map_or(0, |p| self.frozen[p].end);
        (index, start)
    }

    fn piece(&self, index: usize) -> &Arc<Vec<u8>> {
        self.frozen.get(index).map_or(&self.tail, |s| &s.bytes)
    }

    /// Bytes `range` (within `len`): shared when one piece holds them, else
    /// copied (a read that spans two segments).
    pub fn slice(&self, range: Range<usize>) -> Slice {
        let (index, start) = self.locate(range.start);
        let piece = self.piece(index);
        if range.end - start <= piece.len() {
            return Slice {
                piece: Arc::clone(piece),
                range: range.start - start..range.end - start,
            };
        }
        let mut copy = Vec::with_capacity(range.len());
        self.visit(range, |part| {
            copy.extend_from_slice(part);
            true
        });
        Slice {
            range: 0..copy.len(),
            piece: Arc::new(copy),
        }
    }

    /// Calls `part` with the bytes of `range` (within `len`), piece by piece,
    /// until it returns false; returns false when it did.
    fn visit(&self, range: Range<usize>, mut part: impl FnMut(&[u8]) -> bool) -> bool {
        let (first, mut start) = self.locate(range.start);
        for index in first..=self.frozen.len() {
            if start >= range.end {
                break;
            }
            let piece = self.piece(index);
            let from = range.start.max(start) - start;
            let to = range.end.min(start + piece.len()) - start;
            if !part(&piece[from..to]) {
                return false;
            }
            start += piece.len();
        }
        true
    }

    /// A 64-bit digest (FNV-1a) of the first `len` bytes, or `None` when there
    /// are fewer: what is kept of a file shown once its bytes are let go, so a
    /// later version can still be told to extend it or not.
    pub fn prefix_digest(&self, len: usize) -> Option<u64> {
        if len > self.len() {
            return None;
        }
        let mut digest = crate::digest::Fnv::default();
        self.visit(0..len, |part| {
            digest.write(part);
            true
        });
        Some(digest.finish())
    }

    /// True when `prefix` is a prefix of these bytes. Pieces both hold at the
    /// same offset (a snapshot's segments) are skipped unread, so checking a
    /// growing file against an earlier snapshot of it reads no more than that
    /// snapshot's tail.
    pub fn starts_with(&self, prefix: &Bytes) -> bool {
        if prefix.len() > self.len() {
            return false;
        }
        prefix.offset_pieces().all(|(start, piece)| {
            let (index, own_start) = self.locate(start);
            (own_start == start && Arc::ptr_eq(self.piece(index), piece)) || {
                let mut rest = piece.as_slice();
                self.visit(start..start + piece.len(), |part| {
                    let (head, tail) = rest.split_at(part.len());
                    rest = tail;
                    head == part
                })
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn appended(chunks: &[usize]) -> Bytes {
        let mut bytes = Bytes::default();
        for (k, &len) in chunks.iter().enumerate() {
            bytes.tail_mut().extend(std::iter::repeat_n(k as u8, len));
        }
        bytes
    }

    #[test]
    fn a_prefix_digest_tells_an_extension_from_a_rewrite() {
        let old = appended(&[SEGMENT, 10]);
        let digest = old.prefix_digest(old.len()).unwrap();
        let mut grown = old.clone();
        grown.tail_mut().extend_from_slice(b"more");
        assert_eq!(grown.prefix_digest(old.len()), Some(digest));
        let mut rewritten = appended(&[SEGMENT, 9]);
        rewritten.tail_mut().extend_from_slice(b"xy");
        assert_ne!(rewritten.prefix_digest(old.len()), Some(digest));
        assert_eq!(appended(&[3]).prefix_digest(4), None);
    }

    #[test]
    fn snapshots_share_frozen_segments_and_appends_leave_them_alone() {
        let mut writer = appended(&[SEGMENT, SEGMENT + 1, 10]);
        let snapshot = writer.clone();
        writer.tail_mut().extend_from_slice(b"more");
        assert_eq!(snapshot.frozen.len(), 2);
        for (old, new) in snapshot.frozen.iter().zip(writer.frozen.iter()) {
            assert!(Arc::ptr_eq(&old.bytes, &new.bytes));
        }
        assert_eq!(snapshot.len(), 2 * SEGMENT + 11);
        assert_eq!(writer.len(), 2 * SEGMENT + 15);
        assert!(writer.starts_with(&snapshot));
        assert!(!snapshot.starts_with(&writer));
    }

    #[test]
    fn segments_are_one_length_whatever_the_appends() {
        let mut writer = appended(&[SEGMENT - 1, 3 * SEGMENT + 5, 10]);
        let snapshot = writer.clone();
        writer.tail_mut().extend(std::iter::repeat_n(9, SEGMENT));
        writer.tail_mut();
        for bytes in [&snapshot, &writer] {
            for (k, segment) in bytes.frozen.iter().enumerate() {
                assert_eq!(segment.bytes.len(), SEGMENT);
                assert_eq!(segment.end, (k + 1) * SEGMENT);
            }
        }
        assert_eq!(writer.frozen.len(), 5);
        assert_eq!(writer.tail.len(), 14);
    }

    #[test]
    fn a_read_inside_one_piece_shares_it() {
        let bytes = appended(&[SEGMENT, 100]);
        let inside = bytes.slice(SEGMENT - 10..SEGMENT);
        assert!(Arc::ptr_eq(&inside.piece, &bytes.frozen[0].bytes));
        let across = bytes.slice(SEGMENT - 10..SEGMENT + 10);
        assert_eq!(across.as_slice(), [[0; 10], [1; 10]].concat());
    }
}
