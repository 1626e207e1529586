//! CommonMark blocks for `transcript.md`. Each writer emits one complete block
//! followed by a blank line, and leaves no construct open whatever the text
//! holds, so the next entry always starts at the top level of the document.
//! Text keeps its bytes (grep finds it as logged) except for ANSI escape
//! sequences, which are dropped.

use std::borrow::Cow;

/// The text without ANSI escape sequences (CSI such as colours, OSC such as
/// hyperlinks and titles, and two-byte escapes); a lone ESC is dropped too.
pub fn strip_ansi(text: &str) -> Cow<'_, str> {
    const ESC: u8 = 0x1b;
    let bytes = text.as_bytes();
    // A word at a time (see `longest_run`): most text holds no escape.
    let Some(first) = text.find(char::from(ESC)) else {
        return Cow::Borrowed(text);
    };
    let mut out = Vec::with_capacity(bytes.len());
    out.extend_from_slice(&bytes[..first]);
    let mut i = first;
    while i < bytes.len() {
        if bytes[i] != ESC {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        i += 1;
        match bytes.get(i) {
            // CSI: parameters, intermediates, one final byte.
            Some(b'[') => {
                i += 1;
                while i < bytes.len() && (0x20..=0x3f).contains(&bytes[i]) {
                    i += 1;
                }
                if i < bytes.len() && (0x40..=0x7e).contains(&bytes[i]) {
                    i += 1;
                }
            }
            // OSC, DCS, SOS, PM, APC: a string ended by BEL or ST (ESC \).
            Some(b']' | b'P' | b'X' | b'^' | b'_') => {
                i += 1;
                while i < bytes.len() {
                    if bytes[i] == 0x07 {
                        i += 1;
                        break;
                    }
                    if bytes[i] == ESC && bytes.get(i + 1) == Some(&b'\\') {
                        i += 2;
                        break;
                    }
                    i += 1;
                }
            }
            // Other escapes: intermediates, then one final byte.
            Some(_) => {
                while i < bytes.len() && (0x20..=0x2f).contains(&bytes[i]) {
                    i += 1;
                }
                if i < bytes.len() && (0x30..=0x7e).contains(&bytes[i]) {
                    i += 1;
                }
            }
            None => {}
        }
    }
    // Only ASCII bytes were dropped, so the rest is still UTF-8; the lossy
    // conversion never replaces anything and avoids a second check failing.
    match String::from_utf8(out) {
        Ok(text) => Cow::Owned(text),
        Err(e) => Cow::Owned(String::from_utf8_lossy(e.as_bytes()).into_owned()),
    }
}

/// The longest run of the ASCII character `byte` in `text`. Runs are found
/// with `str::find`, which searches a word at a time: transcripts are mostly
/// text without backticks, and this runs over every byte of them.
fn longest_run(text: &str, byte: u8) -> usize {
    debug_assert!(byte.is_ascii());
    let mut longest = 0;
    let mut at = 0;
    while let Some(found) = text[at..].find(char::from(byte)) {
        let start = at + found;
        let run = text.as_bytes()[start..]
            .iter()
            .take_while(|b| **b == byte)
            .count();
        longest = longest.max(run);
        // After a run of an ASCII byte: still on a character boundary.
        at = start + run;
    }
    longest
}

/// The lines of `text` as CommonMark sees them: `\n`, `\r\n` and a lone `\r`
/// all end a line.
fn lines(text: &str) -> impl Iterator<Item = &str> {
    let text = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .or_else(|| text.strip_suffix('\r'))
        .unwrap_or(text);
    text.split('\n')
        .flat_map(|line| line.strip_suffix('\r').unwrap_or(line).split('\r'))
}

fn end_line(out: &mut Vec<u8>) {
    if !out.ends_with(b"\n") {
        out.push(b'\n');
    }
}

/// A fenced code block: the fence is longer than any backtick run in the text,
/// so no line of it can close the block early.
pub fn fenced(out: &mut Vec<u8>, info: &str, text: &str) {
    let text = strip_ansi(text);
    let fence = longest_run(&text, b'`').max(2) + 1;
    out.extend(std::iter::repeat_n(b'`', fence));
    out.extend_from_slice(info.as_bytes());
    out.push(b'\n');
    if !text.is_empty() {
        out.extend_from_slice(text.as_bytes());
        end_line(out);
    }
    out.extend(std::iter::repeat_n(b'`', fence));
    out.extend_from_slice(b"\n\n");
}

/// A block quote, every line marked, so nothing inside outlives the quote.
pub fn quoted(out: &mut Vec<u8>, text: &str) {
    let text = strip_ansi(text);
    for line in lines(&text) {
        if line.is_empty() {
            out.extend_from_slice(b">\n");
        } else {
            out.extend_from_slice(b"> ");
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
    }
    out.push(b'\n');
}

/// Prose as written, to be rendered as Markdown. A fence it leaves open is
/// closed after it; text whose block structure cannot be followed here (HTML
/// blocks, fences inside lists or quotes) is shown in a `markdown` code block.
pub fn prose(out: &mut Vec<u8>, text: &str) {
    let text = strip_ansi(text);
    if text.is_empty() {
        return;
    }
    match prose_end(&text) {
        ProseEnd::Closed => {
            out.extend_from_slice(text.as_bytes());
            end_line(out);
            out.push(b'\n');
        }
        ProseEnd::OpenFence { byte, len } => {
            out.extend_from_slice(text.as_bytes());
            end_line(out);
            out.extend(std::iter::repeat_n(byte, len));
            out.extend_from_slice(b"\n\n");
        }
        ProseEnd::Unknown => fenced(out, "markdown", &text),
    }
}

/// One line of inline text (a name, a reason): escapes dropped and line breaks
/// and other control characters turned into spaces, so it cannot end its line.
pub fn inline(out: &mut Vec<u8>, text: &str) {
    let text = strip_ansi(text);
    out.extend(
        text.bytes()
            .map(|b| if b < 0x20 || b == 0x7f { b' ' } else { b }),
    );
}

/// An inline code span holding `text` (made one line), however many backticks
/// it contains.
pub fn code_span(out: &mut Vec<u8>, text: &str) {
    let ticks = longest_run(text, b'`') + 1;
    let pad = text.starts_with('`') || text.ends_with('`');
    out.extend(std::iter::repeat_n(b'`', ticks));
    if pad {
        out.push(b' ');
    }
    inline(out, text);
    if pad {
        out.push(b' ');
    }
    out.extend(std::iter::repeat_n(b'`', ticks));
}

/// True when `text` is certainly a unified diff: it starts like one and holds a
/// `---`/`+++` header pair followed by a hunk header.
pub fn is_unified_diff(text: &str) -> bool {
    if !(text.starts_with("--- ") || text.starts_with("diff ")) {
        return false;
    }
    let lines: Vec<&str> = text.lines().take(64).collect();
    lines
        .windows(3)
        .any(|w| w[0].starts_with("--- ") && w[1].starts_with("+++ ") && is_hunk_header(w[2]))
}

fn is_hunk_header(line: &str) -> bool {
    let range = |s: &str| {
        let (start, count) = s.split_once(',').unwrap_or((s, "0"));
        !start.is_empty()
            && start.bytes().all(|b| b.is_ascii_digit())
            && !count.is_empty()
            && count.bytes().all(|b| b.is_ascii_digit())
    };
    let Some(rest) = line.strip_prefix("@@ -") else {
        return false;
    };
    let Some((old, rest)) = rest.split_once(" +") else {
        return false;
    };
    let Some((new, _)) = rest.split_once(" @@") else {
        return false;
    };
    range(old) && range(new)
}

/// What a prose text leaves open at its end, read as CommonMark from the top
/// level.
#[derive(Debug, PartialEq, Eq)]
enum ProseEnd {
    Closed,
    OpenFence {
        byte: u8,
        len: usize,
    },
    /// An HTML block, or a fence where a list or quote may hold it: not
    /// followed here.
    Unknown,
}

/// Follows fenced code blocks at the top level, where the rules are simple: an
/// opening or closing fence is indented by at most three spaces. Once a list
/// or block quote starts, a fence or HTML block may sit inside it with rules
/// this does not follow, so any line that could start one gives up.
fn prose_end(text: &str) -> ProseEnd {
    if !text.bytes().any(|b| matches!(b, b'`' | b'~' | b'<')) {
        return ProseEnd::Closed;
    }
    let mut fence: Option<(u8, usize)> = None;
    let mut in_container = false;
    for line in lines(text) {
        let indent = line.bytes().take_while(|&b| b == b' ').count();
        // A tab before the first character indents it by four or more.
        let rest = &line[indent..];
        let shallow = indent <= 3 && !rest.starts_with('\t');
        if let Some((byte, len)) = fence {
            if shallow && closes_fence(rest, byte, len) {
                fence = None;
            }
            continue;
        }
        if in_container {
            let bare = line.trim_start_matches(|c: char| {
                c.is_ascii_whitespace() || c.is_ascii_digit() || "> -+*.)".contains(c)
            });
            if bare.starts_with("```") || bare.starts_with("~~~") || bare.starts_with('<') {
                return ProseEnd::Unknown;
            }
            continue;
        }
        if !shallow {
            continue;
        }
        if let Some(open) = opens_fence(rest) {
            fence = Some(open);
        } else if rest.starts_with('<') {
            return ProseEnd::Unknown;
        } else if starts_container(rest) {
            in_container = true;
        }
    }
    match fence {
        Some((byte, len)) => ProseEnd::OpenFence { byte, len },
        None => ProseEnd::Closed,
    }
}

fn opens_fence(rest: &str) -> Option<(u8, usize)> {
    let byte = *rest.as_bytes().first()?;
    if byte != b'`' && byte != b'~' {
        return None;
    }
    let len = rest.bytes().take_while(|&b| b == byte).count();
    // A backtick fence's info string may hold no backtick.
    let info_ok = byte == b'~' || !rest[len..].contains('`');
    (len >= 3 && info_ok).then_some((byte, len))
}

fn closes_fence(rest: &str, byte: u8, len: usize) -> bool {
    let run = rest.bytes().take_while(|&b| b == byte).count();
    run >= len && rest[run..].bytes().all(|b| b == b' ' || b == b'\t')
}

fn starts_container(rest: &str) -> bool {
    let bytes = rest.as_bytes();
    let after_marker = |i: usize| matches!(bytes.get(i), None | Some(b' ' | b'\t'));
    match bytes.first() {
        Some(b'>') => true,
        Some(b'-' | b'+' | b'*') => after_marker(1),
        Some(b'0'..=b'9') => {
            let digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
            digits <= 9
                && matches!(bytes.get(digits), Some(b'.' | b')'))
                && after_marker(digits + 1)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(write: impl Fn(&mut Vec<u8>, &str), text: &str) -> String {
        let mut out = Vec::new();
        write(&mut out, text);
        String::from_utf8(out).unwrap()
    }

    /// `longest_run` against a byte-by-byte count, on runs at the ends,
    /// beside multi-byte characters and across the search's word boundaries.
    #[test]
    fn the_longest_run_is_the_one_counted_byte_by_byte() {
        fn counted(text: &str, byte: u8) -> usize {
            let (mut longest, mut run) = (0, 0);
            for &b in text.as_bytes() {
                run = if b == byte { run + 1 } else { 0 };
                longest = longest.max(run);
            }
            longest
        }
        let pieces = ["`", "``", "a", "é", "\u{1F600}", "````````", "\n", " "];
        let mut seed = 7u64;
        for _ in 0..2000 {
            let mut text = String::new();
            for _ in 0..(seed % 40) {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                text.push_str(pieces[(seed >> 33) as usize % pieces.len()]);
            }
            assert_eq!(longest_run(&text, b'`'), counted(&text, b'`'), "{text:?}");
            assert_eq!(longest_run(&text, b'a'), counted(&text, b'a'), "{text:?}");
        }
    }

    #[test]
    fn strips_ansi_sequences_and_keeps_the_rest() {
        assert_eq!(strip_ansi("plain"), "plain");
        assert_eq!(strip_ansi("\x1b[31m--- FAIL\x1b[0m ok"), "--- FAIL ok");
        assert_eq!(strip_ansi("a\x1b[1;32;48;5;10mb"), "ab");
        assert_eq!(
            strip_ansi("\x1b]8;;http://x\x07link\x1b]8;;\x1b\\ done"),
            "link done"
        );
        assert_eq!(strip_ansi("\x1b(Bé\x1b=ü\x1b"), "éü");
    }

    #[test]
    fn fences_are_longer_than_any_backtick_run_inside() {
        assert_eq!(
            render(|o, t| fenced(o, "", t), "a\nb"),
            "```\na\nb\n```\n\n"
        );
        assert_eq!(
            render(|o, t| fenced(o, "diff", t), "x\n````\ny\n"),
            "`````diff\nx\n````\ny\n`````\n\n"
        );
        assert_eq!(render(|o, t| fenced(o, "", t), ""), "```\n```\n\n");
    }

    #[test]
    fn quotes_mark_every_line_whatever_ends_it() {
        assert_eq!(
            render(quoted, "a\n\n```\r\nb\rc\n"),
            "> a\n>\n> ```\n> b\n> c\n\n"
        );
    }

    #[test]
    fn prose_is_written_as_is_and_open_fences_are_closed() {
        let closed = "Here:\n```python\nx = 1\n```\nDone.";
        assert_eq!(render(prose, closed), format!("{closed}\n\n"));
        assert_eq!(
            render(prose, "Start:\n  ~~~~\ncode"),
            "Start:\n  ~~~~\ncode\n~~~~\n\n"
        );
        // Indented four spaces or by a tab, a fence line is code, not a fence.
        assert_eq!(render(prose, "    ```\n\t```"), "    ```\n\t```\n\n");
        // A backtick in the info string makes it inline code.
        assert_eq!(render(prose, "``` a`b"), "``` a`b\n\n");
    }

    #[test]
    fn prose_that_cannot_be_followed_is_shown_as_code() {
        for text in [
            "<!-- open\nmore",
            "- item\n\n  ```\n  code",
            "> quote\n> ```\n> x",
        ] {
            let shown = render(prose, text);
            let fence = shown.split("markdown\n").next().unwrap();
            assert!(
                fence.len() >= 3 && fence.bytes().all(|b| b == b'`'),
                "{text:?}"
            );
            assert!(shown.ends_with(&format!("\n{fence}\n\n")), "{text:?}");
        }
        // A list without fences or HTML is prose.
        assert_eq!(render(prose, "- a\n- b < c"), "- a\n- b < c\n\n");
    }

    #[test]
    fn inline_text_stays_on_its_line() {
        assert_eq!(render(inline, "a\nb\x1b[1m\tc"), "a b c");
        assert_eq!(render(code_span, "x"), "`x`");
        assert_eq!(render(code_span, "a`b"), "``a`b``");
        assert_eq!(render(code_span, "`a"), "`` `a ``");
    }

    #[test]
    fn recognises_unified_diffs_only() {
        assert!(is_unified_diff(
            "--- a/x.go\n+++ b/x.go\n@@ -40,12 +40,12 @@ func W() {\n-a\n+b\n"
        ));
        assert!(is_unified_diff(
            "diff --git a/x b/x\nindex 1..2\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n"
        ));
        assert!(!is_unified_diff("*** Begin Patch\n*** Update File: x\n"));
        assert!(!is_unified_diff("--- a/x\n+++ b/x\nno hunk\n"));
        assert!(!is_unified_diff(
            "git apply <<EOF\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n"
        ));
    }
}
