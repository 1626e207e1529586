//! Files of `events/`: one per logical event, named so that `ls` sorts by seq and
//! the name never changes as the log grows, e.g. `00000042-tool.result.json`.
//! Synthetic crash closers end in `.synthetic.json`, so they are told apart from
//! logged events by name alone.

use crate::json::{JsonMap, pretty_line};
use crate::model::ids::encode_segment;

/// The suffix of a synthetic closer's file in `events/`.
pub const SYNTHETIC_SUFFIX: &str = ".synthetic.json";
/// The suffix of a logged event's file in `events/`.
pub const LOGGED_SUFFIX: &str = ".json";

/// The file name of an event.
pub fn file_name(seq: u64, event_type: &str, synthetic: bool) -> String {
    name_with(seq, &type_part(event_type), synthetic)
}

/// The part of an event's file name that its type gives, e.g. `tool.result`.
pub fn type_part(event_type: &str) -> String {
    // `/` becomes `.` for readability; anything else unsafe in a name is escaped.
    let readable = event_type.replace('/', ".");
    encode_segment(&readable).unwrap_or_else(|| "~".into())
}

/// The file name of an event whose type gives `type_part`.
pub fn name_with(seq: u64, type_part: &str, synthetic: bool) -> String {
    let suffix = if synthetic {
        SYNTHETIC_SUFFIX
    } else {
        LOGGED_SUFFIX
    };
    // Written by hand: `ls` of a huge events/ names a million entries, and
    // `format!` costs several times this.
    let mut digits = [b'0'; 20];
    let mut at = digits.len();
    let mut rest = seq;
    while rest > 0 || at > digits.len() - 8 {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    let mut name = String::with_capacity(digits.len() - at + 1 + type_part.len() + suffix.len());
    name.extend(digits[at..].iter().map(|&d| char::from(d)));
    name.push('-');
    name.push_str(type_part);
    name.push_str(suffix);
    name
}

/// The seq a file name starts with, if it is shaped like an event file name.
pub fn seq_of(name: &str) -> Option<u64> {
    let (digits, _) = name.split_once('-')?;
    if digits.len() < 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The event as logged (key order preserved), pretty-printed, newline-terminated.
pub fn content(event: &JsonMap) -> Vec<u8> {
    pretty_line(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_pad_seqs_to_eight_digits_as_format_does() {
        for seq in [0, 7, 42, 12_345_678, 123_456_789, u64::MAX] {
            assert_eq!(
                name_with(seq, "tool.result", false),
                format!("{seq:08}-tool.result.json")
            );
        }
        assert_eq!(name_with(3, "x", true), "00000003-x.synthetic.json");
    }

    #[test]
    fn names_sort_by_seq_and_mark_synthetic_events() {
        assert_eq!(
            file_name(42, "tool/result", false),
            "00000042-tool.result.json"
        );
        assert_eq!(
            file_name(7, "tool/result", true),
            "00000007-tool.result.synthetic.json"
        );
        assert_eq!(
            file_name(1, "a b/../c", false),
            "00000001-a~0020b....c.json"
        );
        assert_eq!(seq_of("00000042-tool.result.json"), Some(42));
        assert_eq!(seq_of("123456789-x.json"), Some(123_456_789));
        assert_eq!(seq_of("42-x.json"), None);
    }
}
