//! Servers the remote-store tests need, on 127.0.0.1 only: an `sshd` with a
//! throwaway host key, user key and config of its own, and `sshfs` mounts
//! through it; `rclone serve sftp` and an `rclone mount` of it. Each is a
//! guard: dropped, it unmounts or stops what it started, even when the test
//! fails.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{TempDir, is_mounted};

/// True when the tools these tests drive are installed (`.ci/run` installs
/// them; a machine without them says so rather than failing obscurely).
pub fn have_ssh_tools() -> bool {
    ["/usr/sbin/sshd", "/usr/bin/sshfs", "/usr/bin/ssh-keygen"]
        .iter()
        .all(|tool| Path::new(tool).exists())
}

/// A free port of 127.0.0.1, released just before a server binds it.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Waits until something listens on `port`, or fails with `log`'s text.
fn await_listening(port: u16, what: &str, log: &Path) {
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what} did not listen on {port}: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Unmounts `point`, retrying while it is busy, lazily at last.
fn unmount(point: &Path) {
    for _ in 0..50 {
        if !is_mounted(point) {
            return;
        }
        let _ = Command::new("umount").arg(point).status();
        if is_mounted(point) {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let _ = Command::new("umount").arg("-l").arg(point).status();
}

/// An `sshd` serving SFTP on a free port of 127.0.0.1 to root, by key only.
pub struct Sshd {
    dir: TempDir,
    port: u16,
    child: Child,
}

fn keygen(path: &Path) {
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .status()
        .expect("ssh-keygen");
    assert!(status.success(), "ssh-keygen {}", path.display());
}

impl Sshd {
    pub fn start() -> Sshd {
        assert!(
            have_ssh_tools(),
            "openssh-server and sshfs are needed (.ci/run installs them)"
        );
        let dir = TempDir::new("sshd");
        let host_key = dir.path().join("host_key");
        let user_key = dir.path().join("user_key");
        keygen(&host_key);
        keygen(&user_key);
        let authorized = dir.path().join("authorized_keys");
        std::fs::copy(user_key.with_extension("pub"), &authorized).expect("authorized_keys");
        let port = free_port();
        let config = dir.path().join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "ListenAddress 127.0.0.1\nPort {port}\nHostKey {}\nAuthorizedKeysFile {}\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
                 PermitRootLogin prohibit-password\nStrictModes no\nPidFile {}\n\
                 Subsystem sftp internal-sftp\n",
                host_key.display(),
                authorized.display(),
                dir.path().join("sshd.pid").display(),
            ),
        )
        .expect("sshd_config");
        // sshd insists on its privilege separation directory.
        let _ = std::fs::create_dir_all("/run/sshd");
        let child = Command::new("/usr/sbin/sshd")
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("sshd.log")).expect("log"))
            .spawn()
            .expect("sshd");
        await_listening(port, "sshd", &dir.path().join("sshd.log"));
        Sshd { dir, port, child }
    }

    /// Mounts `remote` (a directory on this host, reached through sshd) at a
    /// new mount point.
    pub fn sshfs(&self, remote: &Path) -> Sshfs {
        let point = TempDir::new("sshfs");
        let status = Command::new("sshfs")
            .arg(format!("root@127.0.0.1:{}", remote.display()))
            .arg(point.path())
            .args(["-p", &self.port.to_string()])
            .arg("-o")
            .arg(format!(
                "IdentityFile={},StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,\
                 BatchMode=yes,LogLevel=ERROR,cache=no",
                self.dir.path().join("user_key").display()
            ))
            .stdin(Stdio::null())
            .status()
            .expect("sshfs");
        assert!(status.success(), "sshfs of {} failed", remote.display());
        assert!(is_mounted(point.path()), "sshfs did not mount");
        Sshfs { point }
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An sshfs mount; unmounted when dropped.
pub struct Sshfs {
    point: TempDir,
}

impl Sshfs {
    pub fn path(&self) -> &Path {
        self.point.path()
    }

    /// A path inside the mount.
    pub fn join(&self, rest: impl AsRef<Path>) -> PathBuf {
        self.point.path().join(rest)
    }
}

impl Drop for Sshfs {
    fn drop(&mut self) {
        unmount(self.point.path());
    }
}

/// True when rclone is installed (`.ci/run` installs it).
pub fn have_rclone() -> bool {
    Command::new("rclone")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The flags that make a store behind `rclone mount` live for sessionfs:
/// directory listings and attributes kept at most a second (the defaults keep
/// listings for five minutes). The VFS cache stays off (the default): with
/// `--vfs-cache-mode writes` rclone uploads a closed file later, so a fork
/// child would not be on the remote when `flush` returns.
pub const RCLONE_LIVE_FLAGS: [&str; 6] = [
    "--dir-cache-time",
    "1s",
    "--attr-timeout",
    "1s",
    "--vfs-cache-mode",
    "off",
];

/// `rclone serve sftp` of a directory on a free port of 127.0.0.1, with a
/// throwaway password, host key, config and cache of its own.
pub struct RcloneSftp {
    dir: TempDir,
    port: u16,
    child: Child,
}

impl RcloneSftp {
    pub fn serve(root: &Path) -> RcloneSftp {
        assert!(have_rclone(), "rclone is needed (.ci/run installs it)");
        let dir = TempDir::new("rclone");
        let port = free_port();
        let log = dir.path().join("serve.log");
        let child = Command::new("rclone")
            .args(["serve", "sftp"])
            .arg(root)
            .args(["--addr", &format!("127.0.0.1:{port}")])
            .args(["--user", "sessionfs", "--pass", "loopback-only"])
            // The server's own view of the directory is cached like a mount's
            // (listings for 5 minutes by default); a far side that is a
            // plain SSH server has no such cache.
            .args(["--dir-cache-time", "1s"])
            .envs(rclone_env(dir.path()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("rclone serve sftp");
        await_listening(port, "rclone serve sftp", &log);
        RcloneSftp { dir, port, child }
    }

    /// `rclone mount` of the served directory at a new mount point, with
    /// [`RCLONE_LIVE_FLAGS`] and `extra`.
    pub fn mount(&self, extra: &[&str]) -> RcloneMount {
        let point = TempDir::new("rclone-mount");
        let obscured = Command::new("rclone")
            .args(["obscure", "loopback-only"])
            .envs(rclone_env(self.dir.path()))
            .output()
            .expect("rclone obscure");
        let pass = String::from_utf8(obscured.stdout).expect("utf-8");
        let remote = format!(
            ":sftp,host=127.0.0.1,port={},user=sessionfs,pass={}:",
            self.port,
            pass.trim()
        );
        let child = Command::new("rclone")
            .arg("mount")
            .arg(remote)
            .arg(point.path())
            .args(RCLONE_LIVE_FLAGS)
            .args(extra)
            .args(["--cache-dir"])
            .arg(self.dir.path().join("vfs"))
            .envs(rclone_env(self.dir.path()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.path().join("mount.log")).expect("log"))
            .spawn()
            .expect("rclone mount");
        let mut mounted = RcloneMount { point, child };
        let started = Instant::now();
        while !is_mounted(mounted.point.path()) {
            if let Ok(Some(status)) = mounted.child.try_wait() {
                panic!(
                    "rclone mount exited ({status}): {}",
                    std::fs::read_to_string(self.dir.path().join("mount.log")).unwrap_or_default()
                );
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "rclone mount did not mount"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        mounted
    }
}

/// rclone's config and caches kept in `dir`, never in the user's home.
fn rclone_env(dir: &Path) -> [(&'static str, PathBuf); 3] {
    [
        ("RCLONE_CONFIG", dir.join("rclone.conf")),
        ("XDG_CACHE_HOME", dir.join("cache")),
        ("XDG_CONFIG_HOME", dir.join("config")),
    ]
}

impl Drop for RcloneSftp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An `rclone mount`; unmounted and its process ended when dropped.
pub struct RcloneMount {
    point: TempDir,
    child: Child,
}

impl RcloneMount {
    pub fn path(&self) -> &Path {
        self.point.path()
    }
}

impl Drop for RcloneMount {
    fn drop(&mut self) {
        unmount(self.point.path());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
