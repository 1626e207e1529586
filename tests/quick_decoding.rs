//! The quick chunk readers (`model::quick`) against the full decoder: on every
//! record they accept, the fold must end in the same state, or fail with the same
//! refusal, as it does on the fully decoded events, each chunk must name the
//! same turn and step (a `finish` chunk is never read quickly), and each
//! chunk's size must be the length of its rendered file in `events/`. Records
//! are generated from valid templates and then mutated at random (values
//! swapped, keys dropped, added or duplicated, bytes flipped, strings and
//! numbers spelled otherwise), so the narrow edges are exercised.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Rng;
use serde_json::{Value, json};
use sessionfs::json::JsonMap;
use sessionfs::model::chunk_rows::{
    JSONL_ROW_LIMITS, RowKind, RowLimits, SQLITE_ROW_LIMITS, expand_jsonl_row, expand_row_data,
};
use sessionfs::model::fold::SessionFold;
use sessionfs::model::header::SessionHeader;
use sessionfs::model::quick;
use sessionfs::model::{ChunkRun, Scanned};
use sessionfs::render::event_file;
use sessionfs::store::Backend;
use sessionfs::store::{EventLoc, ScanPoint};
use sessionfs::view::{FileId, Refused, SessionSource, SessionView};

const TEXTS: &[&str] = &[
    "a",
    "",
    "é\u{2028}",
    "quote \" and \\ slash",
    "\u{1F600}",
    "tab\t",
    "\u{0}\u{8}\u{c}\r\n\u{1f}\u{7f}",
    "a/b</script>",
    "\u{10FFFF}\u{2029}\u{FEFF}",
];

/// A valid record: a lone chunk event or a packed row, seqs from 0.
fn template(rng: &mut Rng) -> Value {
    let members = 1 + rng.below(6);
    let texts: Vec<&str> = (0..members).map(|_| rng.pick(TEXTS)).collect();
    let dt: Vec<i64> = (1..members).map(|_| rng.below(80) as i64 - 20).collect();
    let time0 = 1_773_000_000_000i64 + rng.below(1000) as i64;
    match rng.below(5) {
        0 => {
            let chunk = match rng.below(4) {
                0 => json!({"type": "text-delta", "index": 0, "text": texts[0]}),
                1 => json!({"type": "block-start", "index": 1, "blockType": "tool-call"}),
                // Never read quickly: the steps/ rule needs a finish's kind.
                2 => json!({"type": "finish", "reason": {"kind": "error"}}),
                _ => {
                    json!({"type": "tool-call-delta", "index": 2, "id": "c-1", "argumentsDelta": texts[0]})
                }
            };
            json!({"type": "assistant/chunk", "seq": 0, "time": time0, "data": {"turn": 1, "step": 1, "chunk": chunk}})
        }
        1 => {
            json!({"type": "text-chunks", "seq0": 0, "time0": time0, "data": {"turn": 1, "step": 2, "index": 0, "dt": dt, "texts": texts}})
        }
        2 => {
            json!({"type": "reasoning-chunks", "seq0": 0, "time0": time0, "data": {"turn": 3, "step": 1, "index": 1, "dt": dt, "texts": texts}})
        }
        3 => {
            json!({"type": "tool-call-chunks", "seq0": 0, "time0": time0, "data": {"turn": 1, "step": 1, "index": 0, "dt": dt, "id": "call-1", "name": "sh", "args": texts}})
        }
        _ => {
            json!({"type": "tool-call-chunks", "seq0": 0, "time0": time0, "data": {"turn": 1, "step": 1, "index": 0, "dt": dt, "id": "call-1", "args": texts}})
        }
    }
}

const ODD_VALUES: &[&str] = &[
    "null",
    "1.5",
    "1E5",
    "-2.50e-7",
    "0.1e+2",
    "[[], {}, [{}]]",
    "{\"a\": {\"b\": [1, \"x\\u00e9\"]}, \"c\": \"\\/\"}",
    "2.0",
    "-0",
    "1e3",
    "-1",
    "9007199254740991",
    "9007199254740992",
    "-9007199254740992",
    "18446744073709551616",
    "\"x\"",
    "[]",
    "[\"a\"]",
    "[1]",
    "{}",
    "true",
];

/// Every path to a value inside `value`.
fn paths(value: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    out.push(prefix.clone());
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                prefix.push(key.clone());
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                prefix.push(i.to_string());
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

fn at<'a>(value: &'a mut Value, path: &[String]) -> &'a mut Value {
    path.iter().fold(value, |v, key| match v {
        Value::Object(map) => map.get_mut(key).unwrap(),
        Value::Array(items) => &mut items[key.parse::<usize>().unwrap()],
        _ => unreachable!(),
    })
}

/// One random change to a valid record, as text.
fn mutate(rng: &mut Rng, mut value: Value) -> Vec<u8> {
    let mut all = Vec::new();
    paths(&value, &mut Vec::new(), &mut all);
    let path = all[1 + rng.index(all.len() - 1)].clone();
    let text = |v: &Value| serde_json::to_string(v).unwrap();
    match rng.below(7) {
        0 => {
            let odd: Value = serde_json::from_str(rng.pick(ODD_VALUES)).unwrap();
            *at(&mut value, &path) = odd;
            text(&value).into_bytes()
        }
        1 => {
            let (last, parent) = path.split_last().unwrap();
            match at(&mut value, parent) {
                Value::Object(map) => {
                    map.shift_remove(last);
                }
                Value::Array(items) => {
                    items.remove(last.parse::<usize>().unwrap());
                }
                _ => {}
            }
            text(&value).into_bytes()
        }
        2 => {
            let (_, parent) = path.split_last().unwrap();
            if let Value::Object(map) = at(&mut value, parent) {
                map.insert(
                    rng.pick(&["surfaceOp", "ignorable", "extra", "name", "seq"])
                        .to_string(),
                    json!(true),
                );
            }
            text(&value).into_bytes()
        }
        3 => {
            // A duplicate key, which a JSON map keeps the last of.
            let line = text(&value);
            let key = rng.pick(&[
                "seq", "seq0", "time", "time0", "dt", "texts", "type", "data",
            ]);
            let needle = format!("\"{key}\":");
            match line.find(&needle) {
                Some(pos) => format!(
                    "{}\"{key}\":{},{}",
                    &line[..pos],
                    rng.pick(ODD_VALUES),
                    &line[pos..]
                )
                .into_bytes(),
                None => line.into_bytes(),
            }
        }
        4 => {
            let mut bytes = text(&value).into_bytes();
            let byte = rng.pick(b"\"\\{}[],:0 9-ez\xff\x00\n");
            // A byte replaced, put in, or left after the record's end.
            match rng.below(3) {
                0 => {
                    let i = rng.index(bytes.len());
                    bytes[i] = byte;
                }
                1 => bytes.insert(rng.index(bytes.len() + 1), byte),
                _ => bytes.push(byte),
            }
            bytes
        }
        5 => {
            if rng.below(2) == 0 {
                *at(&mut value, &path) = serde_json::from_str(rng.pick(ODD_VALUES)).unwrap();
            }
            respell(rng, &text(&value)).into_bytes()
        }
        _ => {
            *at(&mut value, &path) = json!(rng.next() as i64 % 3 - 1);
            text(&value).into_bytes()
        }
    }
}

/// The same JSON spelled otherwise at random places after the record's first
/// key and value (which the quick reader matches as written): characters of
/// strings as `\u` escapes (surrogate pairs beyond the BMP; keys rarely), `/`
/// as `\/`, exponents in upper case or without a sign, whitespace between tokens.
fn respell(rng: &mut Rng, compact: &str) -> String {
    let kept = compact.find(',').map_or(compact.len(), |at| at + 1);
    let mut out = compact[..kept].to_string();
    let mut objects = vec![true];
    let (mut in_string, mut is_key, mut escaped, mut last) = (false, false, false, ',');
    for c in compact[kept..].chars() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            } else if rng.below(if is_key { 40 } else { 3 }) == 0 {
                if c == '/' {
                    out.push_str("\\/");
                } else {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                continue;
            }
            out.push(c);
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                is_key = last == '{' || (last == ',' && objects.last() == Some(&true));
            }
            '{' | '[' => objects.push(c == '{'),
            '}' | ']' => {
                objects.pop();
            }
            _ => {}
        }
        last = c;
        match c {
            'e' if rng.below(2) == 0 => {
                out.push('E');
                continue;
            }
            '+' if rng.below(2) == 0 => continue,
            ',' | ':' | '[' | '{' if rng.below(4) == 0 => {
                out.push(c);
                out.push_str(rng.pick(&[" ", "\n", "\t ", "\r\n"]));
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

fn maybe_respelled(rng: &mut Rng, data: Vec<u8>) -> Vec<u8> {
    match rng.below(2) {
        0 => respell(rng, &String::from_utf8(data).unwrap()).into_bytes(),
        _ => data,
    }
}

/// The full decoder of a JSONL record (as the scan uses it without the quick path).
fn decode_full(line: &[u8], limits: RowLimits) -> Option<Vec<JsonMap>> {
    let text = String::from_utf8_lossy(line);
    let Value::Object(map) = serde_json::from_str::<Value>(&text).ok()? else {
        return None;
    };
    match map
        .get("type")
        .and_then(Value::as_str)
        .and_then(RowKind::from_tag)
    {
        Some(kind) => expand_jsonl_row(kind, &map, limits).ok(),
        None => Some(vec![map]),
    }
}

fn fold() -> SessionFold {
    SessionFold::new(&SessionHeader::new("s", 1), "s").unwrap()
}

/// The fold's state and result after folding `events` one way or the other,
/// and each chunk's turn and step as the steps/ rule reads them.
fn folded(events: impl Iterator<Item = Scanned>) -> String {
    let mut fold = fold();
    let results: Vec<_> = events
        .map(|mut e| (fold.observe_scanned(&mut e), chunk_step(&e)))
        .collect();
    format!("{results:?} {fold:?}")
}

fn chunk_step(event: &Scanned) -> Option<(f64, f64)> {
    match event {
        Scanned::Chunk { step, .. } => Some((step.turn, step.step)),
        Scanned::Event(event) => {
            let data = event.get("data")?;
            Some((data.get("turn")?.as_f64()?, data.get("step")?.as_f64()?))
        }
    }
}

fn is_finish(event: &JsonMap) -> bool {
    event.get("type") == Some(&json!("assistant/chunk"))
        && event.get("data").and_then(|d| d.pointer("/chunk/type")) == Some(&json!("finish"))
}

fn check_record(line: &[u8], limits: RowLimits, must_be_quick: bool) -> bool {
    let quick = quick::jsonl_record(line, limits);
    let text = String::from_utf8_lossy(line);
    let must_be_quick = must_be_quick && !text.contains(r#""type":"finish""#);
    if must_be_quick {
        assert!(
            quick.is_some(),
            "a valid record was not read quickly: {text}"
        );
    }
    let Some(run) = quick else { return false };
    let events = decode_full(line, limits)
        .unwrap_or_else(|| panic!("quick read a record the full decoder refuses: {text}"));
    assert!(
        !events.iter().any(is_finish),
        "quick read a finish chunk: {text}"
    );
    assert_eq!(file_sizes(&events), run.sizes, "sizes differ on {text}");
    assert_eq!(
        folded(events.into_iter().map(Scanned::Event)),
        folded(run.events()),
        "quick and full folds differ on {text}"
    );
    true
}

/// The length of each event's file in `events/`, rendered.
fn file_sizes(events: &[JsonMap]) -> Vec<u64> {
    events
        .iter()
        .map(|e| event_file::content(e).len() as u64)
        .collect()
}

#[test]
fn quick_jsonl_records_fold_like_fully_decoded_ones() {
    let mut rng = Rng(20261202);
    let (mut mutants, mut quick_mutants, mut quick_respelled) = (0, 0, 0);
    for _ in 0..20_000 {
        let valid = template(&mut rng);
        let compact = serde_json::to_string(&valid).unwrap();
        check_record(compact.as_bytes(), JSONL_ROW_LIMITS, true);
        let respelled = respell(&mut rng, &compact);
        quick_respelled += check_record(respelled.as_bytes(), JSONL_ROW_LIMITS, false) as usize;
        let mutant = mutate(&mut rng, valid);
        mutants += 1;
        quick_mutants += check_record(&mutant, JSONL_ROW_LIMITS, false) as usize;
    }
    // Some mutants stay valid (a changed text, a changed time) and some do not.
    assert!(
        quick_mutants > mutants / 20 && quick_mutants < mutants / 2,
        "{quick_mutants} of {mutants}"
    );
    // An escaped key sends a lone chunk to the full decoder; most respellings
    // are still read quickly.
    assert!(quick_respelled > 20_000 / 2, "{quick_respelled} respelled");
}

#[test]
fn quick_sqlite_row_data_matches_the_full_expansion() {
    let mut rng = Rng(7);
    let mut quick_count = 0;
    for _ in 0..20_000 {
        let valid = template(&mut rng);
        let Some(kind) = valid["type"].as_str().and_then(RowKind::from_tag) else {
            continue;
        };
        let data = if rng.below(2) == 0 {
            serde_json::to_vec(&valid["data"]).unwrap()
        } else {
            let mutant: Value = match serde_json::from_slice(&mutate(&mut rng, valid.clone())) {
                Ok(m) => m,
                Err(_) => continue,
            };
            serde_json::to_vec(mutant.get("data").unwrap_or(&Value::Null)).unwrap()
        };
        let data = maybe_respelled(&mut rng, data);
        let (seq0, time0) = (rng.below(3), 1_773_000_000_000i64);
        let Some(run) = quick::row_data(kind, seq0, time0, &data, SQLITE_ROW_LIMITS) else {
            continue;
        };
        quick_count += 1;
        let map: JsonMap = serde_json::from_slice(&data).unwrap();
        let events = expand_row_data(kind, seq0 as i64, time0, &map, SQLITE_ROW_LIMITS)
            .unwrap_or_else(|why| {
                panic!("quick read row data the full decoder refuses ({why}): {map:?}")
            });
        let full: Vec<_> = events
            .iter()
            .map(|e| {
                let step = chunk_step(&Scanned::Event(e.clone()));
                (
                    e["seq"].as_u64().unwrap(),
                    e["time"].as_i64().unwrap(),
                    step,
                )
            })
            .collect();
        let quick: Vec<_> = run
            .events()
            .map(|e| match e {
                Scanned::Chunk {
                    seq, time, step, ..
                } => (seq, time, Some((step.turn, step.step))),
                Scanned::Event(_) => unreachable!(),
            })
            .collect();
        assert_eq!(full, quick);
        assert_eq!(file_sizes(&events), run.sizes, "{map:?}");
        assert!(events.iter().all(|e| e["type"] == "assistant/chunk"));
    }
    assert!(quick_count > 1000, "{quick_count}");
}

#[test]
fn the_fold_reports_a_seq_gap_the_same_way() {
    let line = br#"{"type":"text-chunks","seq0":1,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[1],"texts":["a","b"]}}"#;
    let run = quick::jsonl_record(line, JSONL_ROW_LIMITS).unwrap();
    let events = decode_full(line, JSONL_ROW_LIMITS).unwrap();
    let quick = folded(run.events());
    assert_eq!(folded(events.into_iter().map(Scanned::Event)), quick);
    assert!(
        quick.contains("expected seq 0 (rule 1, contiguity)"),
        "{quick}"
    );
}

/// The Harness's legacy logs (spec §15): their chunks and packed rows are read
/// quickly and fold as fully decoded ones do, while the events a legacy rule
/// converts are never read quickly, so they always reach the conversion.
#[test]
fn legacy_logs_reach_the_conversions_through_the_full_decoder() {
    let root = common::fixtures().join("legacy/stores/jsonl");
    let (mut quick_records, mut convertible) = (0, 0);
    for project in std::fs::read_dir(root).expect("legacy store") {
        for session in std::fs::read_dir(project.expect("project").path()).expect("sessions") {
            let log =
                std::fs::read(session.expect("session").path().join("session.jsonl")).expect("log");
            for line in log.split(|b| *b == b'\n').skip(1).filter(|l| !l.is_empty()) {
                let quick = check_record(line, JSONL_ROW_LIMITS, false);
                quick_records += quick as usize;
                let record: Value = serde_json::from_slice(line).expect("record");
                if matches!(
                    record["type"].as_str(),
                    Some(
                        "turn/start"
                            | "turn/end"
                            | "steering/message"
                            | "user/message"
                            | "assistant/message"
                            | "tool/result"
                    )
                ) {
                    assert!(!quick, "a convertible event was read quickly");
                    convertible += 1;
                }
            }
        }
    }
    assert!(
        quick_records > 100 && convertible > 100,
        "{quick_records} {convertible}"
    );
}

#[test]
fn quick_sqlite_chunk_data_names_the_step_of_the_full_data() {
    let mut rng = Rng(11);
    let mut quick_count = 0;
    for _ in 0..20_000 {
        let valid = template(&mut rng);
        if valid["type"] != "assistant/chunk" {
            continue;
        }
        let data = if rng.below(2) == 0 {
            serde_json::to_vec(&valid["data"]).unwrap()
        } else {
            match serde_json::from_slice::<Value>(&mutate(&mut rng, valid.clone())) {
                Ok(mutant) => {
                    serde_json::to_vec(mutant.get("data").unwrap_or(&Value::Null)).unwrap()
                }
                Err(_) => continue,
            }
        };
        let data = maybe_respelled(&mut rng, data);
        let (seq, time) = (rng.below(3), 1_773_000_000_000i64 - rng.below(2) as i64);
        let Some(ChunkRun { step, sizes, .. }) = quick::lone_chunk_row(seq, time, &data) else {
            continue;
        };
        quick_count += 1;
        // The event a scalar row decodes to (spec §2.4: type, seq, time, data).
        let mut event = JsonMap::new();
        event.insert("type".into(), json!("assistant/chunk"));
        event.insert("seq".into(), json!(seq));
        event.insert("time".into(), json!(time));
        event.insert("data".into(), serde_json::from_slice(&data).unwrap());
        assert!(!is_finish(&event), "quick read a finish chunk: {event:?}");
        assert_eq!(sizes, file_sizes(std::slice::from_ref(&event)), "{event:?}");
        assert_eq!(
            chunk_step(&Scanned::Event(event)),
            Some((step.turn, step.step))
        );
    }
    assert!(quick_count > 1000, "{quick_count}");
}

/// Raw spellings of JSON numbers and string pieces, as a log may hold them.
const RAW_NUMBERS: &[&str] = &[
    "0",
    "-0",
    "7",
    "-12",
    "1.50",
    "-0.0",
    "1E5",
    "1e-7",
    "2.5E+3",
    "1e400",
    "18446744073709551616",
    "-9223372036854775809",
    "123456789012345678901234567890.5",
];
const RAW_PIECES: &[&str] = &[
    "a",
    "\\\"",
    "\\\\",
    "\\/",
    "\\b",
    "\\f",
    "\\n",
    "\\r",
    "\\t",
    "\\u0000",
    "\\u001F",
    "\\u007f",
    "\\u00e9",
    "\\u2028",
    "\\uFFFF",
    "\\ud83d\\ude00",
    "é",
    "😀",
    "\u{2029}",
    " ",
    "</",
    "\\u0022",
    "\\u005C",
];

/// A random JSON value as raw text: nested objects and arrays (empty ones
/// too), strings and numbers in any valid spelling, whitespace between tokens.
fn raw_json(rng: &mut Rng, depth: u32) -> String {
    let space = |rng: &mut Rng| rng.pick(&["", "", " ", "\n  ", "\t"]).to_string();
    let string = |rng: &mut Rng| {
        let pieces: String = (0..rng.below(5)).map(|_| rng.pick(RAW_PIECES)).collect();
        format!("\"{pieces}\"")
    };
    match rng.below(if depth > 4 { 4 } else { 7 }) {
        0 => rng.pick(RAW_NUMBERS).to_string(),
        1 => string(rng),
        2 => rng.pick(&["true", "false", "null"]).to_string(),
        3 => rng.pick(RAW_NUMBERS).to_string(),
        4 | 5 => {
            let items: Vec<String> = (0..rng.below(4))
                .map(|_| format!("{}{}{}", space(rng), raw_json(rng, depth + 1), space(rng)))
                .collect();
            format!("[{}]", items.join(","))
        }
        _ => {
            let members: Vec<String> = (0..rng.below(4))
                .map(|k| {
                    // Distinct keys; a duplicate is tried in the mutants.
                    let key = format!("k{k}{}", rng.pick(&["", "é", "\u{1F600}"]));
                    let value = raw_json(rng, depth + 1);
                    format!(
                        "{}\"{key}\"{}:{}{value}",
                        space(rng),
                        space(rng),
                        space(rng)
                    )
                })
                .collect();
            format!("{{{}}}", members.join(","))
        }
    }
}

/// A streamed chunk's contents are never decoded by the quick reader, yet its
/// size must be the length of the event as rendered: any JSON, spelled any
/// valid way, in the chunk of a lone JSONL event or a scalar SQLite row.
#[test]
fn lone_chunk_sizes_hold_for_any_contents_in_any_spelling() {
    let mut rng = Rng(15);
    let (mut quick_lines, mut quick_rows) = (0, 0);
    for _ in 0..20_000 {
        let extra = raw_json(&mut rng, 0);
        let data = format!(
            r#"{{"turn":1,"step":{},"chunk":{{"type":"text-delta","index":0,"text":{},"extra":{extra}}}}}"#,
            rng.pick(RAW_NUMBERS),
            raw_json(&mut rng, 3),
        );
        let line =
            format!(r#"{{"type":"assistant/chunk","seq":0,"time":1773000000000,"data":{data}}}"#);
        quick_lines += check_record(line.as_bytes(), JSONL_ROW_LIMITS, false) as usize;
        let Some(run) = quick::lone_chunk_row(3, -5, data.as_bytes()) else {
            continue;
        };
        quick_rows += 1;
        let mut event = JsonMap::new();
        event.insert("type".into(), json!("assistant/chunk"));
        event.insert("seq".into(), json!(3));
        event.insert("time".into(), json!(-5));
        event.insert("data".into(), serde_json::from_str(&data).unwrap());
        assert_eq!(run.sizes, file_sizes(&[event]), "{data}");
    }
    assert!(
        quick_lines > 5_000 && quick_rows > 5_000,
        "{quick_lines} {quick_rows}"
    );
}

/// A decoded event's size, summed from its parts, is the length of the pretty
/// line serde_json writes: for any JSON, spelled any valid way, decoded.
#[test]
fn decoded_event_sizes_are_the_pretty_lines_serde_json_writes() {
    let mut rng = Rng(16);
    let mut decoded = 0;
    for _ in 0..20_000 {
        // Long strings too: lengths are summed in blocks of 32 bytes.
        let long: String = (0..rng.below(60)).map(|_| rng.pick(RAW_PIECES)).collect();
        let text = format!(
            r#"{{"type":"x","data":{},"more":{},"long":"{long}"}}"#,
            raw_json(&mut rng, 0),
            raw_json(&mut rng, 2)
        );
        let Ok(event) = serde_json::from_str::<JsonMap>(&text) else {
            continue;
        };
        assert_eq!(
            sessionfs::json_len::map_pretty_line_len(&event),
            sessionfs::json::pretty_line(&event).len() as u64,
            "{text}"
        );
        decoded += 1;
    }
    assert!(decoded > 10_000, "{decoded} decoded");
}

/// Every event of every fixture store (each format, crashed and legacy logs
/// too): each chunk the scan read quickly is sized as its fetched event
/// renders, and every file of `events/` (converted events and synthetic
/// closers included) is sized as it reads.
#[test]
fn every_fixture_event_is_sized_as_its_file_reads() {
    let (mut files, mut quick_chunks) = (0, 0);
    let legacy = ["../legacy/stores/jsonl", "../legacy/stores/jsonl-zstd"];
    for store in common::STORES.into_iter().chain(legacy) {
        let copy = common::store_copy(store);
        let backend: Arc<dyn Backend> =
            Arc::from(sessionfs::store::open(&copy.path).expect("store"));
        for listing in backend.list() {
            let mut chunks = Vec::new();
            let mut sink = |loc: EventLoc, scanned: Scanned| {
                if let Scanned::Chunk { size, .. } = scanned {
                    chunks.push((loc, size));
                }
                Ok(())
            };
            // A log the view cannot read is still scanned up to its defect.
            let _ = backend.scan(&listing.key, &ScanPoint::default(), &mut sink);
            for (loc, size) in chunks {
                let event = backend.fetch(&listing.key, loc).expect("fetch");
                let rendered = event_file::content(&event).len() as u64;
                assert_eq!(size, rendered, "{store} {} {loc:?}", listing.id);
                quick_chunks += 1;
            }
            // Quiet at once, so crashed logs show their synthetic closers.
            let source = SessionSource::new(backend.clone(), listing.key.clone());
            let refused = listing.header.as_ref().err().cloned().map(Refused::Header);
            let mut view =
                SessionView::open(source, &listing.id, refused, Duration::ZERO, None, None);
            for seq in 0..view.event_count() {
                let which = FileId::Event(seq);
                let size = view.file_size(which).unwrap();
                let bytes = view.file(which).unwrap();
                assert_eq!(
                    size.expect("size"),
                    bytes.expect("bytes").bytes.len() as u64,
                    "{store} {} event {seq}",
                    listing.id
                );
                files += 1;
            }
        }
    }
    assert!(
        files > 10_000 && quick_chunks > 5_000,
        "{files} files, {quick_chunks} quick chunks"
    );
}
