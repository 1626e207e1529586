//! Event validation and the surface fold (spec §2, §3, §5, §8.1), without any
//! store format in the way: the input is JSONL, its first line the session
//! header (`SessionHeader::from_jsonl`; a default header when it is not one),
//! every later line that is a JSON object one event, handed over as is (a
//! packed chunk row that expands is expanded first, as the stores do).
//!
//! Checks: nothing panics; a parsed header prints (`to_jsonl_line`) and parses
//! back to itself; `SessionFold::observe_scanned` and a bare `SurfaceFold` fed
//! the events as the fold read them (legacy shapes converted) agree on the
//! surface of a log the fold accepts; the crash-repair closers of an accepted
//! log are themselves accepted and leave nothing open; the session, served from
//! a `MemoryStore`, loads and renders every file when it is readable.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use sessionfs::json::JsonMap;
use sessionfs::model::Scanned;
use sessionfs::model::chunk_rows::{JSONL_ROW_LIMITS, RowKind, expand_jsonl_row};
use sessionfs::model::fold::SessionFold;
use sessionfs::model::header::SessionHeader;
use sessionfs::model::surface::SurfaceFold;
use sessionfs::store::Catalog;
use sessionfs::store::memory::MemoryStore;
use sessionfs_fuzz::{check_view, known_closer_refusal};

fn default_header() -> SessionHeader {
    SessionHeader {
        version: 0.into(),
        id: "s".into(),
        created_at: 1,
        cwd: None,
        parent_session: None,
        seed_length: None,
        origin: None,
        delegation_depth: Some(0),
        agent_preset: None,
    }
}

fuzz_target!(|data: &[u8]| {
    let mut lines = data.split(|b| *b == b'\n');
    let first = lines.next().unwrap_or_default();
    let parsed = serde_json::from_slice::<Value>(first)
        .ok()
        .and_then(|v| match v {
            Value::Object(map) => Some(SessionHeader::from_jsonl(&map)),
            _ => None,
        });
    let header = match parsed {
        Some(Ok(header)) => {
            let line: Value =
                serde_json::from_str(&header.to_jsonl_line()).expect("a header line is JSON");
            let again = SessionHeader::from_jsonl(line.as_object().unwrap())
                .expect("a printed header does not parse");
            assert_eq!(again, header, "a header does not survive to_jsonl_line");
            header
        }
        Some(Err(why)) => {
            assert!(!why.is_empty());
            default_header()
        }
        None => default_header(),
    };
    let events: Vec<JsonMap> = lines
        .take(4096)
        .filter_map(|line| match serde_json::from_slice::<Value>(line) {
            Ok(Value::Object(map)) => Some(map),
            _ => None,
        })
        .flat_map(|map| {
            let kind = map
                .get("type")
                .and_then(Value::as_str)
                .and_then(RowKind::from_tag);
            match kind.map(|kind| expand_jsonl_row(kind, &map, JSONL_ROW_LIMITS)) {
                Some(Ok(events)) => events,
                _ => vec![map],
            }
        })
        .collect();

    if let Ok(mut fold) = SessionFold::new(&header, &header.id) {
        let mut surface = SurfaceFold::default();
        let mut accepted = true;
        for event in &events {
            // The fold reads a legacy shape converted; the bare surface gets what it read.
            let mut read = Scanned::Event(event.clone());
            if let Err(refusal) = fold.observe_scanned(&mut read) {
                assert!(!refusal.message().is_empty());
                accepted = false;
                break;
            }
            if let Scanned::Event(read) = &read {
                surface
                    .apply(read)
                    .expect("the surface refused an event the session fold accepted");
            }
        }
        if accepted {
            assert_eq!(fold.surface().nodes(), surface.nodes());
            let closers = fold.turn_scan().closers();
            let mut closed = true;
            for closer in &closers {
                if let Err(refusal) = fold.observe(closer) {
                    known_closer_refusal(&refusal);
                    closed = false;
                    break;
                }
            }
            if closed {
                assert!(
                    fold.turn_scan().closers().is_empty(),
                    "closing the log leaves it open"
                );
                assert!(!fold.turn_scan().turn_is_open());
            }
        }
    }

    let store = MemoryStore::default();
    store.insert(header, events);
    let listing = store.list().first().cloned();
    if let Some(listing) = listing {
        let store: std::sync::Arc<dyn sessionfs::store::Backend> = std::sync::Arc::new(store);
        check_view(&store, &listing, false);
    }
});
