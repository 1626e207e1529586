//! The mount says what it is, as sshfs's does: type `fuse.sessionfs` and the store's
//! canonical path as the source in the mount table (`-o fsname=` overrides it), so
//! `findmnt -t fuse.sessionfs`, `mount` and `df` list it.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Mount, StoreCopy, binary, demo_copy};

/// Undoes the `\NNN` escapes of /proc/self/mountinfo.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let code = bytes
            .get(i + 1..i + 4)
            .and_then(|digits| std::str::from_utf8(digits).ok())
            .and_then(|digits| u8::from_str_radix(digits, 8).ok());
        if bytes[i] == b'\\'
            && let Some(code) = code
        {
            out.push(code);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).expect("UTF-8 mount table")
}

/// The file system type and source the mount table gives `target`.
fn mount_entry(target: &Path) -> Option<(String, String)> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    table.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let separator = fields.iter().position(|f| *f == "-")?;
        (unescape(fields[4]) == target.to_string_lossy()).then(|| {
            (
                fields[separator + 1].to_string(),
                unescape(fields[separator + 2]),
            )
        })
    })
}

fn run(command: &mut Command) -> String {
    let output = command.stdin(Stdio::null()).output().expect("run");
    assert!(output.status.success(), "{command:?}: {output:?}");
    String::from_utf8(output.stdout).expect("UTF-8")
}

#[test]
fn the_mount_shows_type_fuse_sessionfs_and_the_canonical_store() {
    let StoreCopy { dir, path: store } = demo_copy();
    // A path that is neither canonical nor free of a symlink.
    std::os::unix::fs::symlink(&store, dir.path().join("link")).expect("symlink");
    std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
    let winding = dir.path().join("sub/../link");
    let mount = Mount::new(&winding, &[]);
    let canonical = store.canonicalize().expect("canonical");
    assert_eq!(
        mount_entry(mount.path()),
        Some(("fuse.sessionfs".into(), canonical.display().to_string()))
    );

    let listed = run(Command::new("findmnt").args([
        "-n",
        "-l",
        "-t",
        "fuse.sessionfs",
        "-o",
        "TARGET,SOURCE",
    ]));
    assert!(
        listed
            .lines()
            .any(|line| line.split_whitespace().collect::<Vec<_>>()
                == [
                    &*mount.path().to_string_lossy(),
                    &*canonical.to_string_lossy()
                ]),
        "findmnt -t fuse.sessionfs: {listed}"
    );
    let mounts = run(&mut Command::new("mount"));
    let expected = format!(
        "{} on {} type fuse.sessionfs (",
        canonical.display(),
        mount.path().display()
    );
    assert!(mounts.contains(&expected), "mount: {mounts}");
    // Plain `df` leaves out file systems without blocks; this one reports the store's.
    let df = run(Command::new("df").args(["-P", "-t", "fuse.sessionfs"]));
    assert!(
        df.lines()
            .any(|line| line.starts_with(&*canonical.to_string_lossy())
                && line.ends_with(&*mount.path().to_string_lossy())),
        "df: {df}"
    );
}

#[test]
fn fsname_overrides_the_source() {
    let StoreCopy {
        dir: _dir,
        path: store,
    } = demo_copy();
    let mount = Mount::new(&store, &["-o", "fsname=my-sessions"]);
    assert_eq!(
        mount_entry(mount.path()),
        Some(("fuse.sessionfs".into(), "my-sessions".into()))
    );
}

#[test]
fn a_relative_store_is_shown_by_its_absolute_path() {
    let StoreCopy { dir, path: store } = demo_copy();
    let mountpoint = dir.path().join("mnt");
    std::fs::create_dir(&mountpoint).expect("mkdir");
    // Daemon mode from the store's directory: the parent returns once mounted.
    let status = Command::new(binary())
        .current_dir(dir.path())
        .args(["store", "mnt"])
        .stdin(Stdio::null())
        .status()
        .expect("sessionfs");
    let entry = mount_entry(&mountpoint);
    let unmounted = Command::new("umount").arg(&mountpoint).status();
    assert!(status.success(), "sessionfs store mnt: {status}");
    assert!(unmounted.is_ok_and(|s| s.success()), "umount");
    assert_eq!(
        entry,
        Some((
            "fuse.sessionfs".into(),
            store
                .canonicalize()
                .expect("canonical")
                .display()
                .to_string()
        ))
    );
    // The daemon exits after the unmount.
    let deadline = Instant::now() + Duration::from_secs(10);
    while mount_entry(&mountpoint).is_some() {
        assert!(Instant::now() < deadline, "still mounted");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_store_path_with_a_comma_and_a_space_is_shown_as_it_is() {
    let copy = demo_copy();
    let store = copy.dir.path().join("a,b store");
    std::fs::rename(&copy.path, &store).expect("rename the store");
    let mount = Mount::new(&store, &[]);
    assert_eq!(
        mount_entry(mount.path()),
        Some(("fuse.sessionfs".into(), store.display().to_string()))
    );
}
