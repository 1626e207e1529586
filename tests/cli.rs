//! The command line as users and scripts meet it: help and version, usage
//! errors (exit 2), mount failures (exit 1), daemon mode that returns only once
//! the mount is live, and clean unmounts on `umount`, SIGTERM, SIGINT and SIGHUP.
//!
//! These tests mount for real (root and /dev/fuse). Every mount is undone by a
//! guard, even when an assertion fails, and no sessionfs process is left behind.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{Mount, StoreCopy, TempDir, binary, demo_copy, demo_store};

fn is_mounted(path: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let target = path.to_string_lossy();
    mounts
        .lines()
        .any(|line| line.split(' ').nth(1) == Some(&*target))
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Unmounts `path` if it is mounted: `umount`, or a lazy detach when busy.
fn unmount(path: &Path) {
    if !is_mounted(path) {
        return;
    }
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::umount(c_path.as_ptr()) } != 0 {
        // SAFETY: as above.
        unsafe { libc::umount2(c_path.as_ptr(), libc::MNT_DETACH) };
    }
}

/// The pids of live (not zombie) processes whose command line has `arg` as one
/// argument, like `pgrep -f` on a unique mount path.
fn processes_with_arg(arg: &Path) -> Vec<i32> {
    let wanted = arg.as_os_str().as_encoded_bytes();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if !cmdline.split(|b| *b == 0).any(|a| a == wanted) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // The state follows the parenthesised command name.
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next());
        if !matches!(state, None | Some('Z') | Some('X')) {
            pids.push(pid);
        }
    }
    pids
}

/// The output of one run that was not expected to stay in the background.
struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs sessionfs with its output in files (so a daemon that wrongly stays
/// alive cannot block the test on a pipe), with a timeout. If the run mounted
/// `cleanup` against expectations, the guard still undoes it.
fn run(args: &[&std::ffi::OsStr], cleanup: Option<&Path>) -> Run {
    let out = TempDir::new("cli-out");
    let stdout_path = out.path().join("stdout");
    let stderr_path = out.path().join("stderr");
    let mut child = Command::new(binary())
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).expect("stdout file"))
        .stderr(std::fs::File::create(&stderr_path).expect("stderr file"))
        .spawn()
        .expect("spawn sessionfs");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            if let Some(path) = cleanup {
                stop_daemon(path);
            }
            panic!("sessionfs {args:?} did not exit within 30 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if let Some(path) = cleanup {
        stop_daemon(path);
    }
    Run {
        status,
        stdout: std::fs::read_to_string(&stdout_path).expect("stdout"),
        stderr: std::fs::read_to_string(&stderr_path).expect("stderr"),
    }
}

fn os(text: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(text)
}

/// Unmounts a daemon-mode mount and makes sure its process is gone.
fn stop_daemon(mountpoint: &Path) {
    unmount(mountpoint);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_with_arg(mountpoint).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for pid in processes_with_arg(mountpoint) {
        // SAFETY: plain kill(2) of a process this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    unmount(mountpoint);
}

/// Stops a daemon-mode mount when dropped, even if the test failed.
struct DaemonGuard {
    mountpoint: PathBuf,
}

impl Drop for DaemonGuard {
    fn drop(&mut self) {
        stop_daemon(&self.mountpoint);
    }
}

fn assert_usage_error(args: &[&str]) {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| os(a)).collect();
    let run = run(&args, None);
    assert_eq!(
        run.status.code(),
        Some(2),
        "{args:?}: expected exit 2, stderr: {}",
        run.stderr
    );
    assert!(
        run.stdout.is_empty(),
        "{args:?}: usage errors print nothing on stdout: {:?}",
        run.stdout
    );
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert!(
        !lines.is_empty() && lines.len() <= 2,
        "{args:?}: expected a short message, got {:?}",
        run.stderr
    );
    assert!(
        lines[0].starts_with("sessionfs: "),
        "{args:?}: {:?}",
        run.stderr
    );
    assert!(
        run.stderr.contains("--help"),
        "{args:?}: the message should point to --help: {:?}",
        run.stderr
    );
}

#[test]
fn help_prints_usage_on_stdout_and_exits_0() {
    for flag in ["--help", "-h"] {
        let run = run(&[os(flag)], None);
        assert_eq!(run.status.code(), Some(0), "{flag}");
        assert!(
            run.stdout
                .starts_with("Usage: sessionfs [OPTIONS] STORE MOUNTPOINT\n"),
            "{flag}: {}",
            run.stdout
        );
        for option in [
            "--foreground",
            "--debug",
            "--read-only",
            "--allow-other",
            "--grace",
            "-o OPT",
            "--version",
        ] {
            assert!(
                run.stdout.contains(option),
                "{flag}: usage does not mention {option}"
            );
        }
        assert!(run.stderr.is_empty(), "{flag}: {}", run.stderr);
    }
}

#[test]
fn version_prints_name_and_version() {
    for flag in ["-V", "--version"] {
        let run = run(&[os(flag)], None);
        assert_eq!(run.status.code(), Some(0), "{flag}");
        assert_eq!(
            run.stdout,
            format!("sessionfs {}\n", env!("CARGO_PKG_VERSION"))
        );
        assert!(run.stderr.is_empty(), "{flag}: {}", run.stderr);
    }
}

#[test]
fn usage_errors_exit_2_with_a_short_message() {
    assert_usage_error(&[]);
    assert_usage_error(&["/only/a/store"]);
    assert_usage_error(&["--bogus", "/s", "/m"]);
    assert_usage_error(&["-x", "/s", "/m"]);
    assert_usage_error(&["-o", "bogus", "/s", "/m"]);
    assert_usage_error(&["-o", "ro,no_such_option", "/s", "/m"]);
    assert_usage_error(&["-o", "uid=abc", "/s", "/m"]);
    assert_usage_error(&["--grace", "soon", "/s", "/m"]);
    assert_usage_error(&["/s", "/m", "/extra"]);
    assert_usage_error(&["-o"]);
}

#[test]
fn no_arguments_says_what_is_missing() {
    let run = run(&[], None);
    assert_eq!(run.status.code(), Some(2));
    assert!(
        run.stderr
            .starts_with("sessionfs: missing STORE or MOUNTPOINT\n"),
        "{:?}",
        run.stderr
    );
}

#[test]
fn a_missing_mountpoint_exits_1_with_a_clear_message() {
    let dir = TempDir::new("cli-nomnt");
    let missing = dir.path().join("no-such-dir");
    let run = run(
        &[demo_store().as_os_str(), missing.as_os_str()],
        Some(&missing),
    );
    assert_eq!(run.status.code(), Some(1), "stderr: {}", run.stderr);
    assert!(
        run.stderr.starts_with("sessionfs: mount point "),
        "{:?}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&*missing.to_string_lossy()),
        "the message names the path: {:?}",
        run.stderr
    );
    assert!(
        run.stderr.contains("No such file or directory"),
        "{:?}",
        run.stderr
    );
    assert!(run.stdout.is_empty());
}

#[test]
fn a_mountpoint_that_is_a_file_exits_1() {
    let dir = TempDir::new("cli-filemnt");
    let file = dir.path().join("file");
    std::fs::write(&file, "not a directory\n").expect("write");
    let run = run(&[demo_store().as_os_str(), file.as_os_str()], Some(&file));
    assert_eq!(run.status.code(), Some(1), "stderr: {}", run.stderr);
    assert!(
        run.stderr.contains("is not a directory"),
        "{:?}",
        run.stderr
    );
}

#[test]
fn a_store_that_is_not_a_harness_store_exits_1() {
    let dir = TempDir::new("cli-badstore");
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "just some text, not a session database\n").expect("write");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    let run = run(&[text.as_os_str(), mnt.as_os_str()], Some(&mnt));
    assert_eq!(run.status.code(), Some(1), "stderr: {}", run.stderr);
    assert!(run.stderr.starts_with("sessionfs: "), "{:?}", run.stderr);
    assert!(
        run.stderr.contains(&*text.to_string_lossy()),
        "the message names the store: {:?}",
        run.stderr
    );
    assert!(!is_mounted(&mnt));

    let missing = dir.path().join("no-such-store");
    let run = self::run(&[missing.as_os_str(), mnt.as_os_str()], Some(&mnt));
    assert_eq!(run.status.code(), Some(1), "stderr: {}", run.stderr);
    assert!(run.stderr.contains("cannot open store"), "{:?}", run.stderr);
    assert!(!is_mounted(&mnt));
}

#[test]
fn daemon_mode_returns_once_mounted_and_exits_after_umount() {
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is required: this test mounts for real"
    );
    let StoreCopy {
        dir: _store_dir,
        path: store,
    } = demo_copy();
    let mnt_dir = TempDir::new("cli-daemon");
    let mnt = mnt_dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    let guard = DaemonGuard {
        mountpoint: mnt.clone(),
    };

    let log = mnt_dir.path().join("stderr");
    let daemon_log = mnt_dir.path().join("daemon.log");
    let mut child = Command::new(binary())
        .arg("--log-file")
        .arg(&daemon_log)
        .env("RUST_LOG", "info")
        .arg(&store)
        .arg(&mnt)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("spawn sessionfs");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sessionfs did not return within 30 s in daemon mode");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "daemon mode failed: {stderr}");
    // No polling: exit 0 must mean the mount is already live.
    assert!(
        is_mounted(&mnt),
        "sessionfs exited 0 before the mount was live"
    );
    let daemons = processes_with_arg(&mnt);
    assert_eq!(
        daemons.len(),
        1,
        "expected one daemon serving {}, found {daemons:?}",
        mnt.display()
    );
    assert!(
        !daemons.contains(&(child.id() as i32)),
        "the process that returned cannot be the daemon"
    );
    let names: Vec<String> = std::fs::read_dir(&mnt)
        .expect("list the mount")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().any(|n| n == "ledger-chat"),
        "the demo store is served: {names:?}"
    );

    unmount(&mnt);
    assert!(!is_mounted(&mnt), "umount left the mount in place");
    wait_until(
        "the daemon to exit after umount",
        Duration::from_secs(10),
        || processes_with_arg(&mnt).is_empty(),
    );
    // The detached daemon logged to --log-file, not to the terminal it left.
    let logged = std::fs::read_to_string(&daemon_log).expect("--log-file was written");
    assert!(
        logged.contains("mounted at") && logged.contains("unmounted"),
        "{logged}"
    );
    drop(guard);
}

/// `sessionfs -f`, then `signal`: the mount goes away and the exit status is 0.
fn foreground_signal_unmounts(signal: i32) {
    let StoreCopy {
        dir: _store_dir,
        path: store,
    } = demo_copy();
    let mount = Mount::new(&store, &[]);
    let path = mount.path().to_path_buf();
    assert!(std::fs::read_dir(&path).expect("list the mount").count() > 1);
    let pid = i32::try_from(mount.pid()).expect("pid");
    // SAFETY: plain kill(2) of the child this test spawned.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    wait_until(
        "the mount to go away after the signal",
        Duration::from_secs(10),
        || !is_mounted(&path),
    );
    let status = mount.unmount();
    assert_eq!(
        status.code(),
        Some(0),
        "signal {signal}: sessionfs -f exited with {status}"
    );
    assert!(!is_mounted(&path));
}

#[test]
fn foreground_sigterm_unmounts_and_exits_0() {
    foreground_signal_unmounts(libc::SIGTERM);
}

#[test]
fn foreground_sigint_unmounts_and_exits_0() {
    foreground_signal_unmounts(libc::SIGINT);
}

#[test]
fn foreground_sighup_unmounts_and_exits_0() {
    foreground_signal_unmounts(libc::SIGHUP);
}

#[test]
fn foreground_umount_ends_the_process_with_0() {
    let StoreCopy {
        dir: _store_dir,
        path: store,
    } = demo_copy();
    let mount = Mount::new(&store, &["-o", "grace=0"]);
    assert!(mount.path().join("ledger-chat/transcript.md").is_file());
    // Mount::unmount runs umount(2) and waits for the process.
    let status = mount.unmount();
    assert_eq!(
        status.code(),
        Some(0),
        "sessionfs -f exited with {status} after umount"
    );
}
