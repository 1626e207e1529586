//! The length of `json::pretty_line`'s output, computed without writing it.
//!
//! `ls -l events/` of a huge session needs every event file's size, and a file
//! is its event pretty-printed. The scan computes each size once: from a
//! decoded event by summing its parts as serde_json prints them, and from the stored text
//! of a streamed chunk (which the quick reader never decodes) by a structural
//! walk that knows how serde_json re-prints it: two-space indent, strings
//! re-escaped (only `"`, `\` and control characters), numbers in their logged
//! spelling (`arbitrary_precision`) but with an exponent's sign written out.
//! The walk answers `None` for anything it is not sure of (a duplicate or
//! escaped key, a lone surrogate, invalid UTF-8, deep nesting): the caller then
//! decodes in full.

use serde_json::Value;

use crate::json::JsonMap;

/// The length `json::pretty_line(map)` gives for a decoded object (an event),
/// summed from its parts as serde_json's pretty printer writes them: counting
/// what serde_json wrote cost 5% of a cold scan's CPU.
pub fn map_pretty_line_len(map: &JsonMap) -> u64 {
    map_len(map, 0) + 1
}

/// The pretty length of `value` printed at `depth` (as `raw_pretty_len`).
fn value_len(value: &Value, depth: u64) -> u64 {
    match value {
        Value::Null | Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        // `arbitrary_precision` prints a number as it was spelled when decoded.
        Value::Number(number) => number.as_str().len() as u64,
        Value::String(text) => string_len(text),
        Value::Array(items) => {
            let members = items.iter().map(|item| value_len(item, depth + 1)).sum();
            container_len(depth, items.len() as u64, members)
        }
        Value::Object(map) => map_len(map, depth),
    }
}

fn map_len(map: &JsonMap, depth: u64) -> u64 {
    let members = map
        .iter()
        .map(|(key, value)| member_len(key, value_len(value, depth + 1)))
        .sum();
    container_len(depth, map.len() as u64, members)
}

/// The pretty length of a JSON text parsed into a `Value` and printed at
/// `depth` (as a member of a pretty-printed container nested that deep, or
/// alone at 0, without `pretty_line`'s newline); `None` when the walk is not sure.
pub fn raw_pretty_len(text: &[u8], depth: u64) -> Option<u64> {
    // Checked once here: strings are then scanned for `"`, `\` and controls only.
    std::str::from_utf8(text).ok()?;
    let mut walk = Walk { text, at: 0 };
    let len = walk.value(depth)?;
    walk.skip_whitespace();
    (walk.at == text.len()).then_some(len)
}

/// A walk over valid UTF-8 JSON text from an offset, for a reader that
/// matches a record's known layout itself and measures only the rest.
pub struct Cursor<'a> {
    walk: Walk<'a>,
}

impl<'a> Cursor<'a> {
    /// A walk over `text` that starts at byte `at`.
    pub fn new(text: &'a str, at: usize) -> Cursor<'a> {
        Cursor {
            walk: Walk {
                text: text.as_bytes(),
                at,
            },
        }
    }

    /// Where the walk stands: just past what it measured last.
    pub fn at(&self) -> usize {
        self.walk.at
    }

    /// The pretty length of the value here, printed at `depth` (as `raw_pretty_len`).
    pub fn value(&mut self, depth: u64) -> Option<u64> {
        self.walk.value(depth)
    }

    /// The length serde_json writes the string here in, quotes included;
    /// `None` when no string starts exactly here or the walk is not sure.
    pub fn string(&mut self) -> Option<u64> {
        if self.walk.text.get(self.walk.at) != Some(&b'"') {
            return None;
        }
        self.walk.string().map(|string| string.len)
    }
}

/// The length serde_json writes `text` in, quotes included.
pub fn string_len(text: &str) -> u64 {
    let bytes = text.as_bytes();
    // In blocks the compiler turns into vector compares: prose has a newline
    // every few dozen bytes, so skipping plain words alone saved little.
    let mut blocks = bytes.chunks_exact(32);
    let extra: u64 = (&mut blocks)
        .map(|block| block_escape_extra(block.try_into().expect("32 bytes")))
        .sum();
    let tail: u64 = blocks
        .remainder()
        .iter()
        .map(|byte| escape_extra(*byte))
        .sum();
    bytes.len() as u64 + 2 + extra + tail
}

/// `escape_extra` summed over a block, without branches.
fn block_escape_extra(block: &[u8; 32]) -> u64 {
    // At most 5 × 32: a byte cannot overflow.
    let mut sum = 0u8;
    for &byte in block {
        let control = u8::from(byte < 0x20);
        let short_control = u8::from(matches!(byte, 0x08 | 0x09 | 0x0A | 0x0C | 0x0D));
        let quote_or_backslash = u8::from(byte == b'"' || byte == b'\\');
        sum += control * 5 - short_control * 4 + quote_or_backslash;
    }
    u64::from(sum)
}

/// The length of an integer as serde_json writes it.
pub fn int_len(value: i64) -> u64 {
    let digits = value.unsigned_abs().checked_ilog10().map_or(1, |l| l + 1);
    digits as u64 + u64::from(value < 0)
}

/// The pretty length of an object or array at `depth` with `count` members
/// whose own lengths (for an object, each `"key": value`) sum to `members`.
pub fn container_len(depth: u64, count: u64, members: u64) -> u64 {
    if count == 0 {
        return 2;
    }
    // Brackets; each member on its own indented line; commas between; the
    // closing bracket on a line indented to `depth`.
    2 + count * (1 + 2 * (depth + 1)) + (count - 1) + members + 1 + 2 * depth
}

/// The pretty length of an object member whose key is `key`.
pub fn member_len(key: &str, value: u64) -> u64 {
    string_len(key) + 2 + value
}

/// Bytes that serde_json adds when it escapes `byte` (ASCII or part of UTF-8).
fn escape_extra(byte: u8) -> u64 {
    match byte {
        b'"' | b'\\' | 0x08 | 0x09 | 0x0A | 0x0C | 0x0D => 1,
        0x00..=0x1F => 5,
        _ => 0,
    }
}

/// Bytes a string holds as they are: not `"`, `\` or a control character.
const PLAIN: [bool; 256] = {
    let mut plain = [true; 256];
    let mut byte = 0;
    while byte < 0x20 {
        plain[byte] = false;
        byte += 1;
    }
    plain[b'"' as usize] = false;
    plain[b'\\' as usize] = false;
    plain
};

/// The bytes of a little-endian word that are not plain, each marked by its
/// high bit; the lowest mark is exact (borrows only mark bytes above a true one).
fn not_plain(word: u64) -> u64 {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGHS: u64 = ONES << 7;
    let zero_byte = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
    zero_byte(word ^ (ONES * u64::from(b'"')))
        | zero_byte(word ^ (ONES * u64::from(b'\\')))
        | below_space
}

/// serde_json refuses deeper nesting (its recursion limit).
const MAX_DEPTH: u64 = 127;
/// Keys compared for duplicates per object; a larger object is decoded in full.
const MAX_KEYS: usize = 16;

struct RawString {
    /// Its length re-escaped, quotes included.
    len: u64,
    /// The length of its body as logged.
    body_len: usize,
    escaped: bool,
}

struct Walk<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Walk<'a> {
    fn skip_whitespace(&mut self) {
        while let Some(&byte) = self.text.get(self.at) {
            // Tokens start above the space; whitespace is rare in logs.
            if byte > b' ' || !matches!(byte, b' ' | b'\t' | b'\n' | b'\r') {
                return;
            }
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_whitespace();
        self.text.get(self.at).copied()
    }

    fn value(&mut self, depth: u64) -> Option<u64> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' => self.string().map(|string| string.len),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<u64> {
        let end = self.at + word.len();
        (self.text.get(self.at..end)? == word).then(|| {
            self.at = end;
            word.len() as u64
        })
    }

    fn array(&mut self, depth: u64) -> Option<u64> {
        self.at += 1;
        if self.peek()? == b']' {
            self.at += 1;
            return Some(2);
        }
        let (mut count, mut members) = (0, 0);
        loop {
            members += self.value(depth + 1)?;
            count += 1;
            match self.peek()? {
                b',' => self.at += 1,
                b']' => break,
                _ => return None,
            }
        }
        self.at += 1;
        Some(container_len(depth, count, members))
    }

    fn object(&mut self, depth: u64) -> Option<u64> {
        self.at += 1;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(2);
        }
        let mut keys = [(0, 0); MAX_KEYS];
        let (mut count, mut members) = (0, 0);
        loop {
            if self.peek()? != b'"' || count == MAX_KEYS {
                return None;
            }
            let key_start = self.at + 1;
            let key = self.string()?;
            // A map keeps one entry per key (the first place, the last value),
            // and an escape can spell a key two ways: decode those in full.
            let text = self.text;
            let body = &text[key_start..key_start + key.body_len];
            let seen = |&(start, len): &(usize, usize)| {
                len == body.len() && text[start..start + len] == *body
            };
            if key.escaped || keys[..count].iter().any(seen) {
                return None;
            }
            keys[count] = (key_start, body.len());
            if self.peek()? != b':' {
                return None;
            }
            self.at += 1;
            members += key.len + 2 + self.value(depth + 1)?;
            count += 1;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => break,
                _ => return None,
            }
        }
        self.at += 1;
        Some(container_len(depth, count as u64, members))
    }

    /// A string at `"`.
    fn string(&mut self) -> Option<RawString> {
        let text = self.text;
        let start = self.at + 1;
        let mut at = start;
        // Escapes change the length; every other byte is written as it is.
        let mut escapes_written = 0;
        let mut escapes_read = 0;
        loop {
            // Eight bytes at a time up to the next byte that is not plain.
            while let Some(word) = text.get(at..at + 8) {
                let found = not_plain(u64::from_le_bytes(word.try_into().ok()?));
                if found != 0 {
                    at += (found.trailing_zeros() / 8) as usize;
                    break;
                }
                at += 8;
            }
            while text.get(at).is_some_and(|b| PLAIN[*b as usize]) {
                at += 1;
            }
            match *text.get(at)? {
                b'"' => break,
                b'\\' => {
                    let (written, read) = escape(&text[at..])?;
                    escapes_written += written;
                    escapes_read += read;
                    at += read;
                }
                _ => return None,
            }
        }
        self.at = at + 1;
        Some(RawString {
            len: (at - start - escapes_read) as u64 + escapes_written + 2,
            body_len: at - start,
            escaped: escapes_read > 0,
        })
    }

    /// A number: its logged spelling, except that serde_json writes an
    /// exponent in lower case with its sign (`1E5` becomes `1e+5`).
    fn number(&mut self) -> Option<u64> {
        let text = self.text;
        let start = self.at;
        let mut at = start;
        let digits = |at: &mut usize| {
            let from = *at;
            while text.get(*at).is_some_and(u8::is_ascii_digit) {
                *at += 1;
            }
            *at - from
        };
        if text[at] == b'-' {
            at += 1;
        }
        match text.get(at)? {
            b'0' => at += 1,
            b'1'..=b'9' => {
                digits(&mut at);
            }
            _ => return None,
        }
        if text.get(at) == Some(&b'.') {
            at += 1;
            if digits(&mut at) == 0 {
                return None;
            }
        }
        let mut added_sign = 0;
        if matches!(text.get(at), Some(b'e' | b'E')) {
            at += 1;
            match text.get(at) {
                Some(b'+' | b'-') => at += 1,
                _ => added_sign = 1,
            }
            if digits(&mut at) == 0 {
                return None;
            }
        }
        // `01` and `1x` are no numbers to serde_json.
        if text
            .get(at)
            .is_some_and(|b| b.is_ascii_digit() || b.is_ascii_alphabetic())
        {
            return None;
        }
        self.at = at;
        Some((at - start) as u64 + added_sign)
    }
}

/// An escape at `\`: the bytes serde_json writes for the character it stands
/// for, and the bytes it takes in the text.
fn escape(text: &[u8]) -> Option<(u64, usize)> {
    match *text.get(1)? {
        b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't' => Some((2, 2)),
        b'/' => Some((1, 2)),
        b'u' => {
            let unit = hex4(text.get(2..6)?)?;
            match unit {
                0xD800..=0xDBFF => {
                    let low = text.get(6..12)?;
                    if low[..2] != *b"\\u" || !(0xDC00..=0xDFFF).contains(&hex4(&low[2..])?) {
                        return None;
                    }
                    Some((4, 12))
                }
                0xDC00..=0xDFFF => None,
                0x08 | 0x09 | 0x0A | 0x0C | 0x0D | 0x22 | 0x5C => Some((2, 6)),
                0x00..=0x1F => Some((6, 6)),
                0x20..=0x7F => Some((1, 6)),
                0x80..=0x7FF => Some((2, 6)),
                _ => Some((3, 6)),
            }
        }
        _ => None,
    }
}

fn hex4(digits: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(digits).ok()?;
    if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(text, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::pretty_line;
    use serde_json::Value;

    fn full(text: &str) -> Option<u64> {
        let value: Value = serde_json::from_str(text).ok()?;
        Some(pretty_line(&value).len() as u64 - 1)
    }

    #[test]
    fn the_walk_matches_a_parse_and_print() {
        for text in [
            r#"{"a":1,"b":[1,2,{"c":[]}],"d":{},"e":"x\"\\\/\b\f\n\r\t\u0001\u00e9\ud83d\ude00é"}"#,
            r#"[1E5, -0, -0.0, 1.50, 2e-3, 18446744073709551616, 1e+400, 0]"#,
            r#"  {"nested": [[[[{"deep": true, "no": false, "nil": null}]]]]}  "#,
            r#""\u2028\u007f\u001f""#,
            // Long strings are scanned eight bytes at a time.
            r#"["0123456789abcdef\"0123456", "01234567\\89abcdefghij", "ééééé\né\tabcdefgh"]"#,
        ] {
            assert_eq!(raw_pretty_len(text.as_bytes(), 0), full(text), "{text}");
        }
    }

    #[test]
    fn the_walk_declines_what_it_cannot_be_sure_of() {
        for text in [
            r#"{"a":1,"a":2}"#,
            r#"{"a":1,"\u0061":2}"#,
            r#""\ud800""#,
            "\"\u{1}\"",
            "\"0123456789abc\u{1f}defghij\"",
            "01",
            "[1,]",
            "{\"a\":1} x",
        ] {
            assert_eq!(raw_pretty_len(text.as_bytes(), 0), None, "{text}");
        }
        assert_eq!(raw_pretty_len(b"\"\xff\"", 0), None);
    }

    #[test]
    fn lengths_of_parts_match_serde_json() {
        for n in [0, 7, -7, 10, -10, 99, i64::MAX, i64::MIN] {
            assert_eq!(int_len(n), n.to_string().len() as u64);
        }
        for s in ["", "a\"b\\c", "\u{0}\u{8}\u{1f}\n", "é\u{2028}"] {
            assert_eq!(
                string_len(s),
                serde_json::to_string(s).unwrap().len() as u64
            );
        }
    }
}
