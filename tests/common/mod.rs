//! Shared helpers for tests that mount for real: a temporary copy of a fixture
//! store, and a mount guard that always unmounts and reaps the process, even
//! when the test fails.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub mod views;

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

pub fn expected(relative: &str) -> serde_json::Value {
    let text =
        std::fs::read_to_string(fixtures().join("expected").join(relative)).expect("expected file");
    serde_json::from_str(&text).expect("expected JSON")
}

/// A directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("sessionfs-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Copies a file or directory tree, making the copy writable (fixtures are read-only).
pub fn copy_tree(from: &Path, to: &Path) {
    let meta = std::fs::metadata(from).expect("source");
    if meta.is_dir() {
        std::fs::create_dir_all(to).expect("mkdir");
        for entry in std::fs::read_dir(from).expect("readdir") {
            let entry = entry.expect("entry");
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        }
    } else {
        std::fs::copy(from, to).expect("copy");
        let mut perms = std::fs::metadata(to).expect("meta").permissions();
        use std::os::unix::fs::PermissionsExt;
        perms.set_mode(0o600);
        std::fs::set_permissions(to, perms).expect("chmod");
    }
}

/// A copy of a fixture store (`stores/<name>`) in a fresh temp dir; for SQLite
/// stores the path is the database file.
pub struct StoreCopy {
    pub dir: TempDir,
    pub path: PathBuf,
}

pub fn store_copy(name: &str) -> StoreCopy {
    let dir = TempDir::new("store");
    let source = fixtures().join("stores").join(name);
    let root = dir.path().join("store");
    copy_tree(&source, &root);
    let db = root.join("sessions.db");
    let path = if db.exists() { db } else { root };
    StoreCopy { dir, path }
}

/// Every file under a directory with its bytes.
pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("readdir") {
            let entry = entry.expect("entry");
            let path = entry.path();
            if entry.file_type().expect("type").is_dir() {
                stack.push(path);
            } else {
                out.insert(
                    path.strip_prefix(root).expect("prefix").to_path_buf(),
                    std::fs::read(&path).expect("read"),
                );
            }
        }
    }
    out
}

pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_sessionfs"))
}

/// A live `sessionfs -f` mount. Drop unmounts (lazily if busy) and reaps the
/// process, so no test leaves a mount or a process behind.
pub struct Mount {
    pub dir: TempDir,
    child: Option<Child>,
}

fn is_mounted(path: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let target = path.to_string_lossy();
    mounts.lines().any(|line| {
        line.split(' ').nth(1) == Some(&target)
            && line
                .split(' ')
                .nth(2)
                .is_some_and(|t| t.starts_with("fuse"))
    })
}

impl Mount {
    pub fn new(store: &Path, options: &[&str]) -> Mount {
        let dir = TempDir::new("mnt");
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is required: these tests mount for real"
        );
        let child = Command::new(binary())
            .arg("-f")
            .args(options)
            .arg(store)
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn sessionfs");
        let mut mount = Mount {
            dir,
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !is_mounted(mount.path()) {
            if let Some(child) = mount.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("sessionfs exited before mounting: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "sessionfs did not mount within 20 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        mount
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Unmounts and waits for the process; returns its exit status.
    pub fn unmount(mut self) -> std::process::ExitStatus {
        self.stop().expect("process status")
    }

    fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        if is_mounted(self.path()) {
            let path =
                std::ffi::CString::new(self.path().as_os_str().as_encoded_bytes()).expect("path");
            // SAFETY: a valid NUL-terminated path.
            if unsafe { libc::umount(path.as_ptr()) } != 0 {
                // SAFETY: as above; busy mounts are detached lazily.
                unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return child.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Reads a JSON file from the mount.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The session directory whose header.json names `id`.
pub fn session_dir(mount: &Path, id: &str) -> PathBuf {
    let name = sessionfs::model::ids::encode_segment(id).expect("id");
    mount.join(name)
}

/// The names in a directory, sorted.
pub fn sorted_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").file_name().into_string().expect("utf8"))
        .collect();
    names.sort();
    names
}

/// The names in a session directory's events/, sorted, so in seq order.
pub fn event_names(dir: &Path) -> Vec<String> {
    sorted_names(&dir.join("events"))
}

/// The events a session directory shows, in seq order.
pub fn events(dir: &Path) -> Vec<serde_json::Value> {
    event_names(dir)
        .iter()
        .map(|name| read_json(&dir.join("events").join(name)))
        .collect()
}

/// splitmix64: a small deterministic generator, so failures reproduce by seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// An index into a collection of `len` items.
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.index(items.len())]
    }
}

/// Polls until `check` holds, for at most `limit`; returns how long it took.
pub fn within(limit: Duration, what: &str, mut check: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < limit,
            "{what} did not happen within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

/// Every fixture store of the current format, crashed ones included.
pub const STORES: [&str; 8] = [
    "jsonl",
    "jsonl-zstd",
    "sqlite14",
    "sqlite17",
    "crash/jsonl",
    "crash/jsonl-zstd",
    "crash/sqlite14",
    "crash/sqlite17",
];

/// Runs `f` on a fresh shared read-only mapping of a whole file (its bytes
/// and length), unmapped after; an empty file is not mapped.
pub fn with_mapping<T>(path: &Path, f: impl FnOnce(&[u8]) -> T) -> T {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(path).expect("open");
    let len = file.metadata().expect("fstat").len() as usize;
    if len == 0 {
        return f(&[]);
    }
    // SAFETY: a fresh mapping of an open descriptor, used within its length
    // and unmapped before return; `f` cannot keep the slice.
    unsafe {
        let at = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        );
        assert_ne!(
            at,
            libc::MAP_FAILED,
            "mmap {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
        let result = f(std::slice::from_raw_parts(at as *const u8, len));
        libc::munmap(at, len);
        result
    }
}
