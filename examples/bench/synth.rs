//! A deterministic generator of Harness-shaped sessions (spec §3.10): turns of
//! steps, each streaming reasoning, text and tool-call chunks that are then
//! folded into an `assistant/message`, tool calls and their results, a session
//! title, request headers, and now and then a summarising compaction or a
//! tool-result prune. Events come out in write-behind batches.

use std::collections::VecDeque;

use serde_json::{Map, Value, json};
use sessionfs::json::JsonMap;

use crate::prose::{WORDS, prose, split_deltas, tool_output};

/// SplitMix64: small, fast and good enough for shaping test data.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// An independent stream for item `n` of a seed.
    pub fn derive(seed: u64, n: u64) -> Rng {
        let mut r = Rng(seed ^ n.wrapping_mul(0xA24B_AED4_963E_E407));
        r.next_u64();
        Rng(r.next_u64())
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, (lo, hi): (u64, u64)) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// A skewed pick from `0..n`: low indexes (common words) come up far more often.
    pub fn skewed(&mut self, n: usize) -> usize {
        let u = self.unit();
        ((u * u) * n as f64) as usize
    }
}

/// How a session is shaped.
#[derive(Clone, Debug)]
pub struct Profile {
    /// Steps per turn; every step but the last makes tool calls.
    pub steps: (u64, u64),
    pub reasoning_chance: f64,
    /// Streamed deltas per reasoning / text block (about one or two words each).
    pub reasoning_deltas: (u64, u64),
    pub text_deltas: (u64, u64),
    /// Chance a tool-calling step also writes text first.
    pub text_with_calls: f64,
    pub calls: (u64, u64),
    pub arg_deltas: (u64, u64),
    pub result_bytes: (u64, u64),
    pub user_words: (u64, u64),
    /// Turns between compactions; (0, 0) for none.
    pub compact_every: (u64, u64),
    /// Chance per turn of pruning one earlier tool result.
    pub prune_chance: f64,
    /// Events per write-behind batch.
    pub batch: (u64, u64),
}

impl Profile {
    /// The large-session profile: mostly streamed chunks in small batches.
    pub fn streaming() -> Profile {
        Profile {
            steps: (1, 4),
            reasoning_chance: 0.6,
            reasoning_deltas: (20, 150),
            text_deltas: (20, 260),
            text_with_calls: 0.5,
            calls: (1, 2),
            arg_deltas: (4, 14),
            result_bytes: (30, 160),
            user_words: (5, 40),
            compact_every: (25, 60),
            prune_chance: 0.05,
            batch: (1, 6),
        }
    }

    /// Sessions of the search store: a more tool-heavy mix.
    pub fn working() -> Profile {
        Profile {
            reasoning_deltas: (10, 60),
            text_deltas: (10, 120),
            result_bytes: (1_000, 20_000),
            batch: (1, 8),
            ..Profile::streaming()
        }
    }

    /// Short sessions for the many-sessions store.
    pub fn short() -> Profile {
        Profile {
            steps: (1, 2),
            reasoning_deltas: (3, 12),
            text_deltas: (5, 30),
            compact_every: (0, 0),
            ..Profile::streaming()
        }
    }

    /// Few events, huge tool results: a session whose transcript is large.
    pub fn bulk() -> Profile {
        Profile {
            steps: (2, 2),
            reasoning_chance: 0.0,
            text_deltas: (5, 10),
            calls: (1, 1),
            result_bytes: (200_000, 320_000),
            compact_every: (0, 0),
            prune_chance: 0.0,
            ..Profile::streaming()
        }
    }
}

struct Node {
    seq: u64,
    /// The data of an append-origin tool result, kept so it can be pruned.
    tool: Option<Value>,
}

const PROVIDER: &str = "acme";
const MODEL: &str = "m-large";

/// Generates one session's events in order.
pub struct SessionGen {
    rng: Rng,
    profile: Profile,
    seq: u64,
    time: i64,
    turn: u64,
    calls: u64,
    compactions: u64,
    until_compaction: u64,
    nodes: Vec<Node>,
    queue: VecDeque<JsonMap>,
    /// A string planted in some user messages, for the search figure.
    needle: Option<String>,
    pub emitted: u64,
}

impl SessionGen {
    pub fn new(rng: Rng, profile: Profile, created_at: i64, needle: Option<String>) -> SessionGen {
        let mut generator = SessionGen {
            rng,
            profile,
            seq: 0,
            time: created_at + 100,
            turn: 0,
            calls: 0,
            compactions: 0,
            until_compaction: 0,
            nodes: Vec::new(),
            queue: VecDeque::new(),
            needle,
            emitted: 0,
        };
        generator.until_compaction = generator.compaction_gap();
        generator
    }

    fn compaction_gap(&mut self) -> u64 {
        match self.profile.compact_every {
            (0, 0) => u64::MAX,
            range => self.rng.range(range),
        }
    }

    /// The size of the next write-behind batch.
    pub fn batch_size(&mut self) -> usize {
        self.rng.range(self.profile.batch) as usize
    }

    /// Up to `n` next events. New turns are generated while `more_turns`;
    /// otherwise only what is queued (the rest of the current turn) comes out.
    pub fn take(&mut self, n: usize, more_turns: bool) -> Vec<JsonMap> {
        while self.queue.len() < n && more_turns {
            self.turn_events();
        }
        let n = n.min(self.queue.len());
        self.emitted += n as u64;
        self.queue.drain(..n).collect()
    }

    /// True when every generated event was taken (the log ends between turns).
    pub fn drained(&self) -> bool {
        self.queue.is_empty()
    }

    fn tick(&mut self, lo: u64, hi: u64) {
        self.time += self.rng.range((lo, hi)) as i64;
    }

    /// Appends one event in the live writer's key order
    /// (`type, seq, time, data, sourceEventSeqs?, surfaceOp?`).
    fn push(
        &mut self,
        event_type: &str,
        data: Value,
        sources: Option<Vec<u64>>,
        op: Option<Value>,
    ) -> u64 {
        let seq = self.seq;
        self.seq += 1;
        let mut event = Map::new();
        event.insert("type".into(), event_type.into());
        event.insert("seq".into(), seq.into());
        event.insert("time".into(), self.time.into());
        event.insert("data".into(), data);
        if let Some(sources) = sources {
            event.insert("sourceEventSeqs".into(), sources.into());
        }
        if let Some(op) = op {
            event.insert("surfaceOp".into(), op);
        }
        self.queue.push_back(event);
        seq
    }

    fn chunk(&mut self, step: u64, chunk: Value, seqs: &mut Vec<u64>) {
        // Clocks can step backwards (spec §10.4): now and then a negative gap.
        if self.rng.chance(0.01) {
            self.time -= self.rng.range((1, 3)) as i64;
        } else {
            self.tick(3, 45);
        }
        let data = json!({"turn": self.turn, "step": step, "chunk": chunk});
        seqs.push(self.push("assistant/chunk", data, None, None));
    }

    /// Streams one text or reasoning block and returns its content block.
    fn stream_block(
        &mut self,
        step: u64,
        index: u64,
        reasoning: bool,
        deltas: (u64, u64),
        seqs: &mut Vec<u64>,
    ) -> Value {
        let (block_type, delta_type) = if reasoning {
            ("reasoning", "reasoning-delta")
        } else {
            ("text", "text-delta")
        };
        self.chunk(
            step,
            json!({"type": "block-start", "index": index, "blockType": block_type}),
            seqs,
        );
        // Prose cut into token-sized deltas (1 to 7 characters), as models stream.
        let mut text = String::new();
        let words = self.rng.range(deltas) * 3 / 5;
        prose(&mut self.rng, words as usize, &mut text);
        let mut rest = text.as_str();
        while !rest.is_empty() {
            let take = self.rng.range((1, 7)) as usize;
            let end = rest.char_indices().nth(take).map_or(rest.len(), |(i, _)| i);
            let (piece, tail) = rest.split_at(end);
            rest = tail;
            self.chunk(
                step,
                json!({"type": delta_type, "index": index, "text": piece}),
                seqs,
            );
        }
        let block = json!({"type": block_type, "text": text});
        self.chunk(
            step,
            json!({"type": "block-end", "index": index, "block": block.clone()}),
            seqs,
        );
        block
    }

    fn tool_call_block(
        &mut self,
        step: u64,
        index: u64,
        seqs: &mut Vec<u64>,
    ) -> (String, String, String) {
        self.calls += 1;
        let id = format!("call-{}-{}", self.turn, self.calls);
        let (name, arguments) = match self.rng.below(3) {
            0 => {
                let w = WORDS[self.rng.skewed(WORDS.len())];
                ("sh", json!({"cmd": format!("grep -rn \"{w}\" src")}).to_string())
            }
            1 => ("read_file", json!({"path": format!("src/{}.rs", WORDS[self.rng.skewed(WORDS.len())].replace(' ', "_"))}).to_string()),
            _ => ("list_dir", json!({"path": "src", "depth": self.rng.range((1, 3))}).to_string()),
        };
        self.chunk(
            step,
            json!({"type": "block-start", "index": index, "blockType": "tool-call"}),
            seqs,
        );
        // Some providers send the tool name on the first delta only.
        let name_once = self.rng.chance(0.1);
        let deltas = self.rng.range(self.profile.arg_deltas) as usize;
        for (k, piece) in split_deltas(&arguments, deltas).into_iter().enumerate() {
            let chunk = if k == 0 || !name_once {
                json!({"type": "tool-call-delta", "index": index, "id": id, "name": name, "argumentsDelta": piece})
            } else {
                json!({"type": "tool-call-delta", "index": index, "id": id, "argumentsDelta": piece})
            };
            self.chunk(step, chunk, seqs);
        }
        let block = json!({"type": "tool-call", "id": id, "name": name, "arguments": arguments});
        self.chunk(
            step,
            json!({"type": "block-end", "index": index, "block": block}),
            seqs,
        );
        (id, name.to_string(), arguments)
    }

    fn user_message(&mut self, first_turn: bool) -> u64 {
        let mut text = String::new();
        let words = self.rng.range(self.profile.user_words) as usize;
        prose(&mut self.rng, words, &mut text);
        // The needle goes into the second turn's prompt.
        if let Some(needle) = self.needle.as_ref().filter(|_| self.turn == 2) {
            text.push_str(&format!(" Please look for {needle} in the logs."));
        }
        let id = format!("user-{}", self.turn);
        let data = json!({"content": [{"type": "text", "text": text}], "source": {"kind": "user"}, "role": "user", "id": id});
        let seq = self.push("user/message", data, None, Some("append".into()));
        self.nodes.push(Node { seq, tool: None });
        if first_turn {
            self.tick(1, 5);
            let mut title = String::new();
            prose(&mut self.rng, 4, &mut title);
            let data =
                json!({"title": title, "messageSeqs": [seq], "source": {"kind": "fallback"}});
            self.push("session/title", data, None, None);
        }
        seq
    }

    fn request_header(&mut self, reason: &str) {
        let header = json!({
            "config": {"provider": PROVIDER, "model": MODEL},
            "system": "You are a careful coding assistant. Answer tersely.",
            "tools": [
                {"name": "sh", "description": "run a shell command", "parameters": {"type": "object"}},
                {"name": "read_file", "description": "read a file", "parameters": {"type": "object"}},
                {"name": "list_dir", "description": "list a directory", "parameters": {"type": "object"}},
            ],
        });
        self.push(
            "request/header",
            json!({"header": header, "reason": reason}),
            None,
            None,
        );
        if reason == "initial" {
            self.push(
                "request/context",
                json!({"provider": PROVIDER, "model": MODEL, "contextWindow": 131072}),
                None,
                None,
            );
        }
    }

    /// One whole turn, preceded sometimes by a compaction or a prune.
    fn turn_events(&mut self) {
        if self.until_compaction == 0 && self.nodes.len() >= 8 {
            self.compaction();
            self.until_compaction = self.compaction_gap();
        }
        self.until_compaction = self.until_compaction.saturating_sub(1);
        if self.rng.chance(self.profile.prune_chance) {
            self.prune();
        }
        self.turn += 1;
        self.tick(5_000, 90_000);
        let turn = self.turn;
        self.push("turn/start", json!({"turn": turn}), None, None);
        let steps = self.rng.range(self.profile.steps);
        for step in 1..=steps {
            self.tick(1, 5);
            self.push(
                "step/start",
                json!({"turn": turn, "step": step}),
                None,
                None,
            );
            if step == 1 {
                self.tick(1, 5);
                self.user_message(turn == 1);
                self.tick(10, 60);
                if turn == 1 {
                    self.request_header("initial");
                } else if self.rng.chance(0.02) {
                    self.request_header("change");
                }
            }
            self.tick(150, 900);
            let calling = step < steps;
            let mut seqs = Vec::new();
            let mut content = Vec::new();
            let mut index = 0;
            if self.rng.chance(self.profile.reasoning_chance) {
                content.push(self.stream_block(
                    step,
                    index,
                    true,
                    self.profile.reasoning_deltas,
                    &mut seqs,
                ));
                index += 1;
            }
            if !calling || self.rng.chance(self.profile.text_with_calls) {
                content.push(self.stream_block(
                    step,
                    index,
                    false,
                    self.profile.text_deltas,
                    &mut seqs,
                ));
                index += 1;
            }
            let mut calls = Vec::new();
            if calling {
                for _ in 0..self.rng.range(self.profile.calls) {
                    let call = self.tool_call_block(step, index, &mut seqs);
                    content.push(json!({"type": "tool-call", "id": call.0, "name": call.1, "arguments": call.2}));
                    calls.push(call);
                    index += 1;
                }
            }
            let usage = json!({"inputTokens": self.rng.range((2_000, 60_000)), "outputTokens": seqs.len() * 2});
            self.chunk(
                step,
                json!({"type": "usage", "usage": usage.clone()}),
                &mut seqs,
            );
            let finish = if calling { "tool-calls" } else { "stop" };
            self.chunk(
                step,
                json!({"type": "finish", "reason": {"kind": finish}}),
                &mut seqs,
            );
            self.tick(1, 3);
            let message = json!({
                "role": "assistant",
                "content": content,
                "source": {"kind": "model", "provider": PROVIDER, "model": MODEL},
                "id": format!("asst-{turn}-{step}"),
            });
            let data = json!({"turn": turn, "step": step, "message": message, "usage": usage});
            let seq = self.push("assistant/message", data, Some(seqs), Some("append".into()));
            self.nodes.push(Node { seq, tool: None });
            let mut call_seqs = Vec::new();
            for (id, name, arguments) in &calls {
                self.tick(1, 3);
                let data = json!({"turn": turn, "step": step, "callId": id, "name": name, "arguments": arguments});
                call_seqs.push(self.push("tool/call", data, None, None));
            }
            for ((id, _, _), call_seq) in calls.iter().zip(call_seqs) {
                self.tick(20, 2_000);
                let mut output = String::new();
                let bytes = self.rng.range(self.profile.result_bytes) as usize;
                tool_output(&mut self.rng, bytes, &mut output);
                let message = json!({
                    "source": {"kind": "tool", "callId": id},
                    "content": [{"type": "tool-result", "toolCallId": id, "content": [{"type": "text", "text": output}], "isError": false}],
                    "role": "user",
                    "id": format!("result-{id}"),
                });
                let data = json!({"turn": turn, "step": step, "message": message});
                let kept = (self.profile.prune_chance > 0.0).then(|| data.clone());
                let seq = self.push(
                    "tool/result",
                    data,
                    Some(vec![call_seq]),
                    Some("append".into()),
                );
                self.nodes.push(Node { seq, tool: kept });
            }
            self.tick(1, 5);
            self.push("step/end", json!({"turn": turn, "step": step}), None, None);
        }
        self.tick(1, 5);
        self.push(
            "turn/end",
            json!({"turn": turn, "reason": {"kind": "completed"}}),
            None,
            None,
        );
    }

    /// A summarising compaction between turns (spec §3.9): start, summary, the
    /// replacement user message over all but the last few surface nodes, end.
    fn compaction(&mut self) {
        self.compactions += 1;
        let id = format!("compaction-{}", self.compactions);
        let keep = self.rng.range((2, 4)) as usize;
        let last = self.nodes.len() - 1 - keep;
        let shadowed: Vec<u64> = self.nodes[..=last].iter().map(|n| n.seq).collect();
        let (start, end) = (shadowed[0], shadowed[last]);
        self.tick(100, 2_000);
        let start_seq = self.push(
            "compaction/start",
            json!({"compactionId": id, "turn": null}),
            None,
            None,
        );
        let mut summary = String::new();
        let words = self.rng.range((80, 300)) as usize;
        prose(&mut self.rng, words, &mut summary);
        self.tick(2_000, 20_000);
        let data = json!({
            "compactionId": id,
            "summary": [{"type": "text", "text": summary}],
            "shadowedRange": {"start": start, "end": end},
            "shadowedSeqs": shadowed,
            "shadowedTokenCount": shadowed.len() as u64 * 350,
            "provider": PROVIDER,
            "model": MODEL,
        });
        let summary_seq = self.push("compaction/summary", data, None, None);
        let framing = "This session is being continued from an earlier conversation that ran out of context. \
            The summary below covers the earlier part of the conversation.\n\n<compacted-summary>";
        let data = json!({
            "content": [
                {"type": "text", "text": framing},
                {"type": "text", "text": summary},
                {"type": "text", "text": "</compacted-summary>"},
            ],
            "source": {"kind": "plugin", "plugin": "compact", "compactionId": id},
            "role": "user",
            "id": format!("{id}-checkpoint"),
        });
        let mut sources = vec![start_seq, summary_seq];
        sources.extend(&shadowed);
        self.tick(1, 5);
        let op = json!({"op": "replace", "start": start, "end": end});
        let seq = self.push("user/message", data, Some(sources), Some(op));
        self.nodes.splice(..=last, [Node { seq, tool: None }]);
        self.tick(1, 5);
        self.push(
            "compaction/end",
            json!({"compactionId": id, "turn": null}),
            None,
            None,
        );
    }

    /// A tool-result prune (spec §3.9): `compaction/prune`, then the same result
    /// with its output shortened, replacing the original on the surface.
    fn prune(&mut self) {
        let candidates: Vec<usize> = (0..self.nodes.len().saturating_sub(4))
            .filter(|&i| self.nodes[i].tool.is_some())
            .collect();
        if candidates.is_empty() {
            return;
        }
        let at = candidates[self.rng.below(candidates.len() as u64) as usize];
        let Some(mut data) = self.nodes[at].tool.take() else {
            return;
        };
        let original = self.nodes[at].seq;
        let old = data
            .pointer("/message/content/0/content/0/text")
            .and_then(Value::as_str)
            .map_or(0, str::len);
        if let Some(content) = data.pointer_mut("/message/content/0/content") {
            *content =
                json!([{"type": "text", "text": format!("[tool output pruned: {old} bytes]")}]);
        }
        self.tick(10, 200);
        let range = json!({"start": original, "end": original});
        let prune = json!({"shadowedRange": range, "shadowedSeqs": [original], "shadowedTokenCount": old / 4});
        self.push("compaction/prune", prune, None, None);
        let op = json!({"op": "replace", "start": original, "end": original});
        let seq = self.push("tool/result", data, Some(vec![original]), Some(op));
        self.nodes[at] = Node { seq, tool: None };
    }
}
