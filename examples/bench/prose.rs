//! The text of generated sessions: prose for user messages, reasoning and
//! answers, tool output that looks like grep, ls and code, and the cutting of
//! text into streamed deltas. Kept apart from the event shapes in `synth.rs`.

use crate::synth::Rng;

pub const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "a",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "on",
    "be",
    "this",
    "are",
    "or",
    "from",
    "at",
    "an",
    "not",
    "which",
    "but",
    "we",
    "can",
    "all",
    "has",
    "if",
    "so",
    "then",
    "when",
    "now",
    "file",
    "function",
    "return",
    "value",
    "error",
    "test",
    "session",
    "event",
    "data",
    "line",
    "code",
    "struct",
    "impl",
    "self",
    "type",
    "string",
    "path",
    "read",
    "write",
    "build",
    "run",
    "cargo",
    "check",
    "result",
    "option",
    "match",
    "index",
    "list",
    "map",
    "key",
    "seq",
    "turn",
    "step",
    "tool",
    "call",
    "message",
    "user",
    "model",
    "output",
    "input",
    "buffer",
    "frame",
    "header",
    "store",
    "mount",
    "cache",
    "thread",
    "lock",
    "queue",
    "batch",
    "chunk",
    "delta",
    "text",
    "block",
    "start",
    "end",
    "replace",
    "surface",
    "transcript",
    "summary",
    "should",
    "would",
    "could",
    "because",
    "first",
    "next",
    "last",
    "before",
    "after",
    "only",
    "also",
    "into",
    "over",
    "under",
    "again",
    "there",
    "here",
    "where",
    "what",
    "why",
    "how",
    "let",
    "me",
    "look",
    "see",
    "fix",
    "change",
    "update",
    "remove",
    "add",
    "keep",
    "drop",
    "move",
    "copy",
    "parse",
    "decode",
    "encode",
    "compress",
    "scan",
    "offset",
    "length",
    "size",
    "count",
    "number",
    "byte",
    "bytes",
    "field",
    "column",
    "row",
    "table",
    "query",
    "schema",
    "version",
    "config",
    "option",
    "flag",
    "default",
    "argument",
    "parameter",
    "module",
    "crate",
    "package",
    "directory",
    "the test",
    "passes",
    "fails",
    "panics",
    "compiles",
    "warning",
    "clippy",
    "format",
    "commit",
    "branch",
    "review",
    "comment",
    "issue",
    "request",
    "response",
    "client",
    "server",
    "socket",
    "stream",
    "reader",
    "writer",
    "iterator",
    "closure",
    "trait",
    "generic",
    "lifetime",
    "borrow",
    "owned",
    "slice",
    "vector",
    "integer",
    "boolean",
    "unicode",
    "escape",
    "newline",
    "character",
    "memory",
    "allocation",
    "latency",
    "throughput",
    "benchmark",
    "profile",
    "measure",
    "cold",
    "warm",
    "kernel",
    "inode",
    "fuse",
    "handle",
    "permission",
    "owner",
    "group",
    "mode",
    "timestamp",
    "clock",
    "seconds",
    "milliseconds",
    "budget",
    "eviction",
    "index.jsonl",
    "surface.jsonl",
    "transcript.md",
    "header.json",
    "src/store/jsonl.rs",
    "src/view/mod.rs",
    "src/fs/mod.rs",
    "Cargo.toml",
    "README.md",
    "main.rs",
    "lib.rs",
    "mod.rs",
];

/// Writes `words` words of prose, with sentences and now and then a paragraph.
pub fn prose(rng: &mut Rng, words: usize, out: &mut String) {
    let mut sentence = 0;
    for i in 0..words {
        let word = WORDS[rng.skewed(WORDS.len())];
        if i > 0 {
            out.push(' ');
        }
        if sentence == 0 {
            let mut chars = word.chars();
            if let Some(c) = chars.next() {
                out.extend(c.to_uppercase());
                out.push_str(chars.as_str());
            }
        } else {
            out.push_str(word);
        }
        sentence += 1;
        if sentence > 4 && rng.chance(0.12) {
            out.push(if rng.chance(0.9) { '.' } else { '?' });
            sentence = 0;
            if rng.chance(0.08) {
                out.push_str("\n\n");
            }
        } else if rng.chance(0.05) {
            out.push(',');
        }
    }
    out.push('.');
}

/// Tool output: grep-like, listing-like and code-like lines, about `bytes` long.
pub fn tool_output(rng: &mut Rng, bytes: usize, out: &mut String) {
    let start = out.len();
    let w = |rng: &mut Rng| WORDS[rng.skewed(WORDS.len())].replace(' ', "_");
    while out.len() - start < bytes {
        match rng.below(4) {
            0 => {
                let (a, b, c) = (w(rng), w(rng), w(rng));
                out.push_str(&format!(
                    "src/{a}/{b}.rs:{}:    let {c} = {a}.{b}({c});\n",
                    rng.range((1, 2000))
                ));
            }
            1 => {
                let (a, b) = (w(rng), w(rng));
                out.push_str(&format!(
                    "-rw-r--r-- 1 ana ana {:>8} Mar 14 09:{:02} {a}_{b}.rs\n",
                    rng.range((10, 99999)),
                    rng.below(60)
                ));
            }
            2 => {
                let (a, b, c) = (w(rng), w(rng), w(rng));
                out.push_str(&format!("    fn {a}_{b}(&self, {c}: &str) -> Result<(), Error> {{\n        self.{c}.{a}()?;\n    }}\n"));
            }
            _ => {
                let mut line = String::new();
                let words = rng.range((6, 16)) as usize;
                prose(rng, words, &mut line);
                out.push_str("// ");
                out.push_str(&line);
                out.push('\n');
            }
        }
    }
}

/// Cuts `text` into `pieces` roughly equal deltas on char boundaries.
pub fn split_deltas(text: &str, pieces: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let pieces = pieces.clamp(1, chars.len().max(1));
    let mut out = Vec::with_capacity(pieces);
    for k in 0..pieces {
        let (a, b) = (k * chars.len() / pieces, (k + 1) * chars.len() / pieces);
        out.push(chars[a..b].iter().collect());
    }
    out
}
