//! Shared helpers for tests that mount for real: a temporary copy of a fixture
//! store, and a mount guard that always unmounts and reaps the process, even
//! when the test fails.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub mod follow;
pub mod harness;
pub mod harness_writer;
pub mod servers;
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

/// `examples/demo-store`, the store the README's examples use (read-only: copy it).
pub fn demo_store() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/demo-store")
}

/// A writable copy of `examples/demo-store` (the store the README's examples
/// use) at `<dir>/store`.
pub fn demo_copy() -> StoreCopy {
    let dir = TempDir::new("demo-store");
    let path = dir.path().join("store");
    copy_tree(&demo_store(), &path);
    StoreCopy { dir, path }
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
/// process, so no test leaves a mount or a process behind. `Mount::new` is
/// the common case; `Mount::builder` sets what else a test needs.
pub struct Mount {
    pub dir: TempDir,
    /// `XDG_CACHE_HOME` of the process, so that its persistent index is its
    /// own (and starts empty) unless the test names one with `-o index=`.
    _cache: TempDir,
    child: Option<Child>,
    /// Where the process's stderr goes, when the builder captured it.
    stderr: Option<(TempDir, PathBuf)>,
}

/// How a [`Mount`] is started: its options, the umask its process starts
/// with, extra environment, and whether its stderr is kept in a file.
pub struct MountBuilder<'a> {
    store: &'a Path,
    options: Vec<String>,
    umask: Option<libc::mode_t>,
    env: Vec<(String, String)>,
    capture_stderr: bool,
}

impl MountBuilder<'_> {
    /// Command-line arguments before the store, as `Mount::new` takes them.
    pub fn options(mut self, options: &[&str]) -> Self {
        self.options.extend(options.iter().map(|o| o.to_string()));
        self
    }

    /// The umask the sessionfs process starts with.
    pub fn umask(mut self, umask: libc::mode_t) -> Self {
        self.umask = Some(umask);
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Keeps stderr in a file, for [`Mount::stderr`], instead of the test's own.
    pub fn capture_stderr(mut self) -> Self {
        self.capture_stderr = true;
        self
    }

    /// Spawns sessionfs and waits until the kernel lists the mount.
    pub fn start(self) -> Mount {
        use std::os::unix::process::CommandExt;
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is required: these tests mount for real"
        );
        let dir = TempDir::new("mnt");
        let cache = TempDir::new("mnt-cache");
        let mut command = Command::new(binary());
        command
            .env("XDG_CACHE_HOME", cache.path())
            .arg("-f")
            .args(&self.options)
            .arg(self.store)
            .arg(dir.path())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let stderr = self.capture_stderr.then(|| {
            let logs = TempDir::new("mnt-log");
            let file = logs.path().join("stderr");
            (logs, file)
        });
        match &stderr {
            Some((_, file)) => command.stderr(std::fs::File::create(file).expect("stderr file")),
            None => command.stderr(Stdio::inherit()),
        };
        if let Some(umask) = self.umask {
            // SAFETY: umask(2) is async-signal-safe and cannot fail.
            unsafe {
                command.pre_exec(move || {
                    libc::umask(umask);
                    Ok(())
                });
            }
        }
        let child = command.spawn().expect("spawn sessionfs");
        let mut mount = Mount {
            dir,
            _cache: cache,
            child: Some(child),
            stderr,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !is_mounted(mount.path()) {
            if let Some(child) = mount.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                let stderr = mount.stderr.as_ref().map(|_| mount.stderr());
                panic!(
                    "sessionfs exited before mounting: {status}{}",
                    stderr.map(|e| format!(": {e}")).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "sessionfs did not mount within 20 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        mount
    }
}

/// Whether a FUSE file system is mounted at `path`.
pub fn is_mounted(path: &Path) -> bool {
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
        Mount::builder(store).options(options).start()
    }

    pub fn builder(store: &Path) -> MountBuilder<'_> {
        MountBuilder {
            store,
            options: Vec::new(),
            umask: None,
            env: Vec::new(),
            capture_stderr: false,
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// What the process wrote on stderr so far (the builder captured it).
    pub fn stderr(&self) -> String {
        let (_, file) = self
            .stderr
            .as_ref()
            .expect("a mount built with capture_stderr");
        std::fs::read_to_string(file).unwrap_or_default()
    }

    /// Waits for the process to exit by itself, for at most `limit`.
    pub fn exited_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Unmounts and waits for the process; returns its exit status.
    pub fn unmount(mut self) -> std::process::ExitStatus {
        self.stop().expect("process status")
    }

    fn stop(&mut self) -> Option<std::process::ExitStatus> {
        if is_mounted(self.path()) {
            let path =
                std::ffi::CString::new(self.path().as_os_str().as_encoded_bytes()).expect("path");
            // SAFETY: a valid NUL-terminated path.
            if unsafe { libc::umount(path.as_ptr()) } != 0 {
                // SAFETY: as above; busy mounts are detached lazily.
                unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
            }
        }
        let mut child = self.child.take()?;
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

/// A path quoted for sh.
pub fn quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', "'\\''"))
}

/// Runs a shell command as `nobody` (uid and gid 65534, no supplementary groups).
pub fn as_nobody(command: &str) -> std::process::Output {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "sh",
            "-c",
            command,
        ])
        .stdin(Stdio::null())
        .output()
        .expect("setpriv")
}

/// Reads a JSON file from the mount.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The session directory whose header.json names `id`.
pub fn session_dir(mount: &Path, id: &str) -> PathBuf {
    mount.join(sessionfs::fs::mount_name(id))
}

/// The names in a directory, sorted.
/// The mount root's own entries, listed before its sessions.
pub const ROOT_OWN: [&str; 5] = ["flush", "sessions.jsonl", "latest", "by-project", "by-date"];

/// The names of the mount root's sessions (its own entries left out), sorted.
pub fn session_names(mount: &Path) -> Vec<String> {
    let mut names = sorted_names(mount);
    names.retain(|name| !ROOT_OWN.contains(&name.as_str()));
    names
}

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
    /// A generator seeded from the clock; the seed is printed under `label`,
    /// so a failing run can be replayed with `Rng(seed)`.
    pub fn seeded(label: &str) -> Rng {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos() as u64;
        eprintln!("{label}: seed {seed}");
        Rng(seed)
    }

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

/// A 64-bit digest of some bytes, to compare contents without keeping them.
pub fn digest(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
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

/// Runs `f` (a system call on the mount that may block) on its own thread and
/// fails the test if it takes longer than `limit`, so a hung request ends the
/// test and the mount's guard unmounts (which unblocks the thread) instead of
/// hanging the suite with the mount left behind.
pub fn bounded<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(f());
    });
    receiver
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{what} did not return within {limit:?}"))
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
