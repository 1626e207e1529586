//! How the mount names and groups sessions for people: the readable name a
//! session shows at the root, the name of its `by-project/` directory and the
//! day of its `by-date/` directory. Pure functions of what a listing knows.
//!
//! **Readable names.** A session id is shown as it is wherever a Linux file
//! name can hold it. It is escaped only when it
//! - is empty, `.` or `..`, or holds `/` or NUL;
//! - is longer than 255 bytes;
//! - is spelled like a root entry ([`ROOT_ENTRIES`]);
//! - is spelled like an escaped name: only `[A-Za-z0-9._~-]` with a `~` in it
//!   (the Harness's on-disk escape), or ending in a long-name digest.
//!
//! An escaped id is shown in the Harness's on-disk escape (spec §10.2; a root
//! entry's first unit is escaped too, so `flush` shows as `~0066lush`). When
//! that is longer than 255 bytes, it is shown as a prefix of at most 237 bytes,
//! `~L` and 16 hex digits of the id's 64-bit FNV-1a digest.
//!
//! The rule is injective: shown-as-is names never look escaped, escaped names
//! are the Harness's injective escape (never ending in a digest, since `~` is
//! always followed by four hex digits there), and digest names only meet if
//! two ids of over 255 bytes share a prefix and a 64-bit digest.
//! An id cannot be invalid UTF-8 here: the listing shows an id that is no
//! valid Unicode (a lone UTF-16 surrogate) by its on-disk directory name.
//!
//! **Old names.** Before readable names the root showed every id in its
//! on-disk escape; [`old_name_id`] reads such a name back, for lookups where
//! no shown name is spelled the same.

use crate::model::ids::{decode_segment, encode_segment};

/// The root's own entries, which no session's shown name may spell.
pub const ROOT_ENTRIES: [&str; 5] = ["flush", "latest", "by-project", "by-date", "sessions.jsonl"];

/// The `by-project/` directory of sessions whose header names no cwd.
pub const NO_CWD: &str = "_no-cwd";

/// The longest file name Linux accepts, in bytes.
pub const NAME_MAX: usize = 255;

/// `~L` and 16 hex digits end a digest name.
const DIGEST_LEN: usize = 18;

/// The name a session shows at the root.
pub fn readable_name(id: &str) -> String {
    if can_show_as_is(id) {
        return id.to_string();
    }
    escaped_or_digest(id, encoded_id(id))
}

/// The session id an old (fully escaped) root name stood for, if it is one.
pub fn old_name_id(name: &str) -> Option<String> {
    match decode_segment(name) {
        // A root entry's name was the entry's even then: such an id showed
        // with its first unit escaped.
        Some(id) if ROOT_ENTRIES.contains(&id.as_str()) => None,
        Some(id) => Some(id),
        None => ROOT_ENTRIES
            .iter()
            .find(|entry| encoded_id(entry).as_deref() == Some(name))
            .map(|entry| entry.to_string()),
    }
}

/// The `by-project/` directory name of a cwd: the path without its leading
/// `/`, each further `/` shown as `∕` (U+2215, DIVISION SLASH), so
/// `/home/ana/my proj` is `home∕ana∕my proj`. A cwd that cannot be shown so
/// (relative, holding `∕` or NUL, too long, spelled like an escaped
/// name, `.`, `..` or [`NO_CWD`]) is shown as `~` and its on-disk escape, so
/// the mapping stays injective. No cwd is [`NO_CWD`].
pub fn project_name(cwd: Option<&str>) -> String {
    let Some(cwd) = cwd else {
        return NO_CWD.into();
    };
    let shown = cwd
        .strip_prefix('/')
        .filter(|rest| !rest.contains('\u{2215}'))
        .map(|rest| rest.replace('/', "\u{2215}"));
    match shown {
        Some(name)
            if can_show(&name)
                && !name.starts_with('~')
                && !looks_escaped(&name)
                && name != NO_CWD =>
        {
            name
        }
        _ => escaped_or_digest(cwd, encode_segment(cwd).map(|e| format!("~{e}"))),
    }
}

/// The UTC day (`YYYY-MM-DD`) of a time in ms since the Unix epoch, as
/// `by-date/` groups sessions by their `createdAt`. UTC, so a store shows the
/// same tree wherever and whenever it is mounted.
pub fn utc_day(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    // Civil date from a day count (H. Hinnant's `civil_from_days`).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

fn can_show(name: &str) -> bool {
    !matches!(name, "" | "." | "..") && !name.contains(['/', '\0']) && name.len() <= NAME_MAX
}

fn can_show_as_is(id: &str) -> bool {
    can_show(id) && !ROOT_ENTRIES.contains(&id) && !looks_escaped(id)
}

/// Spelled like an on-disk escape (alphabet only, with a `~`) or a digest name.
fn looks_escaped(name: &str) -> bool {
    let on_disk_alphabet = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'~'));
    (on_disk_alphabet && name.contains('~')) || ends_in_digest(name)
}

fn ends_in_digest(name: &str) -> bool {
    let Some(tail) = name
        .len()
        .checked_sub(DIGEST_LEN)
        .and_then(|at| name.get(at..))
    else {
        return false;
    };
    tail.starts_with("~L")
        && tail[2..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
}

/// The Harness's escape of an id, with a root entry's first unit escaped too
/// (those are spelled in the plain alphabet, so the escape alone keeps them).
fn encoded_id(id: &str) -> Option<String> {
    if ROOT_ENTRIES.contains(&id) {
        let first = id.as_bytes()[0];
        return Some(format!("~{first:04X}{}", &id[1..]));
    }
    encode_segment(id)
}

/// `escaped` when it fits in a file name, else a digest name for `original`.
fn escaped_or_digest(original: &str, escaped: Option<String>) -> String {
    match escaped {
        Some(name) if name.len() <= NAME_MAX => name,
        escaped => {
            // A readable id keeps a readable prefix; one holding `/` or NUL
            // takes its prefix from the escape.
            let source = if original.contains(['/', '\0']) {
                escaped.unwrap_or_default()
            } else {
                original.to_string()
            };
            let mut cut = (NAME_MAX - DIGEST_LEN).min(source.len());
            while !source.is_char_boundary(cut) {
                cut -= 1;
            }
            format!("{}~L{:016X}", &source[..cut], fnv1a(original))
        }
    }
}

fn fnv1a(text: &str) -> u64 {
    crate::digest::Fnv::of(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn ids_a_file_name_can_hold_are_shown_as_they_are() {
        for id in [
            "session-22ef4504",
            "notes\\2026 · 50% «draft» 🦀~",
            "x y",
            ".hidden",
            "会话",
            "a~b c",
            "~ tilde then space",
            "flushed",
            "by-date.d",
        ] {
            assert_eq!(readable_name(id), id);
        }
        assert_eq!(readable_name(&"é".repeat(127)), "é".repeat(127));
    }

    #[test]
    fn each_escape_case() {
        let cases = [
            ("a/b", "a~002Fb"),
            ("nul\0in", "nul~0000in"),
            (".", "~002E"),
            ("..", "~002E~002E"),
            ("flush", "~0066lush"),
            ("latest", "~006Catest"),
            ("by-project", "~0062y-project"),
            ("by-date", "~0062y-date"),
            ("sessions.jsonl", "~0073essions.jsonl"),
            // spelled like an on-disk escape: escaped again, so it cannot meet one
            ("x~0020y", "x~007E0020y"),
            ("~0066lush", "~007E0066lush"),
        ];
        for (id, shown) in cases {
            assert_eq!(readable_name(id), shown, "{id:?}");
        }
    }

    #[test]
    fn long_ids_get_a_digest_name_of_at_most_255_bytes() {
        let long = "é".repeat(200);
        let shown = readable_name(&long);
        assert!(
            shown.len() <= NAME_MAX && shown.starts_with("éé"),
            "{shown}"
        );
        assert!(ends_in_digest(&shown));
        assert_ne!(readable_name(&format!("{long}x")), shown);
        let slashed = format!("a/{}", "b".repeat(300));
        let shown = readable_name(&slashed);
        assert!(shown.starts_with("a~002Fbbb") && shown.len() <= NAME_MAX);
        // an id spelled like a digest name is escaped, so it cannot meet one
        let lookalike = shown.clone();
        assert_ne!(readable_name(&lookalike), shown);
        // 255 bytes is still shown as is; an escape beyond 255 bytes becomes a digest
        assert_eq!(readable_name(&"a".repeat(255)), "a".repeat(255));
        let escaped_long = format!("{}/", "a".repeat(252));
        assert!(ends_in_digest(&readable_name(&escaped_long)));
    }

    #[test]
    fn old_escaped_names_lead_back_to_their_id() {
        for id in [
            "x y",
            "notes\\2026 · 50% «draft» 🦀~",
            "flush",
            "a/b",
            "session-1",
        ] {
            let old = encode_segment(id).unwrap();
            let old = if id == "flush" {
                "~0066lush".to_string()
            } else {
                old
            };
            assert_eq!(old_name_id(&old).as_deref(), Some(id), "{old}");
        }
        assert_eq!(old_name_id("a b"), None);
        assert_eq!(old_name_id("flush"), None, "the root's own entry then too");
    }

    /// A small PRNG (xorshift) so the walk is the same on every run.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    /// Ids built from the characters the rule treats specially, reserved
    /// names, escapes of other ids and lengths around 255 bytes.
    fn tricky_id(state: &mut u64, made: &[String]) -> String {
        const PIECES: [&str; 16] = [
            "/",
            "\0",
            ".",
            "~",
            "~L",
            "0",
            "F",
            "a",
            " ",
            "é",
            "🦀",
            "∕",
            "-",
            "flush",
            "~0020",
            "sessions.jsonl",
        ];
        match next(state) % 8 {
            0 if !made.is_empty() => readable_name(&made[next(state) as usize % made.len()]),
            1 if !made.is_empty() => {
                encode_segment(&made[next(state) as usize % made.len()]).unwrap_or_default()
            }
            2 => ROOT_ENTRIES[next(state) as usize % ROOT_ENTRIES.len()].to_string(),
            3 => {
                let prefix = "é".repeat(118 + (next(state) % 4) as usize);
                format!("{prefix}{}", PIECES[next(state) as usize % PIECES.len()])
            }
            _ => (0..1 + next(state) % 6)
                .map(|_| PIECES[next(state) as usize % PIECES.len()])
                .collect(),
        }
    }

    #[test]
    fn the_rules_are_injective_and_always_give_a_linux_name() {
        let mut state = 0x9E37_79B9_7F4A_7C15;
        let mut made: Vec<String> = Vec::new();
        let mut ids_by_name: HashMap<String, String> = HashMap::new();
        let mut ids_by_project: HashMap<String, Option<String>> = HashMap::new();
        for _ in 0..20_000 {
            let id = tricky_id(&mut state, &made);
            let name = readable_name(&id);
            assert!(
                can_show(&name) && !ROOT_ENTRIES.contains(&name.as_str()),
                "{id:?}: {name:?}"
            );
            let earlier = ids_by_name
                .entry(name.clone())
                .or_insert_with(|| id.clone());
            assert_eq!(earlier, &id, "two ids show as {name:?}");

            let cwd = (!next(&mut state).is_multiple_of(5)).then(|| id.clone());
            let project = project_name(cwd.as_deref());
            assert!(can_show(&project), "{cwd:?}: {project:?}");
            let earlier = ids_by_project
                .entry(project.clone())
                .or_insert_with(|| cwd.clone());
            assert_eq!(earlier, &cwd, "two cwds share {project:?}");
            made.push(id);
        }
    }

    #[test]
    fn project_names_show_the_path() {
        let cases = [
            (Some("/home/ana/my proj"), "home∕ana∕my proj"),
            (Some("/home/ana/src/café menu"), "home∕ana∕src∕café menu"),
            (Some("/opt/teams/data pipeline"), "opt∕teams∕data pipeline"),
            (Some("/_no-cwd"), "~~002F_no-cwd"),
            (Some("/"), "~~002F"),
            (Some("relative"), "~relative"),
            (Some("/a∕b"), "~~002Fa~2215b"),
            (Some("/~x"), "~~002F~007Ex"),
            (None, NO_CWD),
        ];
        for (cwd, name) in cases {
            assert_eq!(project_name(cwd), name, "{cwd:?}");
        }
    }

    #[test]
    fn days_are_utc_calendar_days() {
        assert_eq!(utc_day(0), "1970-01-01");
        assert_eq!(utc_day(-1), "1969-12-31");
        assert_eq!(utc_day(1_773_496_560_000), "2026-03-14");
        assert_eq!(utc_day(951_782_400_000), "2000-02-29");
        assert_eq!(utc_day(1_798_761_599_999), "2026-12-31");
        assert_eq!(utc_day(1_798_761_600_000), "2027-01-01");
    }
}
