//! Servers the remote-store tests need, on 127.0.0.1 only: an `sshd` with a
//! throwaway host key, user key and config of its own, and `sshfs` mounts
//! through it. Each is a guard: dropped, it unmounts or stops what it started,
//! even when the test fails.

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
        // A free port, released just before sshd binds it.
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
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
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "sshd did not listen on {port}: {}",
                std::fs::read_to_string(dir.path().join("sshd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
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
        let point = self.point.path();
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
}
