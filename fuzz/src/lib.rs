//! Helpers shared by the fuzz targets: one scratch directory per process, a JSONL
//! store holding the one session a target writes, and the checks every
//! backend target makes (fetch agrees with scan, a scan resumes where it
//! stopped, a readable session renders every file, a repair leaves a clean log).
//!
//! `tests/fuzz_regressions.rs` includes this file as a module (`#[path]`) to
//! replay kept inputs through these same checks, so it uses only what the
//! main crate's tests have: sessionfs and serde_json, not libfuzzer.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::Value;
use sessionfs::json::JsonMap;
use sessionfs::model::Refusal;
use sessionfs::model::header::SessionHeader;
use sessionfs::model::ids::{encode_segment, project_dir};
use sessionfs::store::jsonl::{JsonlStore, RAW_NAME, ZSTD_NAME};
use sessionfs::store::{Backend, EventLoc, Listing, ScanEnd, ScanPoint, SessionKey};
use sessionfs::view::{FileId, Refused, SessionSource, SessionView};

/// A directory private to this process (on tmpfs when there is one). Scratch
/// directories of fuzzers that are gone are removed on the way.
pub fn scratch(target: &str) -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        }
        .join("sessionfs-fuzz");
        std::fs::create_dir_all(&base).expect("cannot create the fuzz scratch directory");
        for entry in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = name.rsplit('-').next().and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let dir = base.join(format!("{target}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("cannot create the fuzz scratch directory");
        dir
    })
}

/// The header a first line names, if it is one.
pub fn header_of(line: &[u8]) -> Option<SessionHeader> {
    let value: Value = serde_json::from_slice(line).ok()?;
    SessionHeader::from_jsonl(value.as_object()?).ok()
}

/// Replaces the store under `root` with one session file holding `bytes`, at the
/// path its header names (so the identity check passes and the session is read)
/// or, when there is no usable header, at `_no-cwd/s/`.
pub fn write_session(
    root: &Path,
    header: Option<&SessionHeader>,
    zstd: bool,
    bytes: &[u8],
) -> PathBuf {
    let _ = std::fs::remove_dir_all(root);
    std::fs::create_dir_all(root).expect("cannot create the fuzz store");
    let file = if zstd { ZSTD_NAME } else { RAW_NAME };
    if let Some(header) = header
        && let Some(segment) = encode_segment(&header.id)
    {
        let dir = root.join(project_dir(header.cwd.as_deref())).join(segment);
        if std::fs::create_dir_all(&dir).is_ok() && std::fs::write(dir.join(file), bytes).is_ok() {
            return dir.join(file);
        }
    }
    let dir = root.join("_no-cwd").join("s");
    std::fs::create_dir_all(&dir).expect("cannot create the fuzz session directory");
    std::fs::write(dir.join(file), bytes).expect("cannot write the fuzz session");
    dir.join(file)
}

/// Opens the store at `root` (afresh, so no cache outlives the file it was
/// filled from) and runs every check on the session at `path`; `None` when the
/// store does not list it.
pub fn check_jsonl_session(root: &Path, path: &Path) -> Option<Checked> {
    let store: Arc<dyn Backend> =
        Arc::new(JsonlStore::open(root).expect("the fuzz store does not open"));
    let key = SessionKey::File(path.canonicalize().unwrap_or_else(|_| path.to_path_buf()));
    let listing = store.list().into_iter().find(|l| l.key == key);
    check_scans(store.as_ref(), &key);
    listing.map(|listing| check_view(&store, &listing, true))
}

fn text(event: &JsonMap) -> String {
    serde_json::to_string(event).expect("an event does not serialise")
}

/// What a scan returned, and the events its sink was handed.
pub type Scanned = (
    Result<(ScanPoint, ScanEnd), Refusal>,
    Vec<(EventLoc, JsonMap)>,
);

/// Scans from `from`, collecting what the sink was handed; chunks read quickly
/// are fetched, to compare whole events.
pub fn scan_from(store: &dyn Backend, key: &SessionKey, from: &ScanPoint) -> Scanned {
    let mut scanned = Vec::new();
    let mut sink = |loc: EventLoc, event: sessionfs::model::Scanned| {
        scanned.push((loc, event));
        Ok(())
    };
    let result = store.scan(key, from, &mut sink);
    let events = scanned
        .into_iter()
        .map(|(loc, event)| match event {
            sessionfs::model::Scanned::Event(event) => (loc, event),
            sessionfs::model::Scanned::Chunk { .. } => match store.fetch(key, loc) {
                Ok(event) => (loc, event),
                Err(refusal) => panic!("fetch({loc:?}) of a scanned chunk fails: {refusal}"),
            },
        })
        .collect();
    (result, events)
}

/// Every event a scan hands out can be fetched again by its location, and a
/// scan resumed from the point a scan returned continues it exactly.
pub fn check_scans(store: &dyn Backend, key: &SessionKey) {
    let (result, events) = scan_from(store, key, &ScanPoint::default());
    for (loc, event) in &events {
        match store.fetch(key, *loc) {
            Ok(fetched) => assert_eq!(
                text(&fetched),
                text(event),
                "fetch({loc:?}) differs from the scanned event"
            ),
            Err(refusal) => panic!("fetch({loc:?}) of a scanned event fails: {refusal}"),
        }
    }
    let Ok((point, _)) = result else { return };
    assert!(
        point.events as usize <= events.len(),
        "the scan point {point:?} claims more than {} events",
        events.len()
    );
    let (again, more) = scan_from(store, key, &point);
    if let Err(refusal) = again {
        panic!("a scan resumed at {point:?} fails though the full scan succeeded: {refusal}");
    }
    let resumed: Vec<String> = events[..point.events as usize]
        .iter()
        .chain(more.iter())
        .map(|(_, e)| text(e))
        .collect();
    let full: Vec<String> = events.iter().map(|(_, e)| text(e)).collect();
    assert_eq!(
        resumed, full,
        "a scan resumed at {point:?} does not continue the full scan"
    );
}

/// Findings already reported, which the targets step over so that fuzzing can
/// go on (`tests/fuzz_regressions.rs` keeps an example of each):
///
/// - F1: the crash-repair closers copy `turn` from the open `turn/start` and
///   the call id from the assistant's tool-call block unchecked, so a stored
///   `turn/start` without a safe integer `turn` ≥ 1, or a tool-call block with
///   an empty id, gives closers that the reader's own checks refuse: the
///   session is readable while its turn is open, and unreadable once the
///   repair is written.
///
/// Anything else a closer is refused for is a new finding.
pub fn known_closer_refusal(refusal: &Refusal) {
    let message = refusal.message();
    let f1 = message.contains("contains malformed pre-react-loop turn/end at seq")
        || message.contains("tool/result message source is not a tool source with a callId");
    assert!(f1, "a crash-repair closer is refused: {message}");
}

/// Opens a listed session as the filesystem does, quiet at once.
fn open(store: &Arc<dyn Backend>, listing: &Listing) -> SessionView {
    let source = SessionSource::new(store.clone(), listing.key.clone());
    let refused = listing.header.as_ref().err().cloned().map(Refused::Header);
    SessionView::open(source, &listing.id, refused, Duration::ZERO, None, None)
}

/// What `check_view` loaded: the session's view, and its view after the
/// repair when one was written (tests/fuzz_regressions.rs looks at both).
pub struct Checked {
    pub view: SessionView,
    pub repaired: Option<SessionView>,
}

/// Loads the session as the filesystem does and renders every file of it.
/// With `repair`, a repair plan is applied and the repaired session must load
/// with nothing torn and no turn left open.
pub fn check_view(store: &Arc<dyn Backend>, listing: &Listing, repair: bool) -> Checked {
    let mut view = open(store, listing);
    let _ = view.file(FileId::Error);
    let _ = view.mtime();
    let _ = view.memory();
    let _ = view.header();
    let key = listing.key.clone();
    let plan = view.repair_plan();
    if view.indexed().is_some() {
        for which in [
            FileId::Header,
            FileId::Surface,
            FileId::Transcript,
            FileId::Index,
        ] {
            match view.file(which) {
                Some(Ok(_)) => {}
                Some(Err(refusal)) => {
                    panic!("{which:?} of a readable session does not render: {refusal}")
                }
                None => panic!("a readable session has no {which:?}"),
            }
        }
    }
    if let Some(indexed) = view.indexed() {
        let total = indexed.stored_count() + indexed.closers().len() as u64;
        for i in 0..total.min(512) {
            let _ = indexed.event_type(i);
            let _ = indexed.event_name(i);
            let _ = indexed.event_time(i);
            if let Err(refusal) = view.event(i) {
                panic!("event {i} of a readable session cannot be read: {refusal}");
            }
        }
    }
    if let Some(indexed) = view.indexed() {
        let mut fold = indexed.fold().clone();
        for closer in indexed.closers() {
            if let Err(refusal) = fold.observe(closer) {
                known_closer_refusal(&refusal);
                return Checked {
                    view,
                    repaired: None,
                };
            }
        }
    }
    let _ = view.refresh();
    let unrepaired = |view| Checked {
        view,
        repaired: None,
    };
    if !repair {
        return unrepaired(view);
    }
    let Some((keep, revision, tail)) = plan else {
        return unrepaired(view);
    };
    if store.repair(&key, &keep, &revision, &tail).is_err() {
        return unrepaired(view);
    }
    let relisted = store
        .list()
        .into_iter()
        .find(|l| l.key == key)
        .expect("the repaired session is no longer listed");
    let mut repaired = open(store, &relisted);
    match repaired.indexed() {
        Some(indexed) => {
            assert!(
                indexed.torn().is_none(),
                "the repaired session is still torn: {:?}",
                indexed.torn()
            );
            assert!(
                indexed.closers().is_empty(),
                "the repaired session still needs closers: {:?}",
                indexed.closers()
            );
        }
        None => panic!(
            "the session was readable but is not after its repair: {:?}",
            repaired
                .file(FileId::Error)
                .map(|t| String::from_utf8_lossy(&t.unwrap().bytes.to_vec()).into_owned())
        ),
    }
    Checked {
        view,
        repaired: Some(repaired),
    }
}
