//! Random identifiers (fork child ids, SQLite incarnations, temp file names),
//! from the kernel's random source.

use std::io::{self, Read};

fn fill(bytes: &mut [u8]) -> io::Result<()> {
    std::fs::File::open("/dev/urandom")?.read_exact(bytes)
}

/// A random (version 4) UUID in lowercase hex, e.g. for `session-<uuid>`.
pub fn uuid_v4() -> io::Result<String> {
    let mut bytes = [0u8; 16];
    fill(&mut bytes)?;
    Ok(format_uuid_v4(bytes))
}

/// Sixteen random bytes written as a version 4 UUID (version and variant bits set).
pub fn format_uuid_v4(mut bytes: [u8; 16]) -> String {
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// `chars` random lowercase hex digits.
pub fn hex(chars: usize) -> io::Result<String> {
    let mut bytes = vec![0u8; chars.div_ceil(2)];
    fill(&mut bytes)?;
    let mut text: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    text.truncate(chars);
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_version_4_and_differ() {
        let id = uuid_v4().unwrap();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"));
        assert_ne!(uuid_v4().unwrap(), id);
        assert_eq!(hex(12).unwrap().len(), 12);
        assert!(hex(7).unwrap().bytes().all(|b| b.is_ascii_hexdigit()));
    }
}
