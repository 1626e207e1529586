//! The catalogue's inputs, without a mount: what a store listing knows of each
//! session's log file (size and last write, for `sessions.jsonl`), and the
//! readable names and project directories of a real store's sessions.

mod common;

use std::collections::HashSet;
use std::time::UNIX_EPOCH;

use common::store_copy;

use serde_json::Value;
use sessionfs::catalog;
use sessionfs::model::catalog::{project_name, readable_name};
use sessionfs::store::{self, SessionKey};

#[test]
fn jsonl_listings_carry_each_log_files_size_and_last_write() {
    for kind in ["jsonl", "jsonl-zstd"] {
        let copy = store_copy(kind);
        let store = store::open(&copy.path).unwrap();
        let listings = store.list();
        assert!(!listings.is_empty(), "{kind}");
        for listing in &listings {
            let SessionKey::File(path) = &listing.key else {
                panic!("a JSONL store listed {:?}", listing.key);
            };
            let stored = listing.stored.expect("a JSONL listing sees its file");
            let meta = std::fs::metadata(path).unwrap();
            assert_eq!(stored.size, meta.len(), "{}", path.display());
            let modified = meta.modified().unwrap().duration_since(UNIX_EPOCH).unwrap();
            assert_eq!(stored.modified_ms, modified.as_millis() as i64);
        }
    }
}

#[test]
fn a_real_stores_sessions_get_distinct_readable_names() {
    let copy = store_copy("jsonl");
    let listings = store::open(&copy.path).unwrap().list();
    let names: HashSet<String> = listings.iter().map(|l| readable_name(&l.id)).collect();
    assert_eq!(names.len(), listings.len());
    // The fixtures' odd id, escaped on disk, is shown as it is.
    let odd = listings
        .iter()
        .find(|l| l.id.contains('«'))
        .expect("the fixtures hold an id with non-ASCII characters");
    assert_eq!(readable_name(&odd.id), odd.id);
    for listing in &listings {
        let cwd = listing.header.as_ref().ok().and_then(|h| h.cwd.as_deref());
        let project = project_name(cwd);
        assert!(!project.contains('/') && project.len() <= 255, "{project}");
    }
}

#[test]
fn sessions_jsonl_has_one_line_per_listing_with_its_header_fields() {
    for kind in ["jsonl", "jsonl-zstd", "sqlite14"] {
        // A copy: opening a SQLite store makes its -shm and -wal files.
        let copy = store_copy(kind);
        let listings = store::open(&copy.path).unwrap().list();
        assert!(!listings.is_empty(), "{kind}");
        let names: Vec<String> = listings.iter().map(|l| readable_name(&l.id)).collect();
        let bytes = catalog::sessions_jsonl(names.iter().map(String::as_str).zip(&listings));
        let lines: Vec<Value> = bytes
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        assert_eq!(lines.len(), listings.len(), "{kind}");
        for ((line, listing), name) in lines.iter().zip(&listings).zip(&names) {
            assert_eq!(line["name"], name.as_str());
            assert_eq!(line["id"], listing.id.as_str());
            assert_eq!(line["store"], catalog::store_kind(&listing.key));
            let Ok(header) = &listing.header else {
                continue;
            };
            assert_eq!(line["createdAt"], header.created_at);
            assert_eq!(line["cwd"].as_str(), header.cwd.as_deref());
            assert_eq!(line["parent"].as_str(), header.parent_session.as_deref());
            assert_eq!(line["delegationDepth"].as_u64(), header.delegation_depth);
            assert_eq!(line["size"].as_u64(), listing.stored.map(|s| s.size));
        }
        let expected_kind = match kind {
            "jsonl" => "jsonl",
            "jsonl-zstd" => "zstd",
            _ => "sqlite",
        };
        assert!(lines.iter().all(|l| l["store"] == expected_kind), "{kind}");
    }
}
