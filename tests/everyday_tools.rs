//! The commands README's "Using sessionfs with everyday tools" gives, run on mounts
//! of the demo store. The `parent` and `children/` symlinks make loops for tools
//! that follow links (`diff -r`, `grep -R`, `find -L`), so each command here is
//! the form that does not, and each must succeed without a warning.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{Mount, StoreCopy, TempDir, demo_copy};

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"))
}

/// Runs a command that must exit 0 without a word on stderr; returns its stdout.
fn quietly(program: &str, args: &[&str]) -> String {
    let output = run(program, args);
    assert!(
        output.status.success() && output.stderr.is_empty(),
        "{program} {args:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

fn text(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

/// `diff -r --no-dereference` of a copy against the mount. The control files and
/// `status` are left out: they hold the mount's live status, not session data.
fn assert_same_tree(mount: &Path, copy: &Path) {
    quietly(
        "diff",
        &[
            "-r",
            "--no-dereference",
            "-x",
            "fork",
            "-x",
            "flush",
            "-x",
            "status",
            text(mount),
            text(copy),
        ],
    );
}

#[test]
fn the_documented_commands_work_on_a_mount() {
    let StoreCopy {
        dir: _store_dir,
        path: store,
    } = demo_copy();
    // No grace: the demo's crashed session shows its closers from the start,
    // not halfway through the copies (the copy of the store is new).
    let first = Mount::new(&store, &["-r", "-o", "grace=0"]);
    let second = Mount::new(&store, &["-r", "-o", "grace=0"]);
    let (a, b) = (first.path(), second.path());

    // diff: following the links finds loops and exits 2; --no-dereference compares
    // them as links, and two mounts of one store are equal.
    let followed = run("diff", &["-r", text(a), text(b)]);
    assert_eq!(
        followed.status.code(),
        Some(2),
        "plain diff -r: {followed:?}"
    );
    quietly("diff", &["-r", "--no-dereference", text(a), text(b)]);

    // grep -r does not follow the links: each file is searched once.
    let hits = quietly("grep", &["-rl", "terraform", text(a)]);
    let transcripts: Vec<&str> = hits
        .lines()
        .filter(|line| line.ends_with("/transcript.md"))
        .collect();
    assert!(!transcripts.is_empty(), "grep -rl terraform: {hits}");
    assert!(
        transcripts.iter().all(|t| !t.contains("/children/")),
        "grep -r went through children/: {transcripts:?}"
    );

    // find without -L lists every node once, the links as links.
    let listed = quietly("find", &[text(a)]);
    let links = quietly("find", &[text(a), "-type", "l"]);
    assert!(
        links
            .lines()
            .any(|l| l.ends_with("/release-notes-alt/parent"))
    );
    assert!(
        !listed.contains("/children/release-notes-alt/"),
        "find followed a link"
    );
    let looped = run("find", &["-L", text(a)]);
    assert!(!looped.status.success(), "find -L: {looped:?}");

    // Copies keep the links as links and hold the same bytes.
    let copies = TempDir::new("tools-copies");
    let rsynced = copies.path().join("rsync");
    quietly("rsync", &["-a", &format!("{}/", text(a)), text(&rsynced)]);
    assert_same_tree(a, &rsynced);

    let copied = copies.path().join("cp");
    quietly("cp", &["-r", text(a), text(&copied)]);
    assert_same_tree(a, &copied);

    let archive = copies.path().join("sessions.tar");
    quietly("tar", &["-cf", text(&archive), "-C", text(a), "."]);
    let unpacked = copies.path().join("tar");
    std::fs::create_dir(&unpacked).expect("mkdir");
    quietly("tar", &["-xf", text(&archive), "-C", text(&unpacked)]);
    assert_same_tree(a, &unpacked);
}
