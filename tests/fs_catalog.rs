//! The catalogue's inputs, without a mount: what a store listing knows of each
//! session's log file (size and last write, for `sessions.jsonl`), and the
//! readable names and project directories of a real store's sessions.

use std::collections::HashSet;
use std::path::Path;
use std::time::UNIX_EPOCH;

use sessionfs::model::catalog::{project_name, readable_name};
use sessionfs::store::{self, SessionKey};

#[test]
fn jsonl_listings_carry_each_log_files_size_and_last_write() {
    for kind in ["jsonl", "jsonl-zstd"] {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/stores")
            .join(kind);
        let store = store::open(&root).unwrap();
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
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/stores/jsonl");
    let listings = store::open(&root).unwrap().list();
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
