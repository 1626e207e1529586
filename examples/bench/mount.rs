//! Mounting the release binary, dropping caches, timing commands and reading
//! the sessionfs process's counters from /proc.

use std::ffi::CString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `sessionfs -f` mount; unmounted and reaped when dropped.
pub struct Mount {
    child: Option<Child>,
    pub dir: PathBuf,
}

fn is_mounted(dir: &Path) -> bool {
    let text = fs::read_to_string("/proc/mounts").unwrap_or_default();
    let want = dir.display().to_string();
    text.lines()
        .any(|line| line.split(' ').nth(1) == Some(want.as_str()))
}

/// Unmounts `dir`, lazily when it stays busy.
pub fn unmount(dir: &Path) {
    let Ok(path) = CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return;
    };
    for _ in 0..50 {
        if !is_mounted(dir) {
            return;
        }
        // SAFETY: a valid NUL-terminated path.
        if unsafe { libc::umount2(path.as_ptr(), 0) } == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: as above.
    unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
}

impl Mount {
    /// Mounts `store` at `dir` with `sessionfs -f -o OPTIONS` and waits until the
    /// mount shows in /proc/mounts. sessionfs's stderr goes to `log`.
    pub fn new(binary: &Path, store: &Path, dir: &Path, options: &str, log: &Path) -> Mount {
        if is_mounted(dir) {
            unmount(dir);
        }
        fs::create_dir_all(dir).expect("create mount point");
        let log_file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("open sessionfs log");
        let mut command = Command::new(binary);
        command.arg("-f");
        if !options.is_empty() {
            command.args(["-o", options]);
        }
        let child = command
            .arg(store)
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log_file))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let mut mount = Mount {
            child: Some(child),
            dir: dir.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !is_mounted(dir) {
            if let Some(status) = mount
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                let tail = fs::read_to_string(log).unwrap_or_default();
                let tail: Vec<&str> = tail.lines().rev().take(5).collect();
                panic!(
                    "sessionfs exited ({status}) before mounting {}: {}",
                    store.display(),
                    tail.join(" | ")
                );
            }
            assert!(
                Instant::now() < deadline,
                "sessionfs did not mount {} within 20 s",
                store.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        mount
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.join(relative)
    }

    /// Peak resident set size of the sessionfs process so far, in bytes.
    pub fn peak_rss(&self) -> u64 {
        status_kib(self.pid(), "VmHWM:") * 1024
    }

    /// `(read_bytes, rchar)` from /proc/<pid>/io.
    pub fn io(&self) -> (u64, u64) {
        let text = fs::read_to_string(format!("/proc/{}/io", self.pid())).unwrap_or_default();
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        (field("read_bytes:"), field("rchar:"))
    }

    /// CPU time (user + system, all threads) used by sessionfs so far, in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        let text = fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        // Fields after the command name, which is in parentheses and may hold spaces.
        let rest = text.rsplit_once(')').map_or("", |(_, r)| r);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of the whole line: 12 and 13 here.
        let ticks: u64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
            + fields
                .get(12)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        ticks as f64 / hz
    }

    pub fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        unmount(&self.dir);
        if let Some(mut child) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        self.stop();
    }
}

fn status_kib(pid: u32, key: &str) -> u64 {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// `sync; echo 3 > /proc/sys/vm/drop_caches`. False when not permitted.
pub fn drop_caches() -> bool {
    // SAFETY: sync() has no preconditions.
    unsafe { libc::sync() };
    fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// Runs `sh -c script` and returns its wall time and stdout; panics on failure.
pub fn time_sh(script: &str) -> (f64, String) {
    let (elapsed, stdout, _) = try_time_sh(script).unwrap_or_else(|why| panic!("{why}"));
    (elapsed, stdout)
}

/// Runs `sh -c script` and returns its wall time, stdout and stderr, or why it failed.
pub fn try_time_sh(script: &str) -> Result<(f64, String, String), String> {
    let started = Instant::now();
    let output = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run sh: {e}"))?;
    let elapsed = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
    if !output.status.success() {
        return Err(format!("`{script}` failed ({}): {stderr}", output.status));
    }
    Ok((
        elapsed,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr,
    ))
}

/// Reads a file sequentially with 128 KiB reads; returns (seconds, bytes).
pub fn read_file(path: &Path) -> (f64, u64) {
    use std::io::Read;
    let started = Instant::now();
    let mut file =
        fs::File::open(path).unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    // As `cat` does: blocks of the file's st_blksize, at least 128 KiB.
    let block = {
        use std::os::unix::fs::MetadataExt;
        file.metadata().map_or(0, |m| m.blksize()).max(128 << 10)
    };
    let mut buffer = vec![0u8; block as usize];
    let mut total = 0u64;
    loop {
        let n = file
            .read(&mut buffer)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    (started.elapsed().as_secs_f64(), total)
}

/// Shell-quotes a path.
pub fn quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', "'\\''"))
}
