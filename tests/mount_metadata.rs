//! Metadata cannot be changed: `touch` (utimensat), `chmod` and `chown` fail with
//! EROFS on every kind of node and change nothing, while truncating a control file
//! to 0 (`echo N > fork` opens with O_TRUNC) keeps working.

mod common;

use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::{Mount, StoreCopy, demo_copy};

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_encoded_bytes()).expect("path")
}

/// The errno of a libc call's -1 return, or 0 when it succeeded.
fn errno_of(result: libc::c_int) -> i32 {
    if result == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
    }
}

/// `touch` as coreutils does it: utimensat with both times set to now.
fn touch(path: &Path, flags: libc::c_int) -> i32 {
    let now = [libc::timespec {
        tv_sec: 0,
        tv_nsec: libc::UTIME_NOW,
    }; 2];
    // SAFETY: a valid path and two timespecs.
    errno_of(unsafe { libc::utimensat(libc::AT_FDCWD, c_path(path).as_ptr(), now.as_ptr(), flags) })
}

/// `touch -d 2001-09-09`: an explicit time.
fn set_time(path: &Path) -> i32 {
    let then = [libc::timespec {
        tv_sec: 1_000_000_000,
        tv_nsec: 0,
    }; 2];
    // SAFETY: as in `touch`.
    errno_of(unsafe { libc::utimensat(libc::AT_FDCWD, c_path(path).as_ptr(), then.as_ptr(), 0) })
}

#[test]
fn times_modes_and_owners_are_refused_with_erofs_and_truncating_a_control_file_works() {
    let StoreCopy {
        dir: _store_dir,
        path: store,
    } = demo_copy();
    let mount = Mount::new(&store, &[]);
    let root = mount.path();
    let session = root.join("ledger-chat");
    let nodes = [
        root.to_path_buf(),
        root.join("flush"),
        session.clone(),
        session.join("events"),
        session.join("events/00000000-turn.start.json"),
        session.join("header.json"),
        session.join("transcript.md"),
        session.join("index.jsonl"),
        session.join("fork"),
        session.join("flush"),
        session.join("children"),
        root.join("release-notes-alt/parent"),
    ];
    for node in &nodes {
        let before = std::fs::symlink_metadata(node).expect("stat");
        let no_follow = libc::AT_SYMLINK_NOFOLLOW;
        assert_eq!(
            touch(node, no_follow),
            libc::EROFS,
            "touch {}",
            node.display()
        );
        if !before.file_type().is_symlink() {
            assert_eq!(touch(node, 0), libc::EROFS, "touch {}", node.display());
            assert_eq!(set_time(node), libc::EROFS, "touch -d {}", node.display());
            // SAFETY: a valid path.
            let chmod = unsafe { libc::chmod(c_path(node).as_ptr(), 0o600) };
            assert_eq!(errno_of(chmod), libc::EROFS, "chmod {}", node.display());
        }
        // SAFETY: a valid path.
        let chown = unsafe { libc::lchown(c_path(node).as_ptr(), 65534, 65534) };
        assert_eq!(errno_of(chown), libc::EROFS, "chown {}", node.display());
        let after = std::fs::symlink_metadata(node).expect("stat");
        assert_eq!(
            (before.mtime(), before.mode(), before.uid()),
            (after.mtime(), after.mode(), after.uid()),
            "{} changed",
            node.display()
        );
    }

    // Truncation to 0 of a control file: by truncate(2) and by an O_TRUNC open, which
    // is what `echo N > fork` does; then the fork command itself.
    let fork = session.join("fork");
    std::fs::File::options()
        .write(true)
        .open(&fork)
        .expect("open fork")
        .set_len(0)
        .expect("ftruncate fork to 0");
    // SAFETY: a valid path.
    assert_eq!(
        errno_of(unsafe { libc::truncate(c_path(&fork).as_ptr(), 0) }),
        0
    );
    // SAFETY: a valid path.
    let grow = unsafe { libc::truncate(c_path(&fork).as_ptr(), 10) };
    assert_eq!(errno_of(grow), libc::EROFS, "a control file cannot grow");
    std::fs::write(&fork, "321 metadata-child\n").expect("echo 321 > fork");
    std::fs::write(root.join("flush"), "\n").expect("echo > flush");
    assert!(session.join("children/metadata-child").exists());
    // SAFETY: a valid path.
    let generated = unsafe { libc::truncate(c_path(&session.join("index.jsonl")).as_ptr(), 0) };
    assert_eq!(
        errno_of(generated),
        libc::EROFS,
        "a generated file cannot be truncated"
    );
}
