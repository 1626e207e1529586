//! The varint codec of schema 17's `source_event_seqs` BLOBs (spec §11.3).

use crate::json::MAX_SAFE_INTEGER;

/// Decodes a schema-17 `source_event_seqs` BLOB (spec §11.3): a LEB128 varint of
/// the first seq, then zigzag varints of the differences.
pub fn decode_source_seqs(bytes: &[u8]) -> Result<Vec<u64>, String> {
    const MAX_SAFE: u64 = MAX_SAFE_INTEGER as u64;
    let mut seqs: Vec<u64> = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let value = read_varint(&mut rest)?;
        let seq = match seqs.last() {
            None if value > MAX_SAFE => {
                return Err(format!("first source seq {value} is not a safe integer"));
            }
            None => value,
            Some(_) if value > 2 * MAX_SAFE => {
                return Err(format!("source seq delta {value} is out of range"));
            }
            Some(&previous) => {
                // Both fit easily in i64: previous ≤ 2^53 − 1, |delta| ≤ 2^53.
                let delta = if value % 2 == 0 {
                    (value / 2) as i64
                } else {
                    -(value.div_ceil(2) as i64)
                };
                let seq = previous as i64 + delta;
                if !(0..=MAX_SAFE_INTEGER).contains(&seq) {
                    return Err(format!("source seq {seq} is out of range"));
                }
                seq as u64
            }
        };
        seqs.push(seq);
    }
    Ok(seqs)
}

/// Reads one canonical unsigned LEB128 varint of at most 9 bytes.
fn read_varint(bytes: &mut &[u8]) -> Result<u64, String> {
    let mut value = 0u64;
    for (index, &byte) in bytes.iter().enumerate().take(9) {
        value |= u64::from(byte & 0x7f) << (7 * index);
        if byte & 0x80 == 0 {
            if index > 0 && byte == 0 {
                return Err("non-canonical varint in source seqs".into());
            }
            *bytes = &bytes[index + 1..];
            return Ok(value);
        }
    }
    if bytes.len() >= 9 {
        Err("varint in source seqs is longer than 9 bytes".into())
    } else {
        Err("truncated varint in source seqs".into())
    }
}

/// Encodes seqs for a schema-17 `source_event_seqs` BLOB; the inverse of
/// [`decode_source_seqs`] for seqs up to 2^53 − 1.
pub fn encode_source_seqs(seqs: &[u64]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut previous: Option<u64> = None;
    for &seq in seqs {
        let value = match previous {
            None => u128::from(seq),
            Some(previous) => {
                let delta = i128::from(seq) - i128::from(previous);
                if delta >= 0 {
                    delta.unsigned_abs() * 2
                } else {
                    delta.unsigned_abs() * 2 - 1
                }
            }
        };
        write_varint(value, &mut out);
        previous = Some(seq);
    }
    out
}

fn write_varint(mut value: u128, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_seqs_match_the_spec_table() {
        let table: [(&[u64], &[u8]); 7] = [
            (&[5, 6, 7, 8, 9, 10], &[0x05, 0x02, 0x02, 0x02, 0x02, 0x02]),
            (&[300, 12], &[0xAC, 0x02, 0xBF, 0x04]),
            (&[12, 300], &[0x0C, 0xC0, 0x04]),
            (&[0, 3, 1], &[0x00, 0x06, 0x03]),
            (&[], &[]),
            (
                &[132, 133, 2, 64, 69, 97, 99, 129],
                &[0x84, 0x01, 0x02, 0x85, 0x02, 0x7C, 0x0A, 0x38, 0x04, 0x3C],
            ),
            (&[156], &[0x9C, 0x01]),
        ];
        for (seqs, bytes) in table {
            assert_eq!(encode_source_seqs(seqs), bytes, "{seqs:?}");
            assert_eq!(decode_source_seqs(bytes).unwrap(), seqs, "{bytes:02x?}");
        }
        let extremes = [MAX_SAFE_INTEGER as u64, 0, MAX_SAFE_INTEGER as u64];
        assert_eq!(
            decode_source_seqs(&encode_source_seqs(&extremes)).unwrap(),
            extremes
        );
    }

    #[test]
    fn source_seqs_reject_malformed_varints() {
        let rejected: [&[u8]; 8] = [
            &[0x80],                                                       // truncated (crash case s2)
            &[0x05, 0x82],                                                 // truncated second value
            &[0x85, 0x00],                                                 // non-canonical
            &[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01], // longer than 9 bytes
            &[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10],       // first value 2^60
            &[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10],             // first value 2^53
            &[0x05, 0x0B],                                                 // 5 − 6 < 0
            &[0x00, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40], // delta value above 2·(2^53 − 1)
        ];
        for bytes in rejected {
            assert!(decode_source_seqs(bytes).is_err(), "{bytes:02x?}");
        }
        // Nine bytes is the longest accepted form.
        assert_eq!(
            decode_source_seqs(&[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F]).unwrap(),
            [MAX_SAFE_INTEGER as u64]
        );
        assert!(
            decode_source_seqs(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00]).is_err()
        );
    }
}
