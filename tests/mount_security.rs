//! Issue #8, names: hostile session ids stay one path segment inside
//! the mount, symlinks in the store are never followed out of it, and names
//! longer than a directory entry can hold are refused with ENAMETOOLONG.
//! Permissions (modes, `allow_other`, private forks) are in mount_permissions.rs.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use common::{Mount, TempDir, read_json, session_dir, snapshot, store_copy};
use serde_json::{Value, json};
use sessionfs::fs::mount_name;
use sessionfs::model::ids::{encode_segment, project_dir};

/// Five valid events: one completed turn with a user message.
fn turn_events(text: &str) -> Vec<Value> {
    vec![
        json!({"type": "turn/start", "seq": 0, "time": 10, "data": {"turn": 1}}),
        json!({"type": "step/start", "seq": 1, "time": 11, "data": {"turn": 1, "step": 1}}),
        json!({"type": "user/message", "seq": 2, "time": 12, "data": {"content": [{"type": "text", "text": text}], "source": {"kind": "user"}, "role": "user", "id": "u-1"}, "surfaceOp": "append"}),
        json!({"type": "step/end", "seq": 3, "time": 13, "data": {"turn": 1, "step": 1}}),
        json!({"type": "turn/end", "seq": 4, "time": 14, "data": {"turn": 1, "reason": {"kind": "completed"}}}),
    ]
}

/// The bytes of a raw session log: a header line naming `id`, then five events.
fn session_log(id: &str, cwd: Option<&str>) -> Vec<u8> {
    let mut header =
        json!({"type": "session", "version": 0, "id": id, "createdAt": 1, "delegationDepth": 0});
    if let Some(cwd) = cwd {
        header["cwd"] = cwd.into();
    }
    let mut out = serde_json::to_vec(&header).expect("json");
    out.push(b'\n');
    for event in turn_events("hello") {
        out.extend(serde_json::to_vec(&event).expect("json"));
        out.push(b'\n');
    }
    out
}

/// Writes a session where the Harness would: `<root>/<project>/<encoded id>/session.jsonl`.
fn write_session(root: &Path, id: &str, cwd: Option<&str>) -> std::io::Result<PathBuf> {
    let dir = root
        .join(project_dir(cwd))
        .join(encode_segment(id).expect("non-empty id"));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("session.jsonl");
    std::fs::write(&path, session_log(id, cwd))?;
    Ok(path)
}

/// The mount root's sessions (its own entries left out): name and whether it is a directory.
fn root_entries(mount: &Path) -> Vec<(Vec<u8>, bool)> {
    std::fs::read_dir(mount)
        .expect("list the root")
        .map(|e| {
            let e = e.expect("entry");
            (
                e.file_name().as_bytes().to_vec(),
                e.file_type().expect("type").is_dir(),
            )
        })
        .filter(|(n, _)| {
            !common::ROOT_OWN
                .iter()
                .any(|own| own.as_bytes() == n.as_slice())
        })
        .collect()
}

fn errno_of(result: std::io::Result<impl Sized>) -> Option<i32> {
    result.err().and_then(|e| e.raw_os_error())
}

/// Ids a hostile or careless client could give a session.
fn hostile_ids() -> Vec<String> {
    let mut ids: Vec<String> = [
        "a/b",
        "/",
        "../escape",
        "../../../../etc/passwd",
        "..",
        ".",
        "...",
        ".hidden",
        "a\u{0}b",
        "\u{0}",
        "line\nbreak",
        "carriage\rreturn",
        "tab\there",
        "ctl\u{1}\u{1b}[31m\u{1f}\u{7f}",
        "~",
        "~~",
        "~007E",
        "a~002Fb",
        "a%2Fb",
        "a\\b",
        " ",
        "a b",
        "-rf",
        "*",
        "?[]",
        "$(id)",
        "😀🦀",
        "\u{10FFFF}",
        "\u{202E}txt.exe",
        "\u{FEFF}bom",
        "caf\u{e9}",
        "cafe\u{301}",
        "A",
        "a",
        "\u{FF0F}fullwidth-slash",
        "\u{2215}division-slash",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // As long as a name can be on Linux: 255 plain bytes, and 51 escaped units (255 bytes).
    ids.push("x".repeat(255));
    ids.push("\u{e9}".repeat(51));
    ids.push("😀".repeat(25));
    ids
}

#[test]
fn hostile_session_ids_are_one_segment_each() {
    let store = TempDir::new("names");
    let root = store.path().join("store");
    std::fs::create_dir(&root).expect("root");
    let ids = hostile_ids();
    let cwds = [
        None,
        Some("/../../etc"),
        Some("/tmp/a b/~x\n"),
        Some("/home/ana/😀"),
    ];
    let mut written = BTreeMap::new();
    for (i, id) in ids.iter().enumerate() {
        let cwd = cwds[i % cwds.len()];
        write_session(&root, id, cwd).unwrap_or_else(|e| panic!("writing {id:?}: {e}"));
        written.insert(mount_name(id), id.clone());
    }
    assert_eq!(
        written.len(),
        ids.len(),
        "the naming is injective: two ids never share a name"
    );
    let outside_before: BTreeSet<PathBuf> = std::fs::read_dir(std::env::temp_dir())
        .expect("tmp")
        .map(|e| e.expect("e").path())
        .collect();

    let mount = Mount::new(&root, &["-o", "grace=0"]);
    let entries = root_entries(mount.path());
    let names: Vec<String> = entries
        .iter()
        .map(|(n, _)| String::from_utf8(n.clone()).expect("names are UTF-8"))
        .collect();
    let unique: BTreeSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "no name is listed twice");
    assert_eq!(
        unique,
        written.keys().collect::<BTreeSet<_>>(),
        "exactly the written sessions, under their readable names"
    );
    let longest = names.iter().map(String::len).max().unwrap_or(0);
    eprintln!(
        "names: {} hostile ids listed as {} single segments; longest name {longest} bytes",
        ids.len(),
        names.len()
    );
    for (name, is_dir) in &entries {
        let name = String::from_utf8(name.clone()).expect("utf-8");
        assert!(*is_dir, "{name:?} is a directory");
        assert!(
            !name.contains('/') && !name.contains('\0') && name != "." && name != "..",
            "{name:?} is one path segment"
        );
        assert!(name.len() <= 255, "{name:?} fits NAME_MAX");
    }

    let mount_root = mount.path().canonicalize().expect("canonical mount");
    for (name, id) in &written {
        let dir = mount.path().join(name);
        let header = read_json(&dir.join("header.json"));
        assert_eq!(
            header["id"].as_str(),
            Some(id.as_str()),
            "header.json of {name} round-trips the id"
        );
        // The directory and its `..` resolve inside / to the mount.
        let canonical = dir.canonicalize().expect("canonical");
        assert_eq!(
            canonical.parent(),
            Some(mount_root.as_path()),
            "{name} is directly inside the mount"
        );
        assert_eq!(
            dir.join("..").canonicalize().expect(".."),
            mount_root,
            "{name}/.. is the mount root"
        );
        assert_eq!(
            dir.join("events")
                .join("..")
                .join("..")
                .canonicalize()
                .expect("../.."),
            mount_root
        );
        let surface = std::fs::read_to_string(dir.join("surface.jsonl")).expect("surface");
        assert!(surface.contains("hello"), "{name} is readable");
        // An escaped id is never a path to the session by its raw spelling.
        if name != id {
            let raw = mount.path().join(id.replace('\0', ""));
            assert_ne!(
                raw.canonicalize().ok(),
                Some(canonical.clone()),
                "the raw id {id:?} does not name the session"
            );
        }
        // The name from before readable names (the on-disk escape) still
        // leads to the session, unless another session shows under it.
        let old = encode_segment(id).expect("old name");
        if old.len() <= 255 && !written.contains_key(&old) {
            let header = read_json(&mount.path().join(&old).join("header.json"));
            assert_eq!(header["id"].as_str(), Some(id.as_str()), "old name {old}");
        }
    }
    // Names that are not valid encodings, and non-UTF-8 names, name nothing.
    for bogus in [
        "~zzzz", "~002e", "~0041", "a  b", "~D83D", "%2F", "~", "flush~",
    ] {
        assert_eq!(
            errno_of(std::fs::metadata(mount.path().join(bogus))),
            Some(libc::ENOENT),
            "{bogus:?}"
        );
    }
    let non_utf8 = mount.path().join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
    assert_eq!(
        errno_of(std::fs::metadata(&non_utf8)),
        Some(libc::ENOENT),
        "a non-UTF-8 name"
    );
    // Nothing appeared next to the mount or the store.
    let outside_after: BTreeSet<PathBuf> = std::fs::read_dir(std::env::temp_dir())
        .expect("tmp")
        .map(|e| e.expect("e").path())
        .collect();
    let escaped: Vec<&PathBuf> = outside_after
        .difference(&outside_before)
        .filter(|p| {
            p.to_string_lossy().contains("escape") || p.to_string_lossy().contains("passwd")
        })
        .collect();
    assert!(escaped.is_empty(), "{escaped:?}");

    // Forks named with hostile ids land as escaped segments in the store's project directory.
    let parent = mount.path().join(mount_name("a/b"));
    let parent_project = root.join(project_dir(None));
    let mut made = Vec::new();
    for child in [
        "../fork-escape",
        "x/../../y",
        "..fork",
        "fork\ttab",
        "fork\u{0}nul",
        "~fork",
    ] {
        std::fs::write(parent.join("fork"), format!("4 {child}\n"))
            .unwrap_or_else(|e| panic!("fork {child:?}: {e}"));
        let name = encode_segment(child).expect("name");
        let header = read_json(&mount.path().join(mount_name(child)).join("header.json"));
        assert_eq!(
            header["id"].as_str(),
            Some(child),
            "the child {child:?} is listed as {name}"
        );
        made.push(name);
    }
    std::fs::write(mount.path().join("flush"), b"\n").expect("flush");
    for name in &made {
        let dir = parent_project.join(name);
        assert!(
            dir.is_dir()
                && std::fs::symlink_metadata(&dir)
                    .expect("meta")
                    .file_type()
                    .is_dir(),
            "{name} is a directory inside the store's project"
        );
    }
    assert!(
        !root.parent().expect("temp").join("fork-escape").exists()
            && !store.path().join("y").exists(),
        "no fork wrote outside the store"
    );
    drop(mount);

    // A fresh mount reads the children back under the same names.
    let fresh = Mount::new(&root, &["-o", "grace=0"]);
    for name in &made {
        assert!(
            fresh.path().join(name).join("header.json").exists(),
            "{name} after a remount"
        );
    }
}

#[test]
fn a_lone_surrogate_id_and_its_escaped_twin() {
    // JS strings may hold a lone surrogate; the Harness escapes it as ~D800. JSON
    // readers that insist on Unicode cannot parse such a header.
    let store = TempDir::new("surrogate");
    let root = store.path().join("store");
    let dir = root.join("_no-cwd").join("~D800");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let mut log =
        br#"{"type":"session","version":0,"id":"\ud800","createdAt":1,"delegationDepth":0}"#
            .to_vec();
    log.push(b'\n');
    for event in turn_events("lone") {
        log.extend(serde_json::to_vec(&event).expect("json"));
        log.push(b'\n');
    }
    std::fs::write(dir.join("session.jsonl"), &log).expect("write");
    write_session(&root, "plain-neighbour", None).expect("neighbour");
    let mount = Mount::new(&root, &["-o", "grace=0"]);
    let entries = root_entries(mount.path());
    let names: Vec<String> = entries
        .iter()
        .map(|(n, _)| String::from_utf8_lossy(n).into_owned())
        .collect();
    eprintln!("lone surrogate: the store directory ~D800 is listed as {names:?}");
    assert_eq!(names.len(), 2, "one entry per session");
    let shown = names
        .iter()
        .find(|n| *n != "plain-neighbour")
        .expect("the surrogate session is listed");
    let error = std::fs::read_to_string(mount.path().join(shown).join("error"));
    eprintln!("lone surrogate: {shown}/error: {error:?}");
    assert!(
        error.is_ok(),
        "the session is shown as unreadable, with a reason"
    );
    assert!(
        std::fs::read_to_string(mount.path().join("plain-neighbour").join("surface.jsonl")).is_ok()
    );
}

#[test]
fn an_unreadable_session_never_collides_with_a_valid_one() {
    let store = TempDir::new("twin");
    let root = store.path().join("store");
    let dir = root.join("_no-cwd").join("~D800");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("session.jsonl"), b"{\"type\":\"session\",\"version\":0,\"id\":\"\\ud800\",\"createdAt\":1,\"delegationDepth\":0}\n").expect("write");
    write_session(&root, "~D800", None).expect("the twin");
    let mount = Mount::new(&root, &["-o", "grace=0"]);
    let names: Vec<String> = root_entries(mount.path())
        .into_iter()
        .map(|(n, _)| String::from_utf8_lossy(&n).into_owned())
        .collect();
    let twin = mount.path().join(mount_name("~D800"));
    let surface = std::fs::read_to_string(twin.join("surface.jsonl"));
    let error = std::fs::read_to_string(twin.join("error")).unwrap_or_default();
    eprintln!(
        "lone surrogate beside its escaped twin: the root lists {names:?}; the twin's surface.jsonl: {:?}; error: {error:?}",
        surface.as_ref().map(|s| s.len()).map_err(|e| e.to_string())
    );
    assert_eq!(names.len(), 2, "two sessions, two entries");
    assert!(
        surface.is_ok(),
        "the valid session with id \"~D800\" stays readable"
    );
}

#[test]
fn a_session_named_flush_is_reachable() {
    let store = TempDir::new("flushid");
    let root = store.path().join("store");
    write_session(&root, "flush", None).expect("write");
    write_session(&root, "other", None).expect("write");
    let mount = Mount::new(&root, &["-o", "grace=0"]);
    let all: Vec<(String, bool)> = std::fs::read_dir(mount.path())
        .expect("root")
        .map(|e| {
            let e = e.expect("entry");
            (
                e.file_name().into_string().expect("utf-8"),
                e.file_type().expect("type").is_dir(),
            )
        })
        .collect();
    // The root control file keeps its name; the session is shown as ~0066lush,
    // an escape that no id encodes to.
    assert_eq!(
        all.iter().filter(|(n, _)| n == "flush").count(),
        1,
        "{all:?}"
    );
    assert!(all.contains(&("flush".to_string(), false)), "{all:?}");
    assert!(all.contains(&("~0066lush".to_string(), true)), "{all:?}");
    let header: Value = serde_json::from_str(
        &std::fs::read_to_string(mount.path().join("~0066lush").join("header.json"))
            .expect("the session named flush can be read"),
    )
    .expect("json");
    assert_eq!(header["id"], "flush");
    // A fork named "flush" is refused: that id is taken.
    let err =
        std::fs::write(mount.path().join("other").join("fork"), b"4 flush\n").expect_err("taken");
    assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
}

/// A store with one healthy session and symlinks that point out of it.
#[test]
fn symlinks_in_the_store_are_not_followed_out_of_it() {
    let store = TempDir::new("links");
    let outside = TempDir::new("outside");
    let root = store.path().join("store");
    write_session(&root, "inside", None).expect("inside");
    let secret = outside.path().join("passwd");
    std::fs::write(&secret, "root:x:0:0:secret-marker-4c1d:/root:/bin/sh\n").expect("secret");
    // A whole project directory that lives outside (the session in it is valid there).
    write_session(outside.path(), "via-project-link", Some("/outside")).expect("outside project");
    std::os::unix::fs::symlink(
        outside.path().join(project_dir(Some("/outside"))),
        root.join(project_dir(Some("/outside"))),
    )
    .expect("link");
    // A session directory that lives outside.
    let elsewhere = outside.path().join("session-dir");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    std::fs::write(
        elsewhere.join("session.jsonl"),
        session_log("via-dir-link", None),
    )
    .expect("write");
    std::os::unix::fs::symlink(&elsewhere, root.join("_no-cwd").join("via-dir-link"))
        .expect("link");
    // Session logs that are symlinks: to a passwd-like file, and to a valid log.
    for (id, target) in [
        ("via-passwd-link", secret.clone()),
        ("via-log-link", outside.path().join("valid.jsonl")),
    ] {
        let dir = root.join("_no-cwd").join(id);
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::write(
            outside.path().join("valid.jsonl"),
            session_log("via-log-link", None),
        )
        .expect("write");
        std::os::unix::fs::symlink(&target, dir.join("session.jsonl")).expect("link");
    }
    let zdir = root.join("_no-cwd").join("via-zstd-link");
    std::fs::create_dir(&zdir).expect("mkdir");
    std::os::unix::fs::symlink(&secret, zdir.join("session.jsonl.zstd")).expect("link");
    // The obsolete flat layout, as a symlink.
    std::os::unix::fs::symlink(&secret, root.join("_no-cwd").join("flat-link.jsonl"))
        .expect("link");
    let before = snapshot(outside.path());

    let mount = Mount::new(&root, &["-o", "grace=0"]);
    let names: BTreeSet<String> = root_entries(mount.path())
        .into_iter()
        .map(|(n, _)| String::from_utf8(n).expect("utf-8"))
        .collect();
    eprintln!("symlinks: the root lists {names:?}");
    assert_eq!(
        names,
        BTreeSet::from(["inside".to_string()]),
        "no session reached through a symlink is listed"
    );
    for id in [
        "via-project-link",
        "via-dir-link",
        "via-passwd-link",
        "via-log-link",
        "via-zstd-link",
        "flat-link",
    ] {
        assert_eq!(
            errno_of(std::fs::metadata(mount.path().join(id))),
            Some(libc::ENOENT),
            "{id} is not in the mount"
        );
    }
    // No byte of the secret is readable anywhere in the mount.
    let mut stack = vec![mount.path().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("readdir") {
            let entry = entry.expect("entry");
            let kind = entry.file_type().expect("type");
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() && entry.file_name() != "fork" && entry.file_name() != "flush"
            {
                let text = std::fs::read_to_string(entry.path()).expect("read");
                assert!(
                    !text.contains("secret-marker-4c1d"),
                    "{} shows the outside file",
                    entry.path().display()
                );
            }
        }
    }
    drop(mount);
    assert_eq!(
        before,
        snapshot(outside.path()),
        "nothing outside the store changed"
    );
}

#[test]
fn a_fork_never_writes_through_a_symlink_out_of_the_store() {
    let store = TempDir::new("forklink");
    let outside = TempDir::new("forkout");
    let root = store.path().join("store");
    write_session(&root, "parent", None).expect("parent");
    let target = outside.path().join("captured");
    std::fs::create_dir(&target).expect("mkdir");
    std::os::unix::fs::symlink(&target, root.join("_no-cwd").join("evil-child")).expect("link");
    let mount = Mount::new(&root, &["-o", "grace=0,window=60000"]);
    let fork = std::fs::write(mount.path().join("parent").join("fork"), b"4 evil-child\n");
    let flush = std::fs::write(mount.path().join("flush"), b"\n");
    let status = std::fs::read_to_string(mount.path().join("flush")).unwrap_or_default();
    drop(mount);
    let written: Vec<String> = std::fs::read_dir(&target)
        .expect("target")
        .map(|e| e.expect("e").file_name().to_string_lossy().into_owned())
        .collect();
    eprintln!(
        "fork through a symlinked child directory: fork {fork:?}, flush {flush:?}; the outside directory now holds {written:?}"
    );
    eprintln!("flush status: {status}");
    assert!(
        written.is_empty(),
        "the fork wrote {written:?} into {}, outside the store",
        target.display()
    );
}

#[test]
fn long_names_beyond_name_max() {
    // JSONL: a directory name cannot exceed 255 bytes on Linux file systems, so a
    // session whose escaped id is longer cannot be stored at all, and a fork with
    // such a name is refused when it is made.
    let store = TempDir::new("long");
    let root = store.path().join("store");
    write_session(&root, "parent", None).expect("parent");
    let too_long = "\u{e9}".repeat(52);
    let err = write_session(&root, &too_long, None).expect_err("a 260-byte name");
    assert_eq!(err.raw_os_error(), Some(libc::ENAMETOOLONG));
    let mount = Mount::new(&root, &["-o", "grace=0,window=60000"]);
    let fork = std::fs::write(
        mount.path().join("parent").join("fork"),
        format!("4 {too_long}\n"),
    );
    assert_eq!(errno_of(fork), Some(libc::ENAMETOOLONG));
    let status = std::fs::read_to_string(mount.path().join("parent").join("fork")).expect("status");
    assert!(status.contains("more than 255 bytes"), "{status}");
    assert!(
        std::fs::read_to_string(mount.path().join("parent").join("surface.jsonl")).is_ok(),
        "the mount keeps serving"
    );
}

#[test]
fn a_fork_the_store_cannot_hold_is_refused_up_front() {
    let store = TempDir::new("longfork");
    let root = store.path().join("store");
    write_session(&root, "parent", None).expect("parent");
    let mount = Mount::new(&root, &["-o", "grace=0,window=60000"]);
    let fork = std::fs::write(
        mount.path().join("parent").join("fork"),
        format!("4 {}\n", "\u{e9}".repeat(52)),
    );
    eprintln!("a fork named with 260 escaped bytes on a JSONL store: {fork:?}");
    std::fs::write(
        mount.path().join("parent").join("fork"),
        b"4 ordinary-child\n",
    )
    .expect("an ordinary fork");
    let flush = std::fs::write(mount.path().join("flush"), b"\n");
    eprintln!("the next flush, for an ordinary child: {flush:?}");
    assert!(
        fork.is_err(),
        "the fork is refused when it is made, not at flush time"
    );
    assert!(flush.is_ok(), "an unrelated flush succeeds");
}

#[test]
fn long_names_in_sqlite() {
    // SQLite holds any id, but a name longer than NAME_MAX (255) cannot be
    // served to everyday tools: such a session is shown under a prefix of its id
    // and a digest, its header names the whole id, and forks with such names
    // are refused, as on every store.
    let copy = store_copy("sqlite17");
    let store = sessionfs::store::sqlite::SqliteStore::open(&copy.path).expect("open");
    let ids = ["\u{e9}".repeat(52), "x".repeat(300), "z".repeat(4200)];
    for id in &ids {
        let header = sessionfs::model::header::SessionHeader::new(id, 1);
        let event: serde_json::Map<String, Value> =
            serde_json::from_str(r#"{"type":"session/end-seed","seq":0,"time":1,"data":{}}"#)
                .expect("event");
        sessionfs::store::Writer::create(&store, &header, &[event]).expect("stored");
    }
    drop(store);
    let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
    let listing: Vec<String> = std::fs::read_dir(mount.path())
        .expect("the root lists")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    assert_eq!(
        listing.len(),
        18 + common::ROOT_OWN.len(),
        "15 sessions, the three long ones and the root's own entries"
    );
    assert!(listing.iter().all(|name| name.len() <= 255));
    for id in &ids {
        let name = mount_name(id);
        assert!(listing.contains(&name), "{name} is listed");
        let header = read_json(&mount.path().join(&name).join("header.json"));
        assert_eq!(header["id"].as_str(), Some(id.as_str()));
    }
    let parent = session_dir(mount.path(), "release-notes");
    assert!(
        std::fs::read_to_string(parent.join("header.json")).is_ok(),
        "other sessions stay readable"
    );
    let fork = std::fs::write(parent.join("fork"), format!("42 {}\n", "y".repeat(300)));
    assert_eq!(errno_of(fork), Some(libc::ENAMETOOLONG));
}
