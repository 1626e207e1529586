//! `sessionfs::bytes::Bytes` (frozen shared segments plus a tail) against a
//! plain `Vec<u8>`. The contract: whatever the sizes of the appends and
//! whenever segments are frozen, a `Bytes` reads as the concatenation of what
//! was appended; a clone is a snapshot that later appends never change; `len`,
//! `slice` (within one segment or across several), `pieces` and `starts_with`
//! (against its own snapshots, which share segments, and against bytes built
//! apart, equal or one byte off) answer as they do on the vector.

mod common;

use common::Rng;
use sessionfs::bytes::{Bytes, SEGMENT};

/// Appends of every scale: a few bytes, an entry, and more than a segment.
fn append_len(rng: &mut Rng) -> usize {
    match rng.below(10) {
        0..=4 => rng.index(100),
        5..=8 => rng.index(64 << 10),
        _ => rng.index(SEGMENT + SEGMENT / 2),
    }
}

fn random_bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.next() as u8).collect()
}

/// `data` appended in random pieces: the same bytes in segments of its own.
fn built_apart(rng: &mut Rng, data: &[u8]) -> Bytes {
    let mut bytes = Bytes::default();
    let mut at = 0;
    while at < data.len() {
        let end = (at + append_len(rng)).min(data.len());
        bytes.tail_mut().extend_from_slice(&data[at..end]);
        at = end;
    }
    bytes
}

/// Offsets worth reading at: the ends, every piece boundary and its
/// neighbours, and a few at random.
fn offsets(rng: &mut Rng, bytes: &Bytes) -> Vec<usize> {
    let mut at = vec![0, bytes.len()];
    let mut end = 0;
    for piece in bytes.pieces() {
        end += piece.len();
        at.extend([end.saturating_sub(1), end, end + 1]);
    }
    at.extend((0..4).map(|_| rng.index(bytes.len() + 1)));
    at.retain(|&a| a <= bytes.len());
    at
}

fn check(rng: &mut Rng, seed: u64, bytes: &Bytes, want: &[u8]) {
    assert_eq!(bytes.len(), want.len(), "seed {seed}: len");
    assert_eq!(bytes.is_empty(), want.is_empty(), "seed {seed}: is_empty");
    assert_eq!(bytes.to_vec(), want, "seed {seed}: pieces");
    for start in offsets(rng, bytes) {
        let sizes = [0, 1, 4096, 128 << 10, SEGMENT, 3 * SEGMENT];
        let end = (start + rng.pick(&sizes)).min(want.len());
        let slice = bytes.slice(start..end);
        assert_eq!(
            slice.as_slice(),
            &want[start..end],
            "seed {seed}: slice {start}..{end}"
        );
    }
}

#[test]
fn segmented_bytes_read_as_the_vector_they_were_appended_as() {
    for seed in 1..=12 {
        let mut rng = Rng(seed);
        let mut writer = Bytes::default();
        let mut want = Vec::new();
        let mut snapshots: Vec<(Bytes, Vec<u8>)> = Vec::new();
        while want.len() < 5 * SEGMENT {
            let len = append_len(&mut rng);
            let data = random_bytes(&mut rng, len);
            writer.tail_mut().extend_from_slice(&data);
            want.extend_from_slice(&data);
            if rng.below(3) == 0 {
                snapshots.push((writer.clone(), want.clone()));
            }
            if rng.below(4) == 0 {
                check(&mut rng, seed, &writer, &want);
            }
        }
        writer.shrink();
        assert!(writer.pieces().count() > 2, "seed {seed}: frozen segments");
        check(&mut rng, seed, &writer, &want);
        for (snapshot, held) in &snapshots {
            check(&mut rng, seed, snapshot, held);
            assert!(writer.starts_with(snapshot), "seed {seed}: grew from");
            assert_eq!(
                snapshot.starts_with(&writer),
                held.starts_with(&want),
                "seed {seed}: a snapshot does not start with what grew from it"
            );
        }
        for (older, newer) in snapshots.iter().zip(snapshots.iter().skip(1)) {
            assert!(newer.0.starts_with(&older.0), "seed {seed}: snapshots");
        }
    }
}

#[test]
fn prefix_checks_against_bytes_built_apart_compare_every_byte() {
    for seed in 1..=12 {
        let mut rng = Rng(seed);
        let len = rng.index(4 * SEGMENT);
        let data = random_bytes(&mut rng, len);
        let bytes = built_apart(&mut rng, &data);
        for _ in 0..6 {
            let cut = rng.index(len + 1);
            let mut prefix = data[..cut].to_vec();
            // Half the time one byte is off, anywhere in the prefix.
            if cut > 0 && rng.below(2) == 0 {
                prefix[rng.index(cut)] ^= 1 << rng.below(8);
            }
            let apart = built_apart(&mut rng, &prefix);
            assert_eq!(
                bytes.starts_with(&apart),
                data.starts_with(&prefix),
                "seed {seed}: a prefix of {cut} bytes built apart"
            );
            // One piece against segments: no boundary in common.
            let one_piece = Bytes::from(prefix.clone());
            assert_eq!(
                bytes.starts_with(&one_piece),
                data.starts_with(&prefix),
                "seed {seed}: a prefix of {cut} bytes in one piece"
            );
            let longer = built_apart(&mut rng, &[&data[..], b"x"].concat());
            assert!(!bytes.starts_with(&longer), "seed {seed}: longer");
            assert!(longer.starts_with(&bytes), "seed {seed}: shorter");
        }
        let whole = Bytes::from(data.clone());
        assert!(whole.starts_with(&bytes) && bytes.starts_with(&whole));
        check(&mut rng, seed, &whole, &data);
    }
}
