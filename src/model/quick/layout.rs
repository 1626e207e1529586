//! The quick readers' first try: a record written exactly as the Harness
//! writes it (compact, keys in its order, plain integers) is matched byte by
//! byte, and only its free parts (a lone chunk's `data`, a row's strings) are
//! walked for their printed length. This skips building serde's view of the
//! record, which was most of the cold scan's time. Anything else, a space, a
//! key out of place, a fraction, a long number, gives `None` and the serde
//! reader (`super`) decides; the quick-decoding tests hold both to the full
//! decoder, on records mutated in every such way.

use crate::json_len::{Cursor, container_len, member_len, string_len};
use crate::model::chunk_rows::{RowKind, RowLimits};
use crate::model::validate::CHUNK_TYPE;
use crate::model::{ChunkRun, ChunkStep};

use super::{RowData, SpelledNumber, StringLen, run, safe_seq, safe_time};

/// A lone `assistant/chunk` event in the Harness's layout; as `super::jsonl_record`.
pub(super) fn lone_chunk(line: &[u8]) -> Option<ChunkRun> {
    let mut read = Layout::new(line)?;
    read.tag(br#"{"type":"assistant/chunk","seq":"#)?;
    let seq = read.integer()?;
    read.tag(br#","time":"#)?;
    let time = read.integer()?;
    read.tag(br#","data":"#)?;
    let data_at = read.at;
    read.tag(br#"{"turn":"#)?;
    let turn = read.integer()?;
    read.tag(br#","step":"#)?;
    let step = read.integer()?;
    read.tag(br#","chunk":{"type":""#)?;
    // The steps/ rule needs a finish's kind; an escaped kind is read in full.
    let kind_len = read.rest().iter().position(|b| *b == b'"')?;
    let kind = &read.rest()[..kind_len];
    if kind == b"finish" || kind.contains(&b'\\') {
        return None;
    }
    // The whole of `data` is walked: its size, and no duplicate key in it.
    let mut data = Cursor::new(read.text, data_at);
    let data_len = data.value(1)?;
    read.at = data.at();
    read.tag(b"}")?;
    read.at_end()?;
    let fields = member_len("type", string_len(CHUNK_TYPE))
        + member_len("seq", seq.len)
        + member_len("time", time.len)
        + member_len("data", data_len);
    Some(ChunkRun {
        seq0: safe_seq(u64::try_from(seq.value).ok()?)?,
        times: vec![safe_time(time.value)?],
        sizes: vec![container_len(0, 4, fields) + 1],
        step: ChunkStep {
            turn: turn.value as f64,
            step: step.value as f64,
        },
    })
}

/// A packed row of `kind` in the Harness's layout; as `super::jsonl_record`.
pub(super) fn row(kind: RowKind, line: &[u8], limits: RowLimits) -> Option<ChunkRun> {
    let mut read = Layout::new(line)?;
    read.tag(br#"{"type":""#)?;
    read.tag(kind.tag().as_bytes())?;
    read.tag(br#"","seq0":"#)?;
    let seq0 = read.integer()?;
    read.tag(br#","time0":"#)?;
    let time0 = read.integer()?;
    read.tag(br#","data":{"turn":"#)?;
    let turn = read.integer()?.spelled();
    read.tag(br#","step":"#)?;
    let step = read.integer()?.spelled();
    read.tag(br#","index":"#)?;
    let index = read.integer()?.spelled();
    read.tag(br#","dt":["#)?;
    let dt = read.list(|read| read.integer().map(|dt| dt.value))?;
    let tool = match kind {
        RowKind::ToolCall => {
            read.tag(br#","id":"#)?;
            let id = read.string()?;
            let name = match read.tag(br#","name":"#) {
                Some(()) => read.string()?,
                None => StringLen(0),
            };
            read.tag(br#","args":["#)?;
            Some((id, name))
        }
        RowKind::Text | RowKind::Reasoning => {
            read.tag(br#","texts":["#)?;
            None
        }
    };
    let members = read.list(Layout::string)?;
    read.tag(b"}}")?;
    read.at_end()?;
    let data = RowData {
        turn,
        step,
        index,
        tool,
        dt,
        members,
    };
    let seq0 = safe_seq(u64::try_from(seq0.value).ok()?)?;
    run(kind, seq0, safe_time(time0.value)?, data, limits)
}

/// A line of valid UTF-8 read from the front.
struct Layout<'a> {
    text: &'a str,
    at: usize,
}

/// An integer as logged: its value and its length in digits (and sign).
struct Integer {
    value: i64,
    len: u64,
}

impl Integer {
    fn spelled(self) -> SpelledNumber {
        SpelledNumber {
            value: self.value as f64,
            len: self.len,
        }
    }
}

/// The most digits read here: every such integer is safe in a double.
const MAX_DIGITS: usize = 15;

impl<'a> Layout<'a> {
    fn new(line: &'a [u8]) -> Option<Layout<'a>> {
        let text = std::str::from_utf8(line).ok()?;
        Some(Layout { text, at: 0 })
    }

    fn rest(&self) -> &'a [u8] {
        &self.text.as_bytes()[self.at..]
    }

    /// Steps over `expected` when the text goes on with it.
    fn tag(&mut self, expected: &[u8]) -> Option<()> {
        self.rest().starts_with(expected).then(|| {
            self.at += expected.len();
        })
    }

    fn at_end(&self) -> Option<()> {
        (self.at == self.text.len()).then_some(())
    }

    /// An integer spelled as serde_json prints it: no plus, no leading zero,
    /// no `-0`, and not so long that its spelling could matter. What follows
    /// it is the caller's tag, so `1.5` or `1e3` fail there.
    fn integer(&mut self) -> Option<Integer> {
        let rest = self.rest();
        let negative = rest.first() == Some(&b'-');
        let digits = &rest[usize::from(negative)..];
        let count = digits.iter().take_while(|b| b.is_ascii_digit()).count();
        if count == 0 || count > MAX_DIGITS || (digits[0] == b'0' && (count > 1 || negative)) {
            return None;
        }
        let magnitude = digits[..count]
            .iter()
            .fold(0i64, |value, digit| value * 10 + i64::from(digit - b'0'));
        let len = count + usize::from(negative);
        self.at += len;
        Some(Integer {
            value: if negative { -magnitude } else { magnitude },
            len: len as u64,
        })
    }

    /// A string's printed length, escapes and all.
    fn string(&mut self) -> Option<StringLen> {
        let mut cursor = Cursor::new(self.text, self.at);
        let len = cursor.string()?;
        self.at = cursor.at();
        Some(StringLen(len))
    }

    /// The items of a list whose `[` is read, through its `]`.
    fn list<T>(&mut self, mut item: impl FnMut(&mut Self) -> Option<T>) -> Option<Vec<T>> {
        let mut items = Vec::new();
        if self.tag(b"]").is_some() {
            return Some(items);
        }
        loop {
            items.push(item(self)?);
            if self.tag(b"]").is_some() {
                return Some(items);
            }
            self.tag(b",")?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{lone_chunk_by_serde, row_by_serde, row_kind};
    use super::*;
    use crate::model::chunk_rows::{JSONL_ROW_LIMITS, SQLITE_ROW_LIMITS};

    /// Records as the Harness writes them take this path, and read as serde reads them.
    #[test]
    fn the_harness_layout_reads_as_serde_reads_it() {
        for line in [
            r#"{"type":"assistant/chunk","seq":12,"time":1773000089806,"data":{"turn":1,"step":1,"chunk":{"type":"reasoning-delta","index":0,"text":"ith t"}}}"#,
            r#"{"type":"assistant/chunk","seq":0,"time":-5,"data":{"turn":10,"step":200,"chunk":{"type":"block-start","index":0,"blockType":"reasoning"},"extra":[1.5E3,null]}}"#,
            r#"{"type":"assistant/chunk","seq":7,"time":0,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"é \" \\ \u00e9 \ud83d\ude00 \t\u0001"}}}"#,
        ] {
            let fast = lone_chunk(line.as_bytes());
            assert!(fast.is_some(), "{line}");
            assert_eq!(fast, lone_chunk_by_serde(line.as_bytes()), "{line}");
        }
        for line in [
            r#"{"type":"reasoning-chunks","seq0":7,"time0":1773000089675,"data":{"turn":1,"step":1,"index":0,"dt":[18,45,24,41],"texts":["The ","f","uncti","on, b","e w"]}}"#,
            r#"{"type":"text-chunks","seq0":0,"time0":3,"data":{"turn":2,"step":3,"index":4,"dt":[],"texts":["\n\"é\u2028"]}}"#,
            r#"{"type":"tool-call-chunks","seq0":221,"time0":1773000138628,"data":{"turn":2,"step":1,"index":1,"dt":[12,-25,0],"id":"call-2-1","name":"sh","args":[":\"","gre","p ","-r"]}}"#,
            r#"{"type":"tool-call-chunks","seq0":1,"time0":2,"data":{"turn":-2,"step":1,"index":1,"dt":[12,25],"id":"","args":["a","","\\"]}}"#,
        ] {
            let bytes = line.as_bytes();
            let kind = row_kind(bytes).unwrap();
            let fast = row(kind, bytes, JSONL_ROW_LIMITS);
            assert!(fast.is_some(), "{line}");
            assert_eq!(fast, row_by_serde(kind, bytes, JSONL_ROW_LIMITS), "{line}");
            // SQLite's limits (3 to 1024 members) apply alike.
            let sqlite = row(kind, bytes, SQLITE_ROW_LIMITS);
            assert_eq!(sqlite, row_by_serde(kind, bytes, SQLITE_ROW_LIMITS));
        }
    }

    /// What the byte match is not sure of is serde's to read, even when valid.
    #[test]
    fn other_spellings_are_left_to_serde() {
        for line in [
            r#"{"type":"assistant/chunk","seq":12,"time":1,"data":{"turn":1, "step":1,"chunk":{"type":"text-delta","text":""}}}"#,
            r#"{"type":"assistant/chunk","seq":12,"time":1,"data":{"turn":1.0,"step":1,"chunk":{"type":"text-delta","text":""}}}"#,
            r#"{"type":"assistant/chunk","seq":12,"time":1,"data":{"turn":1,"step":1,"chunk":{"type":"text\u002ddelta","text":""}}}"#,
            r#"{"type":"assistant/chunk","seq":1234567890123456,"time":1,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","text":""}}}"#,
            r#"{"type":"assistant/chunk","seq":12,"time":-0,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","text":""}}}"#,
            r#"{"type":"assistant/chunk","seq":12,"time":1,"data":{"step":1,"turn":1,"chunk":{"type":"text-delta","text":""}}} "#,
        ] {
            assert_eq!(lone_chunk(line.as_bytes()), None, "{line}");
        }
        for line in [
            r#"{"type":"text-chunks","seq0":0,"time0":3,"data":{"turn":2,"step":3,"index":4,"dt":[ 1],"texts":["a","b"]}}"#,
            r#"{"type":"text-chunks","seq0":0,"time0":3,"data":{"turn":2,"step":3,"index":04,"dt":[1],"texts":["a","b"]}}"#,
            r#"{"type":"tool-call-chunks","seq0":1,"time0":2,"data":{"turn":2,"step":1,"index":1,"dt":[1],"name":"sh","id":"c","args":["a","b"]}}"#,
        ] {
            let bytes = line.as_bytes();
            assert_eq!(
                row(row_kind(bytes).unwrap(), bytes, JSONL_ROW_LIMITS),
                None,
                "{line}"
            );
        }
    }
}
