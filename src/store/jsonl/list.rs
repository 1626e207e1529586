//! Listing a JSONL root (spec §10.1, §10.9): project directories, then
//! session directories, each listed from its header alone, many at once.

use std::ffi::CStr;
use std::fs::File;
use std::io::{BufReader, Read};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

use super::record::{Line, read_line};
use super::write::Encoding;
use super::zstd::read_zstd_header;
use super::{JsonlStore, MAX_HEADER_BYTES, RAW_NAME, ZSTD_NAME, is_zstd};
use crate::model::Refusal;
use crate::model::header::SessionHeader;
use crate::model::ids::{decode_segment, encode_segment, is_own_segment, project_dir};
use crate::store::lines::newline;
use crate::store::{Catalog, FileStamp, KnownHeaders, Listing, SessionKey, StoredFile, Watched};
use crate::sync::lock;

/// Session directories listed at a time.
const LIST_PART: usize = 4096;

impl JsonlStore {
    /// Real subdirectories of `dir` (symlinks are not followed out of the store).
    fn subdirs(dir: &Path) -> Vec<(String, PathBuf)> {
        let names = Self::entries(dir).0;
        names
            .into_iter()
            .map(|name| {
                let path = dir.join(&name);
                (name, path)
            })
            .collect()
    }

    /// One pass over `dir`: the names of its real subdirectories, sorted, and
    /// its regular files (a project's logs of the obsolete flat layout).
    fn entries(dir: &Path) -> (Vec<String>, Vec<std::fs::DirEntry>) {
        let (mut dirs, mut files) = (Vec::new(), Vec::new());
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => {
                    if let Ok(name) = entry.file_name().into_string() {
                        dirs.push(name);
                    }
                }
                Ok(kind) if kind.is_file() => files.push(entry),
                _ => {}
            }
        }
        dirs.sort();
        (dirs, files)
    }

    /// The listings of some session directories, in their order. Each costs
    /// two `stat`s relative to its project directory (and a read of its first
    /// bytes when its header is not known), independent of the others: many
    /// at once keep the disk busy, so a store of thousands of sessions lists
    /// in a fraction of the time.
    fn list_session_dirs(&self, projects: &[Project], session_dirs: &[SessionDir]) -> Vec<Listing> {
        let threads = std::thread::available_parallelism()
            .map_or(4, |n| n.get() * 8)
            .min(16);
        let next = AtomicUsize::new(0);
        let mut found: Vec<(usize, Listing)> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| {
                        let mut listed = Vec::new();
                        let mut relative = Vec::new();
                        let mut project_dirs = ProjectDirs::default();
                        loop {
                            let at = next.fetch_add(1, Ordering::Relaxed);
                            let Some(session) = session_dirs.get(at) else {
                                break;
                            };
                            let project = &projects[session.project];
                            let mut found = false;
                            for (k, file) in [RAW_NAME, ZSTD_NAME].into_iter().enumerate() {
                                relative.clear();
                                relative.extend_from_slice(session.segment.as_bytes());
                                relative.push(b'/');
                                relative.extend_from_slice(file.as_bytes());
                                let Some(stat) = project.stat(&mut relative) else {
                                    continue;
                                };
                                let path = log_path(&project.path, &session.segment, file);
                                let listing =
                                    self.listing(&session.segment, &path, &stat, &mut project_dirs);
                                listed.push((2 * at + k, listing));
                                found = true;
                            }
                            if !found {
                                lock(&self.without_log).push(project.path.join(&session.segment));
                            }
                        }
                        listed
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|worker| worker.join().unwrap_or_default())
                .collect()
        });
        // In store order, whichever worker read them.
        found.sort_by_key(|(order, _)| *order);
        found.into_iter().map(|(_, listing)| listing).collect()
    }

    pub(super) fn read_header(&self, path: &Path) -> Result<SessionHeader, String> {
        let line = if is_zstd(path) {
            read_zstd_header(path)?
        } else {
            read_raw_header(path)?
        };
        if let Some(header) = SessionHeader::quick_jsonl(&line) {
            return Ok(header);
        }
        let text = String::from_utf8_lossy(&line);
        let value: Value = serde_json::from_str(&text)
            .map_err(|_| "first line is not a session header (not JSON)".to_string())?;
        let Value::Object(map) = value else {
            return Err("first line is not a session header (not an object)".into());
        };
        SessionHeader::from_jsonl(&map)
    }

    /// The header of the log at `path`: the one an earlier listing read, while
    /// the log's stamp is unchanged, else read now.
    fn listed_header(&self, path: &Path, stat: &libc::stat) -> Result<SessionHeader, String> {
        let known = self.known_headers.get();
        let stamp = FileStamp::of(stat);
        if let Some(header) = known.and_then(|known| known.header(path, &stamp)) {
            return Ok(header);
        }
        let header = self.read_header(path)?;
        if let Some(known) = known {
            known.record(path, stamp, &header);
        }
        Ok(header)
    }

    /// One session's listing, from its header alone.
    fn listing(
        &self,
        segment: &str,
        path: &Path,
        stat: &libc::stat,
        project_dirs: &mut ProjectDirs,
    ) -> Listing {
        let header = self
            .listed_header(path, stat)
            .and_then(|h| self.check_identity(path, &h, project_dirs).map(|_| h));
        let (id, raw_name) = match &header {
            Ok(h) => (h.id.clone(), None),
            Err(_) => match decode_segment(segment) {
                Some(id) => (id, None),
                None => (segment.to_string(), Some(segment.to_string())),
            },
        };
        Listing {
            id,
            key: SessionKey::File(path.to_path_buf()),
            header,
            raw_name,
            mode: Some(stat.st_mode & 0o7777),
            stored: Some(StoredFile::of(stat)),
        }
    }

    /// The identity check of spec §10.9: the header's id and cwd must name this path.
    fn check_identity(
        &self,
        path: &Path,
        header: &SessionHeader,
        project_dirs: &mut ProjectDirs,
    ) -> Result<(), String> {
        let file = if is_zstd(path) { ZSTD_NAME } else { RAW_NAME };
        // The common case, checked in place: an id that is its own segment,
        // at the path its cwd names.
        if is_own_segment(&header.id)
            && is_joined(
                path,
                &self.root,
                [project_dirs.of(header.cwd.as_deref()), &header.id, file],
            )
        {
            return Ok(());
        }
        let segment = encode_segment(&header.id).ok_or("the header's session id is empty")?;
        let expected = self
            .root
            .join(project_dir(header.cwd.as_deref()))
            .join(segment)
            .join(file);
        let same = expected == path
            || matches!((expected.canonicalize(), path.canonicalize()), (Ok(a), Ok(b)) if a == b);
        if same {
            Ok(())
        } else {
            Err(format!(
                "header id {:?} and cwd {:?} identify {}, not this file",
                header.id,
                header.cwd,
                expected.display()
            ))
        }
    }
}

/// A project directory being listed, held open: each session's log is found
/// by a `stat` relative to it, which walks two path components instead of
/// the whole path from `/` (walking it was a fifth of a listing's CPU on tmpfs).
struct Project {
    path: PathBuf,
    /// `O_PATH`: it only anchors lookups. `None` when it could not be opened,
    /// which leaves its sessions unlisted, as a full path would.
    dir: Option<File>,
}

impl Project {
    fn open(path: PathBuf) -> Project {
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(&path)
            .ok();
        Project { path, dir }
    }

    /// The `stat` of the regular file at `relative` (a path under this
    /// directory), followed by nothing.
    fn stat(&self, relative: &mut Vec<u8>) -> Option<libc::stat> {
        stat_file(self.dir.as_ref()?.as_raw_fd(), relative)
    }
}

/// What a listing sends its caller, a part at a time.
enum Part {
    /// Logs of the obsolete flat layout, listed as such.
    Flat(Vec<Listing>),
    /// Session directories' logs.
    Sessions(Vec<Listing>),
}

/// A log directly inside a project directory (the obsolete flat layout):
/// listed under its name, refused with what to do.
fn flat_listing(file: &std::fs::DirEntry) -> Option<Listing> {
    let name = file.file_name();
    let name = name.to_string_lossy();
    let stem = name
        .strip_suffix(".jsonl.zstd")
        .or_else(|| name.strip_suffix(".jsonl"))?;
    let decoded = decode_segment(stem);
    Some(Listing {
        id: decoded.clone().unwrap_or_else(|| stem.to_string()),
        key: SessionKey::File(file.path()),
        header: Err("obsolete flat layout: a session log directly inside a project directory; move it to <project>/<id>/session.jsonl".into()),
        raw_name: decoded.is_none().then(|| stem.to_string()),
        mode: None,
        stored: None,
    })
}

/// `<project>/<segment>/<file>`, built in one allocation.
fn log_path(project: &Path, segment: &str, file: &str) -> PathBuf {
    let project = project.as_os_str();
    let mut path =
        std::ffi::OsString::with_capacity(project.len() + segment.len() + file.len() + 2);
    path.push(project);
    path.push("/");
    path.push(segment);
    path.push("/");
    path.push(file);
    path.into()
}

/// The project directory of the cwd last asked for: a listing meets the
/// sessions of one project in a row, so it encodes each cwd about once.
#[derive(Default)]
struct ProjectDirs {
    last: Option<(Option<String>, String)>,
}

impl ProjectDirs {
    fn of(&mut self, cwd: Option<&str>) -> &str {
        if self
            .last
            .as_ref()
            .is_none_or(|(last, _)| last.as_deref() != cwd)
        {
            self.last = Some((cwd.map(str::to_string), project_dir(cwd)));
        }
        self.last.as_ref().map_or("", |(_, dir)| dir)
    }
}

/// Whether `path` is `root.join(names[0]).join(names[1])...`, compared in place.
fn is_joined(path: &Path, root: &Path, names: [&str; 3]) -> bool {
    let root = root.as_os_str().as_encoded_bytes();
    let Some(mut rest) = path.as_os_str().as_encoded_bytes().strip_prefix(root) else {
        return false;
    };
    for (k, name) in names.into_iter().enumerate() {
        // `join` adds a separator, except after a root that ends with one.
        if k > 0 || !root.ends_with(b"/") {
            let Some(after) = rest.strip_prefix(b"/") else {
                return false;
            };
            rest = after;
        }
        let Some(after) = rest.strip_prefix(name.as_bytes()) else {
            return false;
        };
        rest = after;
    }
    rest.is_empty()
}

/// A session directory to list: its name and the index of its project.
struct SessionDir {
    project: usize,
    segment: String,
}

/// `fstatat` of `name` relative to `dir` without following a final symlink:
/// `Some` for a regular file. `name` gets its terminating NUL here.
fn stat_file(dir: RawFd, name: &mut Vec<u8>) -> Option<libc::stat> {
    name.push(0);
    let name = CStr::from_bytes_with_nul(name).ok()?;
    // SAFETY: `name` is NUL-terminated and `stat` is written whole on success.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    let done = unsafe { libc::fstatat(dir, name.as_ptr(), &mut stat, libc::AT_SYMLINK_NOFOLLOW) };
    (done == 0 && stat.st_mode & libc::S_IFMT == libc::S_IFREG).then_some(stat)
}

fn read_raw_header(path: &Path) -> Result<Vec<u8>, String> {
    let mut file = File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    // Most headers fit in one small read, made without a buffer on the heap.
    let mut first = [0u8; 2048];
    let mut filled = 0;
    while filled < first.len() {
        match file.read(&mut first[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("cannot read: {e}")),
        }
        if let Some(end) = newline(&first[..filled]) {
            return Ok(first[..end].to_vec());
        }
    }
    match read_line(
        &mut BufReader::with_capacity(8 << 10, (&first[..filled]).chain(file)),
        MAX_HEADER_BYTES,
    )
    .map_err(|e| format!("cannot read: {e}"))?
    {
        Line::Complete(line) => Ok(line),
        Line::TooLong => Err("first line is longer than a header line can be".into()),
        _ => Err("empty or header-less session log (no complete first line yet)".into()),
    }
}

impl Catalog for JsonlStore {
    fn describe(&self) -> String {
        format!("JSONL session root {}", self.root.display())
    }

    fn list(&self) -> Vec<Listing> {
        let mut out = Vec::new();
        // Listing a directory store reports no failure of its own: a session
        // that cannot be read is listed with the reason.
        let _ = self.list_parts(&mut |part| out.extend(part));
        out
    }

    fn list_parts(&self, each: &mut dyn FnMut(Vec<Listing>)) -> Result<(), Refusal> {
        lock(&self.without_log).clear();
        let mut kinds = Kinds::default();
        // A part at a time, so a listing never holds every header at once;
        // the next part is listed while the caller takes this one, and the
        // first is listed as soon as its project directories are read.
        std::thread::scope(|scope| {
            let (parts, listed) = std::sync::mpsc::sync_channel(1);
            scope.spawn(move || {
                let mut projects = Vec::new();
                let mut batch = Vec::new();
                for (_, path) in Self::subdirs(&self.root) {
                    let (dirs, files) = Self::entries(&path);
                    let flat: Vec<Listing> = files.iter().filter_map(flat_listing).collect();
                    if !flat.is_empty() && parts.send(Part::Flat(flat)).is_err() {
                        return;
                    }
                    let project = projects.len();
                    projects.push(Project::open(path));
                    batch.extend(
                        dirs.into_iter()
                            .map(|segment| SessionDir { project, segment }),
                    );
                    while batch.len() >= LIST_PART {
                        let rest = batch.split_off(LIST_PART);
                        let part = self.list_session_dirs(&projects, &batch);
                        batch = rest;
                        if parts.send(Part::Sessions(part)).is_err() {
                            return;
                        }
                    }
                }
                if !batch.is_empty() {
                    let _ = parts.send(Part::Sessions(self.list_session_dirs(&projects, &batch)));
                }
            });
            for part in listed {
                match part {
                    Part::Flat(part) => each(part),
                    Part::Sessions(part) => {
                        kinds.note(&part);
                        each(part);
                    }
                }
            }
        });
        // The first listing decides the encoding of every new session.
        let _ = self.new_encoding.set(kinds.encoding());
        if let Some(known) = self.known_headers.get() {
            known.listed_all();
        }
        Ok(())
    }

    fn remember_headers(&self, known: std::sync::Arc<dyn KnownHeaders>) {
        let _ = self.known_headers.set(known);
    }

    fn listing_revision(&self) -> Option<String> {
        // New and removed sessions change the mtime of their project directory
        // (a session directory made or removed); a log linked into a directory
        // that had none changes that directory. So this costs a stat per project
        // and per directory seen without a log, not one per session.
        //
        // A directory changed in the last two seconds is not trusted to show
        // a second change: a file system with times in whole seconds (sshfs)
        // gives a session made and removed within one second the same mtime.
        // While one is that recent, every revision differs ("racy git").
        //
        // On a FUSE store other than sshfs the names are digested too (a
        // readdir per directory instead of a stat): rclone never moves a
        // directory's time once it has listed it.
        static RACY: AtomicUsize = AtomicUsize::new(0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let mut revision = String::new();
        let mut racy = false;
        let mut add = |path: &Path| {
            let meta = std::fs::symlink_metadata(path).ok()?;
            racy |= meta.mtime() >= now - 2;
            revision.push_str(&format!("{}.{};", meta.mtime(), meta.mtime_nsec()));
            if self.names_in_revision {
                revision.push_str(&format!("{:x};", names_digest(path)?));
            }
            Some(())
        };
        add(&self.root)?;
        for (_, project) in Self::subdirs(&self.root) {
            add(&project)?;
        }
        for dir in lock(&self.without_log).iter() {
            add(dir)?;
        }
        if racy {
            revision.push_str(&format!("racy {}", RACY.fetch_add(1, Ordering::Relaxed)));
        }
        Some(revision)
    }

    fn find(&self, id: &str) -> Vec<Listing> {
        let Some(segment) = encode_segment(id) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for (_, project) in Self::subdirs(&self.root) {
            let dir = project.join(&segment);
            // As in a listing, a session directory reached through a symlink is
            // not in the store.
            if !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
                continue;
            }
            for file in [RAW_NAME, ZSTD_NAME] {
                let path = dir.join(file);
                let mut name = path.as_os_str().as_encoded_bytes().to_vec();
                if let Some(stat) = stat_file(libc::AT_FDCWD, &mut name) {
                    found.push(self.listing(&segment, &path, &stat, &mut ProjectDirs::default()));
                }
            }
        }
        found
    }

    fn contains(&self, id: &str) -> bool {
        let Some(segment) = encode_segment(id) else {
            return false;
        };
        // Anything at the session's path takes the name, except an empty directory
        // left by an interrupted materialisation; nothing is followed.
        let exists = |path: &Path| std::fs::symlink_metadata(path).is_ok();
        Self::subdirs(&self.root).iter().any(|(_, project)| {
            let dir = project.join(&segment);
            match std::fs::symlink_metadata(&dir) {
                Ok(meta) if meta.is_dir() => {
                    exists(&dir.join(RAW_NAME)) || exists(&dir.join(ZSTD_NAME))
                }
                Ok(_) => true,
                Err(_) => false,
            }
        })
    }
}

impl Watched for JsonlStore {
    fn watch_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = vec![self.root.clone()];
        dirs.extend(Self::subdirs(&self.root).into_iter().map(|(_, p)| p));
        dirs
    }

    fn session_dir(&self, key: &SessionKey) -> Option<PathBuf> {
        match key {
            SessionKey::File(path) => path.parent().map(Path::to_path_buf),
            SessionKey::Row(_) => None,
        }
    }

    fn awaiting_dirs(&self) -> Vec<PathBuf> {
        lock(&self.without_log).clone()
    }
}

/// Which encodings a listing saw.
#[derive(Default)]
struct Kinds {
    raw: bool,
    zstd: bool,
}

impl Kinds {
    fn note(&mut self, part: &[Listing]) {
        for listing in part {
            if let SessionKey::File(path) = &listing.key {
                match is_zstd(path) {
                    true => self.zstd = true,
                    false => self.raw = true,
                }
            }
        }
    }

    /// New sessions take the store's encoding: zstd (the Harness default)
    /// unless the root holds only raw logs.
    fn encoding(&self) -> Encoding {
        match (self.raw, self.zstd) {
            (true, false) => Encoding::Raw,
            _ => Encoding::Zstd,
        }
    }
}

/// A digest of a directory's entry names, in sorted order.
fn names_digest(dir: &Path) -> Option<u64> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.file_name())
        .collect();
    names.sort();
    let mut digest = crate::digest::Fnv::default();
    for name in &names {
        digest.write(name.as_encoded_bytes());
        digest.write(b"/");
    }
    Some(digest.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Catalog;

    #[test]
    fn a_session_directory_without_its_log_yet_is_awaited() {
        let root = std::env::temp_dir().join(format!("sessionfs-awaiting-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let project = root.join("_no-cwd");
        let home = project.join("nascent");
        std::fs::create_dir_all(&home).unwrap();
        let store = JsonlStore::open(&root).unwrap();
        assert!(store.list().is_empty());
        assert_eq!(store.awaiting_dirs(), vec![home.clone()]);
        let header =
            r#"{"type":"session","version":0,"id":"nascent","createdAt":1,"delegationDepth":0}"#;
        std::fs::write(home.join(RAW_NAME), format!("{header}\n")).unwrap();
        assert_eq!(store.list().len(), 1);
        assert!(store.awaiting_dirs().is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_project_lists_its_session_directories_in_order_and_its_flat_logs_as_obsolete() {
        let root = std::env::temp_dir().join(format!("sessionfs-flat-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let project = root.join("_no-cwd");
        for id in ["b-second", "a-first"] {
            let header = format!(
                r#"{{"type":"session","version":0,"id":"{id}","createdAt":1,"delegationDepth":0}}"#
            );
            std::fs::create_dir_all(project.join(id)).unwrap();
            std::fs::write(project.join(id).join(RAW_NAME), format!("{header}\n")).unwrap();
        }
        std::fs::write(project.join("old-style.jsonl"), "{}\n").unwrap();
        std::fs::write(project.join("notes.txt"), "not a log\n").unwrap();
        let store = JsonlStore::open(&root).unwrap();
        let listed: Vec<(String, bool)> = store
            .list()
            .into_iter()
            .map(|l| (l.id, l.header.is_ok()))
            .collect();
        assert_eq!(
            listed,
            [
                ("old-style".to_string(), false),
                ("a-first".to_string(), true),
                ("b-second".to_string(), true)
            ]
        );
        let flat = store.list().remove(0);
        assert!(flat.header.unwrap_err().contains("obsolete flat layout"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_store_larger_than_a_part_lists_every_session_once_in_order_with_its_stat() {
        let root = std::env::temp_dir().join(format!("sessionfs-parts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        // Parts end inside the second project; the third holds a flat log,
        // a directory without a log and a log that is a symlink.
        let mut expected = Vec::new();
        for (project, count) in [("--p1--", LIST_PART - 3), ("--p2--", 10), ("--p3--", 2)] {
            for n in 0..count {
                let id = format!("s{n:05}");
                let dir = root.join(project).join(&id);
                std::fs::create_dir_all(&dir).unwrap();
                let cwd = format!(r#","cwd":"/{}""#, project.trim_matches('-'));
                let header = format!(
                    r#"{{"type":"session","version":0,"id":"{id}","createdAt":1,"delegationDepth":0{cwd}}}"#
                );
                let file = if n % 2 == 0 { RAW_NAME } else { ZSTD_NAME };
                let body = format!("{header}\n");
                let body = match file {
                    RAW_NAME => body.into_bytes(),
                    _ => zstd::encode_all(body.as_bytes(), 1).unwrap(),
                };
                std::fs::write(dir.join(file), body).unwrap();
                expected.push((id, dir.join(file)));
            }
        }
        let p3 = root.join("--p3--");
        std::fs::write(p3.join("flat.jsonl"), "{}\n").unwrap();
        std::fs::create_dir(p3.join("empty")).unwrap();
        std::fs::create_dir(p3.join("linked")).unwrap();
        std::os::unix::fs::symlink(&expected[0].1, p3.join("linked").join(RAW_NAME)).unwrap();
        let store = JsonlStore::open(&root).unwrap();
        let listed = store.list();
        let (flat, sessions): (Vec<_>, Vec<_>) = listed.iter().partition(|l| l.stored.is_none());
        assert_eq!(flat.len(), 1);
        assert_eq!(sessions.len(), expected.len());
        for (listing, (id, path)) in sessions.iter().zip(&expected) {
            assert_eq!(&listing.id, id);
            assert_eq!(listing.key, SessionKey::File(path.clone()));
            assert!(listing.header.is_ok(), "{id}: {:?}", listing.header);
            let meta = std::fs::symlink_metadata(path).unwrap();
            let modified = meta
                .modified()
                .unwrap()
                .duration_since(std::time::UNIX_EPOCH);
            let stored = StoredFile {
                size: meta.len(),
                modified_ms: modified.unwrap().as_millis() as i64,
            };
            assert_eq!(listing.stored, Some(stored), "{id}");
            assert_eq!(listing.mode, Some(meta.mode() & 0o7777), "{id}");
        }
        // Listing threads record them as they meet them, in no set order.
        let mut awaiting = store.awaiting_dirs();
        awaiting.sort();
        assert_eq!(awaiting, vec![p3.join("empty"), p3.join("linked")]);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_identity_fast_path_agrees_with_building_the_expected_path() {
        for id in [
            "abc", "a.b_c-9", ".", "..", "", "~x", "a b", "é", ".hidden", "a/b",
        ] {
            assert_eq!(
                is_own_segment(id),
                encode_segment(id).as_deref() == Some(id),
                "{id:?}"
            );
        }
        let names = ["--p--", "id", RAW_NAME];
        for root in ["/", "/s", "/s/", "rel", "/s//t"] {
            let joined = Path::new(root).join(names[0]).join(names[1]).join(names[2]);
            let others = [
                joined.clone(),
                Path::new(root).join("--q--").join("id").join(RAW_NAME),
                Path::new(root).join(names[0]).join("id").join(ZSTD_NAME),
                Path::new(root)
                    .join(names[0])
                    .join("i")
                    .join("d")
                    .join(RAW_NAME),
                PathBuf::from(format!("{}/x", joined.display())),
                PathBuf::from(format!("{root}{}/id/{RAW_NAME}", names[0])),
                PathBuf::from(format!("{root}//{}/id/{RAW_NAME}", names[0])),
            ];
            for path in others {
                let expected = Path::new(root).join(names[0]).join(names[1]).join(names[2]);
                assert_eq!(
                    is_joined(&path, Path::new(root), names),
                    expected.as_os_str() == path.as_os_str(),
                    "{root} {}",
                    path.display()
                );
            }
        }
    }

    #[test]
    fn a_header_line_is_read_whether_it_fits_the_first_read_or_not() {
        let dir = std::env::temp_dir().join(format!("sessionfs-header-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join(RAW_NAME);
        for len in [
            0,
            10,
            2046,
            2047,
            2048,
            2049,
            5000,
            MAX_HEADER_BYTES,
            MAX_HEADER_BYTES + 1,
        ] {
            let line = "h".repeat(len);
            std::fs::write(&log, format!("{line}\n{{\"next\":1}}\n")).unwrap();
            let read = read_raw_header(&log);
            if len <= MAX_HEADER_BYTES {
                assert_eq!(read.map(|l| l.len()), Ok(len), "a {len}-byte line");
            } else {
                assert!(read.unwrap_err().contains("longer"), "a {len}-byte line");
            }
            std::fs::write(&log, &line).unwrap();
            assert!(read_raw_header(&log).is_err(), "{len} bytes and no newline");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_directory_changed_in_the_last_seconds_is_not_trusted_to_show_the_next_change() {
        let root = std::env::temp_dir().join(format!("sessionfs-racy-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let project = root.join("_no-cwd");
        std::fs::create_dir_all(&project).unwrap();
        let store = JsonlStore::open(&root).unwrap();
        // Just made: two revisions differ, so a change within the same
        // second (on a file system with whole-second times) is not missed.
        assert_ne!(store.listing_revision(), store.listing_revision());
        // Older: the revision holds while nothing changes.
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        for dir in [&root, &project] {
            std::fs::File::open(dir).unwrap().set_modified(old).unwrap();
        }
        assert_eq!(store.listing_revision(), store.listing_revision());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn where_directory_times_stay_put_sessions_added_and_removed_are_seen_by_their_names() {
        let root = std::env::temp_dir().join(format!("sessionfs-names-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let project = root.join("_no-cwd");
        std::fs::create_dir_all(project.join("first")).unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        let age = |dirs: &[&Path]| {
            for dir in dirs {
                std::fs::File::open(dir).unwrap().set_modified(old).unwrap();
            }
        };
        age(&[&root, &project]);
        let mut store = JsonlStore::open(&root).unwrap();
        let by_times = store.listing_revision();
        store.names_in_revision = true;
        let by_names = store.listing_revision();
        // rclone: a session directory made, and the project's time as it was.
        std::fs::create_dir(project.join("second")).unwrap();
        age(&[&project]);
        assert_ne!(store.listing_revision(), by_names);
        store.names_in_revision = false;
        assert_eq!(store.listing_revision(), by_times, "times alone miss it");
        store.names_in_revision = true;
        let with_names = store.listing_revision();
        std::fs::remove_dir(project.join("second")).unwrap();
        age(&[&project]);
        assert_ne!(store.listing_revision(), with_names, "and its removal");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
