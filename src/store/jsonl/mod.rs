//! The JSONL backend (spec §10): one directory of project directories, each
//! holding one directory per session with `session.jsonl` (raw) or
//! `session.jsonl.zstd` (a concatenation of checksummed zstd frames whose
//! plaintext is the raw file). A root may hold both encodings.

mod list;
mod raw;
mod record;
mod write;
mod zstd;

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::json::JsonMap;
use crate::model::header::SessionHeader;
use crate::model::{Cause, Refusal};
use crate::store::{EventLoc, EventSink, Revision, ScanEnd, ScanPoint, SessionKey, Source};
use raw::raw_line;
use record::decode_events;
use write::Encoding;
use zstd::CachedFrame;

/// The file name of a raw log in a session directory.
pub const RAW_NAME: &str = "session.jsonl";
/// The file name of a zstd-compressed log in a session directory.
pub const ZSTD_NAME: &str = "session.jsonl.zstd";

/// The longest record (line) accepted; a longer one is refused, so a hostile file
/// cannot make the mount allocate without bound.
pub const MAX_RECORD_BYTES: usize = 64 << 20;

/// The longest header line read while listing.
const MAX_HEADER_BYTES: usize = 1 << 20;
/// A zstd scan with at least this many compressed bytes ahead decompresses on a
/// second thread; below it, starting the thread costs more than it saves.
const DECODE_AHEAD_BYTES: u64 = 1 << 20;

/// A JSONL store, rooted at a directory of project directories.
pub struct JsonlStore {
    root: PathBuf,
    /// The last decompressed zstd frame, so fetching neighbouring events does not
    /// decompress the same frame again and again.
    frame_cache: Mutex<Option<CachedFrame>>,
    /// Session directories that held no log at the last listing (one being
    /// materialised): their own times join the listing revision, since the log
    /// appearing in them changes no project directory.
    without_log: Mutex<Vec<PathBuf>>,
    /// The encoding of new sessions, chosen by the first listing.
    new_encoding: OnceLock<Encoding>,
    /// Headers earlier listings read (the persistent index), when kept.
    known_headers: OnceLock<std::sync::Arc<dyn crate::store::KnownHeaders>>,
    /// The store is on a FUSE file system whose directories' times may stay
    /// put as entries come and go (rclone keeps the time it first listed):
    /// the listing revision also digests each directory's names.
    names_in_revision: bool,
}

/// Whether the log at `path` is zstd-compressed (its file name is
/// [`ZSTD_NAME`]). A byte comparison of the path's end: a listing and every
/// `sessions.jsonl` line ask it, and parsing components cost more.
pub fn is_zstd(path: &Path) -> bool {
    let path = path.as_os_str().as_encoded_bytes();
    match path.strip_suffix(ZSTD_NAME.as_bytes()) {
        Some(rest) => rest.is_empty() || rest.ends_with(b"/"),
        None => false,
    }
}

fn corrupt(path: &Path, why: impl std::fmt::Display) -> Refusal {
    Refusal::Corrupt(format!("{why} (raw log: {})", path.display()))
}

/// An I/O error reading a log: the store cannot be read now, which says
/// nothing of the log's content. Errors that carry no errno (a decoder's
/// verdict on the bytes) are damage.
fn io_refusal(path: &Path, e: io::Error) -> Refusal {
    match e.raw_os_error() {
        Some(errno) => Refusal::Unavailable {
            cause: Cause::System(errno),
            reason: format!("cannot read {} now: {e}", path.display()),
        },
        None => Refusal::Corrupt(format!("cannot read {}: {e}", path.display())),
    }
}

/// A scan continued from `from` needs a log at least that long: a shorter one
/// was cut or replaced, and must be read from the start instead. Returns the
/// log's size as its file system states it when opened.
fn check_not_shorter(path: &Path, file: &File, from: &ScanPoint) -> Result<u64, Refusal> {
    let len = file.metadata().map_err(|e| io_refusal(path, e))?.len();
    if len < from.offset {
        return Err(corrupt(
            path,
            format!(
                "the log is {len} bytes, shorter than the {} already read",
                from.offset
            ),
        ));
    }
    Ok(len)
}

impl JsonlStore {
    /// Opens the store at `root`, which must be a directory that can be listed; `Err` is
    /// the sentence to show.
    pub fn open(root: &Path) -> Result<JsonlStore, String> {
        let root = root
            .canonicalize()
            .map_err(|e| format!("cannot open store {}: {e}", root.display()))?;
        std::fs::read_dir(&root)
            .map_err(|e| format!("cannot list store {}: {e}", root.display()))?;
        let names_in_revision = crate::store::watch::directory_times_unreliable(&root);
        Ok(JsonlStore {
            root,
            frame_cache: Mutex::new(None),
            without_log: Mutex::default(),
            new_encoding: OnceLock::new(),
            known_headers: OnceLock::new(),
            names_in_revision,
        })
    }

    /// The store's root directory, canonicalized.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Source for JsonlStore {
    fn header(&self, key: &SessionKey) -> Result<SessionHeader, Refusal> {
        let SessionKey::File(path) = key else {
            return Err(Refusal::Corrupt("not a JSONL session".into()));
        };
        // A log that cannot be opened now is no verdict on its header.
        File::open(path).map_err(|e| io_refusal(path, e))?;
        self.read_header(path)
            .map_err(|why| corrupt(path, format!("corrupt session log: {why}")))
    }

    fn revision(&self, key: &SessionKey) -> Result<Revision, Refusal> {
        let SessionKey::File(path) = key else {
            return Err(Refusal::Corrupt("not a JSONL session".into()));
        };
        let meta = std::fs::metadata(path).map_err(|e| io_refusal(path, e))?;
        // The birth time tells a file created again under a reused inode number.
        let born = meta
            .created()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        Ok(Revision(format!(
            "{}.{}.{born}:{}:{}.{}:{}.{}",
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ctime(),
            meta.ctime_nsec()
        )))
    }

    /// The first 4 KiB and the last 64 KiB before the point: the Harness
    /// only appends, and a repair cuts only a torn tail, which no saved point
    /// lies past; a rewrite that keeps both windows is no writer's doing.
    fn prefix_digest(&self, key: &SessionKey, point: &ScanPoint) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let SessionKey::File(path) = key else {
            return None;
        };
        let file = File::open(path).ok()?;
        let mut digest = crate::digest::Fnv::default();
        digest.write(&point.offset.to_le_bytes());
        let tail_start = point.offset.saturating_sub(64 << 10);
        for (start, end) in [(0, point.offset.min(4 << 10)), (tail_start, point.offset)] {
            let mut window = vec![0; (end - start) as usize];
            file.read_exact_at(&mut window, start).ok()?;
            digest.write(&window);
        }
        Some(digest.finish())
    }

    fn mode(&self, key: &SessionKey) -> Option<u32> {
        let SessionKey::File(path) = key else {
            return None;
        };
        std::fs::symlink_metadata(path)
            .ok()
            .map(|m| m.mode() & 0o7777)
    }

    fn modified(&self, key: &SessionKey) -> Option<std::time::SystemTime> {
        let SessionKey::File(path) = key else {
            return None;
        };
        std::fs::metadata(path).and_then(|m| m.modified()).ok()
    }

    fn scan(
        &self,
        key: &SessionKey,
        from: &ScanPoint,
        sink: &mut EventSink,
    ) -> Result<(ScanPoint, ScanEnd), Refusal> {
        let SessionKey::File(path) = key else {
            return Err(Refusal::Corrupt("not a JSONL session".into()));
        };
        if is_zstd(path) {
            self.scan_zstd(path, from, sink)
        } else {
            self.scan_raw(path, from, sink)
        }
    }

    fn fetch(&self, key: &SessionKey, loc: EventLoc) -> Result<JsonMap, Refusal> {
        let SessionKey::File(path) = key else {
            return Err(Refusal::Corrupt("not a JSONL session".into()));
        };
        let line = if is_zstd(path) {
            self.zstd_line(path, loc)?
        } else {
            raw_line(path, loc)?
        };
        let events = decode_events(&line).map_err(|_| {
            corrupt(
                path,
                format!("the record at byte {} no longer decodes", loc.record),
            )
        })?;
        events.into_iter().nth(loc.member as usize).ok_or_else(|| {
            corrupt(
                path,
                format!(
                    "the record at byte {} has no member {}",
                    loc.record, loc.member
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_zstd_is_the_file_name_test() {
        for path in [
            "session.jsonl.zstd",
            "/s/p/id/session.jsonl.zstd",
            "/s/p/id/session.jsonl",
            "/s/p/id/xsession.jsonl.zstd",
            "/s/p/session.jsonl.zstd/id/session.jsonl",
            "relative/session.jsonl.zstd",
            "/",
            "",
        ] {
            let path = Path::new(path);
            let by_name = path.file_name().is_some_and(|n| n == ZSTD_NAME);
            assert_eq!(is_zstd(path), by_name, "{}", path.display());
        }
    }
}
