//! The control-file and path grammars: `parse_fork_command` (the `fork` file),
//! `parse_flush_command` (the `flush` file), and the session-id / project-key
//! encodings of spec §10.2 (`encode_segment`, `decode_segment`, `project_dir`).
//!
//! Checks: nothing panics; an accepted fork command re-parses from its
//! canonical spelling to the same command and its boundary is a safe integer;
//! flush accepts only its two spellings; `decode_segment` accepts only what
//! `encode_segment` produces (round trip both ways); an encoded segment and a
//! project directory are single path components of safe characters.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sessionfs::fs::control::{Command, ControlFile};
use sessionfs::json::MAX_SAFE_INTEGER;
use sessionfs::model::fork::parse_fork_command;
use sessionfs::model::ids::{decode_segment, encode_segment, project_dir};

fn safe_component(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'~'))
}

fuzz_target!(|data: &[u8]| {
    if let Ok((seq, name)) = parse_fork_command(data) {
        assert!(seq <= MAX_SAFE_INTEGER as u64);
        let canonical = match &name {
            Some(name) => format!("{seq} {name}\n"),
            None => format!("{seq}\n"),
        };
        assert_eq!(parse_fork_command(canonical.as_bytes()), Ok((seq, name)));
    }
    if Command::parse(ControlFile::Flush, data).is_ok() {
        assert!(
            matches!(data, b"" | b"\n" | b"flush" | b"flush\n")
                || data.iter().all(|b| *b == b'\n')
                || (data.starts_with(b"flush") && data[5..].iter().all(|b| *b == b'\n'))
        );
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(id) = decode_segment(text) {
        assert_eq!(
            encode_segment(&id).as_deref(),
            Some(text),
            "decode_segment accepted a non-canonical name"
        );
    }
    match encode_segment(text) {
        Some(segment) => {
            assert!(safe_component(&segment), "{segment:?}");
            assert_eq!(decode_segment(&segment).as_deref(), Some(text));
        }
        None => assert!(text.is_empty()),
    }
    let project = project_dir(Some(text));
    assert!(
        safe_component(&project) && project.len() <= 255,
        "{project:?}"
    );
});
