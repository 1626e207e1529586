//! Every generated file can be mapped (`mmap`), and the mapping shows the bytes
//! `read` returns: the files are served through the page cache.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{Mount, store_copy, with_mapping};

/// The bytes of a file as a shared read-only mapping shows them.
fn mapped(path: &Path) -> Vec<u8> {
    with_mapping(path, <[u8]>::to_vec)
}

/// The generated files of every session under a mount (control files are
/// computed per read and excluded), by path.
fn generated_files(root: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for session in std::fs::read_dir(root).expect("readdir root") {
        let session = session.expect("entry").path();
        if !session.is_dir() {
            continue;
        }
        for name in [
            "header.json",
            "surface.jsonl",
            "transcript.md",
            "index.jsonl",
            "error",
        ] {
            let path = session.join(name);
            if path.exists() {
                files.push(path);
            }
        }
        if let Ok(events) = std::fs::read_dir(session.join("events")) {
            files.extend(events.map(|e| e.expect("event").path()));
        }
    }
    files
}

#[test]
fn every_generated_file_maps_to_the_bytes_read_returns() {
    let mut kinds = BTreeSet::new();
    for store in ["jsonl", "jsonl-zstd", "sqlite17", "crash/jsonl"] {
        let copy = store_copy(store);
        let mount = Mount::new(&copy.path, &[]);
        for path in generated_files(mount.path()) {
            let read = std::fs::read(&path).expect("read");
            assert_eq!(mapped(&path), read, "{} maps as it reads", path.display());
            // Mapped again while the first descriptor's pages are cached.
            assert_eq!(mapped(&path), read, "{} maps again", path.display());
            let parent = path.parent().and_then(Path::file_name);
            kinds.insert(match parent.and_then(|p| p.to_str()) {
                Some("events") => "events/*".to_string(),
                _ => path.file_name().unwrap().to_string_lossy().into_owned(),
            });
        }
    }
    let every: BTreeSet<String> = [
        "error",
        "events/*",
        "header.json",
        "index.jsonl",
        "surface.jsonl",
        "transcript.md",
    ]
    .map(String::from)
    .into();
    assert_eq!(kinds, every, "every kind of generated file was mapped");
}
