//! sessionfs as an installed tool is used: the fstab line of README and the man
//! page through `mount` and fuse3's `mount.fuse3`, the systemd user unit's
//! ExecStart line, a non-root user mounting through `fusermount3`, and the error a
//! user gets when `/dev/fuse` cannot be opened.
//!
//! `mount` clears PATH before it runs `mount.fuse3`, which finds `sessionfs` in the
//! shell's default PATH (/usr/local/bin, /usr/bin, ...); the fstab test bind-mounts
//! the built binary's directory on /usr/local/bin in a private mount namespace. The
//! non-root tests bind-mount a device node of their own on /dev/fuse the same way,
//! so the real device keeps its mode. Where that cannot be done, they skip and
//! say why.

mod common;
mod namespace;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{TempDir, binary, copy_tree, demo_store, quote};
use namespace::describe;

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A home directory holding the demo store at `~/.dsh/sessions`, the path README's
/// fstab line and the systemd unit use.
fn home_with_store(label: &str) -> (TempDir, PathBuf) {
    let home = TempDir::new(label);
    let store = home.path().join(".dsh/sessions");
    copy_tree(&demo_store(), &store);
    (home, store)
}

fn is_mounted(target: &Path) -> bool {
    let table = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let target = target.to_string_lossy();
    table
        .lines()
        .any(|line| line.split(' ').nth(4) == Some(&*target))
}

/// The one line of `text` shaped like an fstab entry of type fuse.sessionfs.
fn fstab_line(text: &str, source: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.len() == 6 && fields[2] == "fuse.sessionfs"
        })
        .collect();
    assert_eq!(lines.len(), 1, "one fstab line in {source}: {lines:?}");
    lines[0].to_string()
}

#[test]
fn the_documented_fstab_line_mounts_through_mount_fuse3() {
    if let Some(why) = namespace::unavailable(&["mount.fuse3"]) {
        println!("skipped: {why}");
        return;
    }
    let readme = std::fs::read_to_string(manifest_dir().join("README.md")).expect("README");
    let line = fstab_line(&readme, "README.md");
    let manual = std::fs::read_to_string(manifest_dir().join("man/sessionfs.1")).expect("man");
    assert_eq!(fstab_line(&manual, "man/sessionfs.1"), line);

    let (home, store) = home_with_store("fstab");
    let mountpoint = home.path().join("sessions");
    std::fs::create_dir(&mountpoint).expect("mkdir");
    let fstab = home.path().join("fstab");
    let entry = line.replace("/home/USER", &home.path().display().to_string());
    std::fs::write(&fstab, format!("{entry}\n")).expect("fstab");

    let bin = binary().parent().expect("bin dir").to_path_buf();
    let mnt = quote(&mountpoint);
    let output = namespace::run(&format!(
        "trap 'umount -l {mnt} 2>/dev/null || true' EXIT
         mount --bind {bin} /usr/local/bin
         mount -T {fstab} {mnt}
         grep ' {mnt_raw} ' /proc/self/mountinfo
         ls {mnt}
         if echo > {mnt}/flush 2>/dev/null; then echo flush-accepted; fi
         umount {mnt}
         grep -q ' {mnt_raw} ' /proc/self/mountinfo || echo unmounted",
        bin = quote(&bin),
        fstab = quote(&fstab),
        mnt_raw = mountpoint.display(),
    ));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", describe(&output));
    let canonical = store.canonicalize().expect("canonical");
    assert!(
        stdout.contains(&format!("- fuse.sessionfs {} ", canonical.display())),
        "type and source: {}",
        describe(&output)
    );
    assert!(stdout.lines().any(|l| l == "ledger-chat"), "{stdout}");
    // The line mounts read-only: control files refuse writes.
    assert!(!stdout.contains("flush-accepted"), "{stdout}");
    assert!(stdout.contains("unmounted"), "{stdout}");
}

/// The value of `key=` in the unit's [Service] section, with %h expanded.
fn unit_line(unit: &str, key: &str, home: &Path) -> String {
    let prefix = format!("{key}=");
    let lines: Vec<&str> = unit
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .collect();
    assert_eq!(lines.len(), 1, "one {key} line: {lines:?}");
    lines[0].replace("%h", &home.display().to_string())
}

/// Starts a unit's command line as systemd would (no shell).
fn start(command: &str) -> Child {
    let words: Vec<&str> = command.split_whitespace().collect();
    Command::new(words[0])
        .args(&words[1..])
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{command}: {e}"))
}

/// The unit's service process; Drop unmounts and reaps it whatever the test did.
struct Service {
    child: Child,
    mountpoint: PathBuf,
}

impl Service {
    fn wait_mounted(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !is_mounted(&self.mountpoint) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("ExecStart exited before mounting: {status}");
            }
            assert!(Instant::now() < deadline, "ExecStart did not mount in 20 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the service did not exit in 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if is_mounted(&self.mountpoint) {
            let path = std::ffi::CString::new(self.mountpoint.as_os_str().as_encoded_bytes())
                .expect("path");
            // SAFETY: a valid NUL-terminated path.
            unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_systemd_units_exec_start_mounts_and_sigterm_unmounts_cleanly() {
    let unit = std::fs::read_to_string(manifest_dir().join("examples/sessionfs.service"))
        .expect("unit file");
    let (home, store) = home_with_store("unit");
    // The unit runs ~/.cargo/bin/sessionfs, where `cargo install` puts it.
    std::fs::create_dir_all(home.path().join(".cargo/bin")).expect("mkdir");
    std::os::unix::fs::symlink(binary(), home.path().join(".cargo/bin/sessionfs"))
        .expect("symlink");

    let pre = unit_line(&unit, "ExecStartPre", home.path());
    assert!(start(&pre).wait().expect("ExecStartPre").success(), "{pre}");
    let exec_start = unit_line(&unit, "ExecStart", home.path());
    assert!(
        exec_start.split_whitespace().any(|w| w == "-f"),
        "Type=simple needs sessionfs in the foreground: {exec_start}"
    );
    let mountpoint = PathBuf::from(exec_start.split_whitespace().last().expect("mount point"));
    let mut service = Service {
        child: start(&exec_start),
        mountpoint: mountpoint.clone(),
    };
    service.wait_mounted();
    assert!(mountpoint.join("ledger-chat/transcript.md").is_file());

    // `systemctl stop` sends SIGTERM: a fork still in its write-behind window is
    // made durable, then the mount goes and the process exits 0.
    std::fs::write(mountpoint.join("ledger-chat/fork"), "321 unit-child\n").expect("fork");
    service.signal(libc::SIGTERM);
    let status = service.wait_exit();
    assert!(status.success(), "after SIGTERM: {status}");
    assert!(!is_mounted(&mountpoint), "still mounted after SIGTERM");
    let child = store.join("--Users-mei-code-ledger-api--/unit-child");
    assert!(child.is_dir(), "the fork was not written at SIGTERM");

    // After a crash the mount point is stale; ExecStopPost clears it so that a
    // restart can mount again.
    let mut crashed = Service {
        child: start(&exec_start),
        mountpoint: mountpoint.clone(),
    };
    crashed.wait_mounted();
    crashed.signal(libc::SIGKILL);
    crashed.wait_exit();
    assert!(
        is_mounted(&mountpoint),
        "a killed sessionfs leaves its mount"
    );
    let post = unit_line(&unit, "ExecStopPost", home.path());
    // A leading '-' tells systemd to ignore the command's failure.
    let post = post.strip_prefix('-').unwrap_or(&post);
    if namespace::unavailable(&["fusermount3"]).is_none() {
        assert!(
            start(post).wait().expect("ExecStopPost").success(),
            "{post}"
        );
        assert!(
            !is_mounted(&mountpoint),
            "ExecStopPost left the stale mount"
        );
        let mut restarted = Service {
            child: start(&exec_start),
            mountpoint,
        };
        restarted.wait_mounted();
        restarted.signal(libc::SIGTERM);
        assert!(restarted.wait_exit().success());
    } else {
        println!("skipped the ExecStopPost check: fusermount3 is not installed");
    }
}

/// A directory the unprivileged user owns, holding a home with the demo store at
/// `~/.dsh/sessions` and the mount point `~/sessions`, the binary and a device node
/// for /dev/fuse.
struct UserSetup {
    dir: TempDir,
    uid: u32,
    gid: u32,
}

impl UserSetup {
    fn new(label: &str, uid: u32, gid: u32) -> UserSetup {
        let dir = TempDir::new(label);
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        copy_tree(&demo_store(), &dir.path().join("home/.dsh/sessions"));
        std::fs::create_dir(dir.path().join("home/sessions")).expect("mkdir");
        std::fs::copy(binary(), dir.path().join("sessionfs")).expect("copy binary");
        let chown = Command::new("chown")
            .args(["-R", &format!("{uid}:{gid}")])
            .arg(dir.path())
            .status()
            .expect("chown");
        assert!(chown.success());
        UserSetup { dir, uid, gid }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn home(&self) -> PathBuf {
        self.path("home")
    }

    fn store(&self) -> PathBuf {
        self.path("home/.dsh/sessions")
    }

    fn mountpoint(&self) -> PathBuf {
        self.path("home/sessions")
    }

    /// A /dev/fuse node (character device 10:229) owned by `owner` with `mode`.
    fn device(&self, owner: u32, mode: u32) -> Result<PathBuf, String> {
        let node = self.path("fuse");
        let path = std::ffi::CString::new(node.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: a valid path; makedev builds the device number.
        let made =
            unsafe { libc::mknod(path.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(10, 229)) };
        if made != 0 {
            return Err(format!(
                "cannot make a FUSE device node in {}: {}",
                self.dir.path().display(),
                std::io::Error::last_os_error()
            ));
        }
        std::os::unix::fs::chown(&node, Some(owner), Some(0)).expect("chown node");
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(mode)).expect("chmod");
        Ok(node)
    }

    /// `command` run as the user, quoted for the namespace script.
    fn as_user(&self, command: &str) -> String {
        format!(
            "setpriv --reuid={} --regid={} --clear-groups -- sh -euc {}",
            self.uid,
            self.gid,
            quote(Path::new(command))
        )
    }
}

/// A setup for `nobody` with a /dev/fuse node, owned by nobody or by root; `None`,
/// having said why, where this machine cannot make one or lacks `tools`.
fn nobody_setup(
    label: &str,
    tools: &[&str],
    nobody_owns_device: bool,
) -> Option<(UserSetup, PathBuf)> {
    if let Some(why) = namespace::unavailable(tools) {
        println!("skipped: {why}");
        return None;
    }
    let Some((uid, gid)) = namespace::nobody() else {
        println!("skipped: there is no user `nobody` to mount as");
        return None;
    };
    let setup = UserSetup::new(label, uid, gid);
    match setup.device(if nobody_owns_device { uid } else { 0 }, 0o600) {
        Ok(node) => Some((setup, node)),
        Err(why) => {
            println!("skipped: {why}");
            None
        }
    }
}

/// How `nobody` mounts the demo store in `user_mounts_and_unmounts`.
struct UserMount {
    /// Root's bind mounts in the namespace, beside /dev/fuse.
    binds: String,
    mount: String,
    /// The user's steps while mounted, after `ls` of the mount point.
    while_mounted: String,
    unmount: String,
}

/// `nobody` mounts the demo store by `steps` in a private mount namespace whose
/// /dev/fuse is a node nobody owns: the mount must be nobody's, list the
/// sessions, and be gone after the unmount. Returns what the steps printed, or
/// `None`, having said why, where this machine cannot do it.
fn user_mounts_and_unmounts(
    label: &str,
    tools: &[&str],
    steps: impl FnOnce(&UserSetup) -> UserMount,
) -> Option<String> {
    let (setup, node) = nobody_setup(label, tools, true)?;
    let UserMount {
        binds,
        mount,
        while_mounted,
        unmount,
    } = steps(&setup);
    let mnt = quote(&setup.mountpoint());
    let user_steps = format!(
        "if ! : <> /dev/fuse; then echo cannot-open-dev-fuse; exit 0; fi
         {mount}
         grep ' {mnt_raw} ' /proc/self/mountinfo
         ls {mnt}
         {while_mounted}
         {unmount}
         grep -q ' {mnt_raw} ' /proc/self/mountinfo || echo unmounted",
        mnt_raw = setup.mountpoint().display(),
    );
    let output = namespace::run(&format!(
        "trap 'umount -l {mnt} 2>/dev/null || true' EXIT
         mount --bind {node} /dev/fuse
         {binds}
         {steps}",
        node = quote(&node),
        steps = setup.as_user(&user_steps),
    ));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if stdout.contains("cannot-open-dev-fuse") {
        println!(
            "skipped: uid {} cannot open a FUSE device node it owns here (a device cgroup?)",
            setup.uid
        );
        return None;
    }
    assert!(output.status.success(), "{}", describe(&output));
    let mount_line = stdout
        .lines()
        .find(|l| l.contains(" - fuse.sessionfs "))
        .unwrap_or_else(|| panic!("no fuse.sessionfs mount: {}", describe(&output)));
    assert!(
        mount_line.contains(&format!("user_id={}", setup.uid)),
        "{mount_line}"
    );
    assert!(stdout.lines().any(|l| l == "ledger-chat"), "{stdout}");
    assert!(stdout.contains("unmounted"), "{stdout}");
    Some(stdout)
}

#[test]
fn a_user_mounts_forks_flushes_and_unmounts_through_fusermount3() {
    let Some(stdout) = user_mounts_and_unmounts("nonroot", &["fusermount3"], |setup| {
        let (mnt, store) = (quote(&setup.mountpoint()), quote(&setup.store()));
        UserMount {
            binds: String::new(),
            mount: format!("{} {store} {mnt}", quote(&setup.path("sessionfs"))),
            while_mounted: format!(
                "echo '321 user-child' > {mnt}/ledger-chat/fork
                 echo > {mnt}/flush
                 ls {store}/--Users-mei-code-ledger-api--"
            ),
            unmount: format!("fusermount3 -u {mnt}"),
        }
    }) else {
        return;
    };
    assert!(
        stdout.lines().any(|l| l == "user-child"),
        "the flushed fork: {stdout}"
    );
}

#[test]
fn a_device_the_user_cannot_open_is_named_with_its_mode_and_the_user() {
    let Some((setup, node)) = nobody_setup("nodevice", &[], false) else {
        return;
    };
    let output = namespace::run(&format!(
        "mount --bind {node} /dev/fuse
         {steps}",
        node = quote(&node),
        steps = setup.as_user(&format!(
            "{} {} {}",
            quote(&setup.path("sessionfs")),
            quote(&setup.store()),
            quote(&setup.mountpoint())
        )),
    ));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    for expected in [
        "cannot open /dev/fuse",
        "crw------- root:root",
        &format!("you are nobody (uid {}, gid {})", setup.uid, setup.gid),
        "chmod 0666 /dev/fuse",
    ] {
        assert!(stderr.contains(expected), "{expected:?} in {stderr}");
    }
    assert!(!stderr.contains("module"), "{stderr}");
}

#[test]
fn a_user_mounts_and_unmounts_the_documented_fstab_line() {
    let readme = std::fs::read_to_string(manifest_dir().join("README.md")).expect("README");
    let line = fstab_line(&readme, "README.md");
    user_mounts_and_unmounts("user-fstab", &["mount.fuse3", "fusermount3"], |setup| {
        let fstab = setup.path("fstab");
        let entry = line.replace("/home/USER", &setup.home().display().to_string());
        std::fs::write(&fstab, format!("{entry}\n")).expect("fstab");
        let mnt = quote(&setup.mountpoint());
        UserMount {
            // This namespace's /etc/fstab is the test's; `mount` (set-user-ID root) reads it.
            binds: format!(
                "mount --bind {} /usr/local/bin
                 mount --bind {} /etc/fstab",
                quote(binary().parent().expect("bin dir")),
                quote(&fstab)
            ),
            mount: format!("mount {mnt}"),
            while_mounted: String::new(),
            unmount: format!("umount {mnt}"),
        }
    });
}
