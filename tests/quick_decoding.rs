//! The quick chunk readers (`model::quick`) against the full decoder: on every
//! record they accept, the fold must end in the same state, or fail with the same
//! refusal, as it does on the fully decoded events, and each chunk must name the
//! same turn and step (a `finish` chunk is never read quickly). Records are generated from
//! valid templates and then mutated at random (values swapped, keys dropped,
//! added or duplicated, bytes flipped), so the narrow edges are exercised.

mod common;

use common::Rng;
use serde_json::{Value, json};
use sessionfs::json::JsonMap;
use sessionfs::model::chunk_rows::{
    JSONL_ROW_LIMITS, RowKind, RowLimits, SQLITE_ROW_LIMITS, expand_jsonl_row, expand_row_data,
};
use sessionfs::model::fold::SessionFold;
use sessionfs::model::header::SessionHeader;
use sessionfs::model::quick::{self, Scanned};

const TEXTS: &[&str] = &[
    "a",
    "",
    "é\u{2028}",
    "quote \" and \\ slash",
    "\u{1F600}",
    "tab\t",
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
    match rng.below(6) {
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
            let i = rng.index(bytes.len());
            bytes[i] = rng.pick(b"\"\\{}[],:0 9-ez\xff\x00\n");
            bytes
        }
        _ => {
            *at(&mut value, &path) = json!(rng.next() as i64 % 3 - 1);
            text(&value).into_bytes()
        }
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
    assert_eq!(
        folded(events.into_iter().map(Scanned::Event)),
        folded(run.events()),
        "quick and full folds differ on {text}"
    );
    true
}

#[test]
fn quick_jsonl_records_fold_like_fully_decoded_ones() {
    let mut rng = Rng(20261202);
    let (mut mutants, mut quick_mutants) = (0, 0);
    for _ in 0..20_000 {
        let valid = template(&mut rng);
        check_record(
            serde_json::to_string(&valid).unwrap().as_bytes(),
            JSONL_ROW_LIMITS,
            true,
        );
        let mutant = mutate(&mut rng, valid);
        mutants += 1;
        quick_mutants += check_record(&mutant, JSONL_ROW_LIMITS, false) as usize;
    }
    // Some mutants stay valid (a changed text, a changed time) and some do not.
    assert!(
        quick_mutants > mutants / 20 && quick_mutants < mutants / 2,
        "{quick_mutants} of {mutants}"
    );
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
                Scanned::Chunk { seq, time, step } => (seq, time, Some((step.turn, step.step))),
                Scanned::Event(_) => unreachable!(),
            })
            .collect();
        assert_eq!(full, quick);
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
        let Some(step) = quick::lone_chunk_data(&data) else {
            continue;
        };
        quick_count += 1;
        let mut event = JsonMap::new();
        event.insert("type".into(), json!("assistant/chunk"));
        event.insert("data".into(), serde_json::from_slice(&data).unwrap());
        assert!(!is_finish(&event), "quick read a finish chunk: {event:?}");
        assert_eq!(
            chunk_step(&Scanned::Event(event)),
            Some((step.turn, step.step))
        );
    }
    assert!(quick_count > 1000, "{quick_count}");
}
