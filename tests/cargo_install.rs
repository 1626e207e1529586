//! README's install steps: `cargo install --locked --path . --root DIR` puts
//! `sessionfs` in `DIR/bin`, the man page installed beside it is found by `man`,
//! and `mount -t fuse.sessionfs` mounts with that binary.
//!
//! `mount` clears PATH before it runs `mount.fuse3`, whose shell then looks in its
//! default path; so `DIR/bin` is bind-mounted on /usr/local/bin in a private mount
//! namespace, as `cargo install --root /usr/local` would place it. The build
//! shares this build's target directory and runs offline, so it takes seconds when
//! the release build is current.

mod common;
mod namespace;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{TempDir, binary, copy_tree, demo_store, quote};
use namespace::describe;

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The target directory this test binary was built in (`target/release/deps/..`).
fn target_dir() -> PathBuf {
    binary()
        .parent()
        .and_then(Path::parent)
        .expect("target directory")
        .to_path_buf()
}

#[test]
fn cargo_install_puts_a_binary_that_mount_t_fuse_sessionfs_runs() {
    let root = TempDir::new("cargo-install");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["install", "--locked", "--offline", "--quiet", "--path"])
        .arg(manifest_dir())
        .arg("--root")
        .arg(root.path())
        .env("CARGO_TARGET_DIR", target_dir())
        .stdin(Stdio::null())
        .output()
        .expect("cargo install");
    assert!(
        output.status.success(),
        "cargo install: {}",
        describe(&output)
    );
    let installed = root.path().join("bin/sessionfs");
    let version = Command::new(&installed)
        .arg("--version")
        .output()
        .expect("run");
    assert_eq!(
        String::from_utf8_lossy(&version.stdout),
        format!("sessionfs {}\n", env!("CARGO_PKG_VERSION"))
    );

    // man finds a page installed beside DIR/bin, as it does for /usr/local.
    let man_dir = root.path().join("share/man/man1");
    std::fs::create_dir_all(&man_dir).expect("mkdir");
    std::fs::copy(
        manifest_dir().join("man/sessionfs.1"),
        man_dir.join("sessionfs.1"),
    )
    .expect("install the man page");
    let path = format!("{}:/usr/bin:/bin", root.path().join("bin").display());
    let found = Command::new("man")
        .args(["-w", "sessionfs"])
        .env("PATH", &path)
        .env_remove("MANPATH")
        .output();
    match found {
        Ok(found) => assert_eq!(
            String::from_utf8_lossy(&found.stdout).trim(),
            man_dir.join("sessionfs.1").display().to_string(),
            "man -w sessionfs: {}",
            describe(&found)
        ),
        Err(e) => println!("skipped the man page check: man cannot run ({e})"),
    }

    if let Some(why) = namespace::unavailable(&["mount.fuse3"]) {
        println!("skipped the mount check: {why}");
        return;
    }
    let work = TempDir::new("cargo-install-mount");
    let store = work.path().join("store");
    copy_tree(&demo_store(), &store);
    let mountpoint = work.path().join("mnt");
    std::fs::create_dir(&mountpoint).expect("mkdir");
    let mnt = quote(&mountpoint);
    let output = namespace::run(&format!(
        "trap 'umount -l {mnt} 2>/dev/null || true' EXIT
         mount --bind {bin} /usr/local/bin
         mount -t fuse.sessionfs -o noauto,nofail,_netdev {store} {mnt}
         grep ' {mnt_raw} ' /proc/self/mountinfo
         cat {mnt}/ledger-chat/header.json >/dev/null && echo read-header
         umount {mnt}",
        bin = quote(&root.path().join("bin")),
        store = quote(&store),
        mnt_raw = mountpoint.display(),
    ));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", describe(&output));
    assert!(
        stdout.contains(" - fuse.sessionfs "),
        "{}",
        describe(&output)
    );
    assert!(stdout.contains("read-header"), "{}", describe(&output));
}
