//! Session id and project key encodings (spec §10.2). They work on UTF-16 code
//! units, as the Harness's JS strings do.

fn is_plain(unit: u16) -> bool {
    matches!(unit, 0x30..=0x39 | 0x41..=0x5A | 0x61..=0x7A | 0x2E | 0x5F | 0x2D)
}

/// Encodes a session id as one safe path segment: `[A-Za-z0-9._-]` kept, every
/// other UTF-16 unit (including `~`) as `~XXXX`; `.` and `..` escaped whole.
/// The mapping is injective, so two ids never share a directory name.
pub fn encode_segment(id: &str) -> Option<String> {
    match id {
        "" => None,
        "." => Some("~002E".into()),
        ".." => Some("~002E~002E".into()),
        _ => {
            let mut out = String::with_capacity(id.len());
            for unit in id.encode_utf16() {
                if is_plain(unit) {
                    out.push(unit as u8 as char);
                } else {
                    out.push_str(&format!("~{unit:04X}"));
                }
            }
            Some(out)
        }
    }
}

/// Whether `id` is its own segment: [`encode_segment`] keeps it as it is (not
/// empty, not `.` or `..`, only `[A-Za-z0-9._-]`). Asked without encoding.
pub fn is_own_segment(id: &str) -> bool {
    !matches!(id, "" | "." | "..") && id.bytes().all(|b| is_plain(u16::from(b)))
}

/// Reverses [`encode_segment`]; `None` when the name is not a valid encoding.
pub fn decode_segment(segment: &str) -> Option<String> {
    match segment {
        "~002E" => return Some(".".into()),
        "~002E~002E" => return Some("..".into()),
        _ => {}
    }
    let bytes = segment.as_bytes();
    let mut units = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'~' {
            let hex = segment.get(i + 1..i + 5)?;
            if !hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
            {
                return None;
            }
            let unit = u16::from_str_radix(hex, 16).ok()?;
            if is_plain(unit) {
                return None;
            }
            units.push(unit);
            i += 5;
        } else if is_plain(bytes[i] as u16) {
            units.push(bytes[i] as u16);
            i += 1;
        } else {
            return None;
        }
    }
    let decoded = String::from_utf16(&units).ok()?;
    (encode_segment(&decoded).as_deref() == Some(segment)).then_some(decoded)
}

/// The project directory name for a cwd (spec §10.2), or `_no-cwd`.
pub fn project_dir(cwd: Option<&str>) -> String {
    let Some(cwd) = cwd else {
        return "_no-cwd".into();
    };
    let mut slug = String::new();
    let mut in_separator_run = false;
    for unit in cwd.encode_utf16() {
        if matches!(unit, 0x2F | 0x5C | 0x3A) {
            if !in_separator_run {
                slug.push('-');
            }
            in_separator_run = true;
            continue;
        }
        in_separator_run = false;
        if is_plain(unit) {
            slug.push(unit as u8 as char);
        } else {
            slug.push_str(&format!("~{unit:04X}"));
        }
    }
    let slug = slug.trim_start_matches('-');
    let slug = if slug.is_empty() { "root" } else { slug };
    let slug: String = slug.chars().take(251).collect();
    format!("--{slug}--")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_match_the_spec_table() {
        let table = [
            ("session-1", "session-1"),
            ("a/b", "a~002Fb"),
            ("x y", "x~0020y"),
            ("~", "~007E"),
            ("..", "~002E~002E"),
            (".hidden", ".hidden"),
            ("会话", "~4F1A~8BDD"),
            ("😀", "~D83D~DE00"),
            (
                "notes\\2026 · 50% «draft» 🦀~",
                "notes~005C2026~0020~00B7~002050~0025~0020~00ABdraft~00BB~0020~D83E~DD80~007E",
            ),
        ];
        for (id, segment) in table {
            assert_eq!(encode_segment(id).as_deref(), Some(segment));
            assert_eq!(decode_segment(segment).as_deref(), Some(id));
        }
        assert_eq!(encode_segment(""), None);
        assert_eq!(decode_segment("a~002fb"), None);
        assert_eq!(decode_segment("~0041"), None);
        assert_eq!(decode_segment("a b"), None);
    }

    #[test]
    fn project_keys_match_the_spec_table() {
        let table = [
            ("/home/ana/my proj", "--home-ana-my~0020proj--"),
            ("C:\\Users\\ana", "--C-Users-ana--"),
            ("/", "--root--"),
            ("/a//b/", "--a-b---"),
            ("/a-b/c", "--a-b-c--"),
            ("/srv/项目", "--srv-~9879~76EE--"),
            (
                "/home/ana/src/café menu",
                "--home-ana-src-caf~00E9~0020menu--",
            ),
            ("/-x", "--x--"),
        ];
        for (cwd, dir) in table {
            assert_eq!(project_dir(Some(cwd)), dir, "{cwd}");
        }
        assert_eq!(project_dir(None), "_no-cwd");
    }
}
