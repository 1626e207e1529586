//! Mounted tests over every fixture store: each session's files must equal the
//! views the Harness's own code derived from the same log, the crash cases must
//! show exactly the Harness's recovery view or its refusal, the three encodings
//! must give identical trees, and reading everything must not change the store.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::views::check_views;
use common::{Mount, expected, read_json, session_dir, snapshot, store_copy};
use serde_json::Value;

/// Every expected clean session: (id, expected file).
fn clean_sessions() -> Vec<(String, Value)> {
    let manifest = expected("manifest.json");
    manifest["sessionFiles"]
        .as_object()
        .expect("sessionFiles")
        .iter()
        .map(|(id, file)| (id.clone(), expected(file.as_str().expect("file"))))
        .collect()
}

fn check_store(store: &str, skip: &[&str]) {
    let copy = store_copy(store);
    let before = snapshot(copy.dir.path());
    let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
    let mut failures = Vec::new();
    let sessions = clean_sessions();
    let mut listed: Vec<String> = std::fs::read_dir(mount.path())
        .expect("root")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf8"))
        .collect();
    listed.sort();
    let mut want: Vec<String> = sessions
        .iter()
        .map(|(id, _)| sessionfs::fs::mount_name(id))
        .collect();
    want.extend(common::ROOT_OWN.map(String::from));
    want.sort();
    assert_eq!(
        listed, want,
        "{store}: the root lists one directory per session"
    );
    for (id, exp) in &sessions {
        if skip.contains(&id.as_str()) {
            continue;
        }
        failures.extend(check_views(&session_dir(mount.path(), id), exp, &[]));
    }
    drop(mount);
    assert!(failures.is_empty(), "{store}:\n{}", failures.join("\n"));
    // The SQLite store legitimately gains -wal/-shm files; nothing else may change.
    let after: BTreeMap<_, _> = snapshot(copy.dir.path())
        .into_iter()
        .filter(|(p, _)| {
            !p.to_string_lossy().ends_with("-wal") && !p.to_string_lossy().ends_with("-shm")
        })
        .collect();
    assert_eq!(
        before, after,
        "{store}: reading every file changed the store"
    );
}

#[test]
fn jsonl_store_matches_the_harness_views() {
    check_store("jsonl", &[]);
}

#[test]
fn zstd_store_matches_the_harness_views() {
    check_store("jsonl-zstd", &[]);
}

#[test]
fn sqlite17_store_matches_the_harness_views() {
    check_store("sqlite17", &[]);
}

#[test]
fn sqlite14_store_matches_the_harness_views_and_refuses_what_it_lost() {
    check_store("sqlite14", &["metrics-ignorable"]);
    // Schema 14 dropped the ignorable marker on write, so the Harness refuses the
    // session; so must we, with its message, while the rest stays readable.
    let copy = store_copy("sqlite14");
    let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
    let dir = session_dir(mount.path(), "metrics-ignorable");
    let error = std::fs::read_to_string(dir.join("error")).expect("error file");
    let formats = expected("formats/sqlite14.json");
    let message = formats["sessions"]["metrics-ignorable"]["error"]["message"]
        .as_str()
        .expect("message");
    assert!(error.starts_with(message), "{error}");
    assert!(dir.join("header.json").exists());
    for derived in [
        "surface.jsonl",
        "transcript.md",
        "index.jsonl",
        "events",
        "steps",
    ] {
        let err = std::fs::metadata(dir.join(derived)).expect_err("derived views are absent");
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    }
}

/// The crash cases: the stored prefix plus exactly the Harness's closers, in files
/// marked synthetic, or the Harness's refusal in an `error` file.
fn check_crash_store(store: &str) {
    let copy = store_copy(&format!("crash/{store}"));
    let before = snapshot(copy.dir.path());
    let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
    let mut checked = 0;
    for entry in
        std::fs::read_dir(common::fixtures().join("expected/crash").join(store)).expect("cases")
    {
        let case = read_json(&entry.expect("entry").path());
        let id = case["case"]["id"].as_str().expect("id");
        let dir = session_dir(mount.path(), id);
        let inspect = &case["inspect"];
        if let Some(count) = inspect["eventCount"].as_u64() {
            let names = common::event_names(&dir);
            assert_eq!(names.len() as u64, count, "{store}/{id}: events shown");
            let synthetic = inspect["syntheticEvents"].as_array().expect("synthetic");
            let first = names.len() - synthetic.len();
            for (name, want) in names[first..].iter().zip(synthetic) {
                assert!(
                    name.ends_with(".synthetic.json"),
                    "{store}/{id}: {name} is not marked synthetic"
                );
                let got = read_json(&dir.join("events").join(name));
                assert_eq!(&got, want, "{store}/{id}: closer {name}");
                assert_eq!(
                    serde_json::to_string(&got).ok(),
                    serde_json::to_string(want).ok(),
                    "{store}/{id}: closer key order"
                );
            }
            assert!(
                names[..first].iter().all(|n| !n.contains("synthetic")),
                "{store}/{id}: logged events marked synthetic"
            );
            let index = std::fs::read_to_string(dir.join("index.jsonl")).expect("index");
            assert_eq!(
                index
                    .lines()
                    .filter(|l| l.contains("\"synthetic\":true"))
                    .count(),
                synthetic.len()
            );
            let transcript =
                std::fs::read_to_string(dir.join("transcript.md")).expect("transcript");
            // Closers may give way to logged events, and transcript.md only grows:
            // they show in events/ and index.jsonl, never in the transcript.
            for closer in synthetic {
                let seq = closer["seq"].as_u64().expect("seq");
                assert!(
                    !transcript.contains(&format!(" #{seq}] ")),
                    "{store}/{id}: transcript shows closer {seq}"
                );
            }
        } else {
            let want = inspect["error"]["message"].as_str().expect("error message");
            let want = want
                .split("(raw log: <store-root>")
                .next()
                .expect("prefix")
                .trim_end();
            let error = std::fs::read_to_string(dir.join("error"))
                .unwrap_or_else(|e| panic!("{store}/{id}: error file: {e}"));
            assert!(
                error.starts_with(want),
                "{store}/{id}: error is {error:?}, the Harness says {want:?}"
            );
            assert!(
                !dir.join("surface.jsonl").exists() && !dir.join("events").exists(),
                "{store}/{id}: no derived views"
            );
        }
        checked += 1;
    }
    drop(mount);
    assert!(checked >= 8, "{store}: only {checked} cases checked");
    let after: BTreeMap<_, _> = snapshot(copy.dir.path())
        .into_iter()
        .filter(|(p, _)| {
            !p.to_string_lossy().ends_with("-wal") && !p.to_string_lossy().ends_with("-shm")
        })
        .collect();
    assert_eq!(before, after, "{store}: the crash store was modified");
}

#[test]
fn jsonl_crash_cases_show_the_recovery_view() {
    check_crash_store("jsonl");
}

#[test]
fn zstd_crash_cases_show_the_recovery_view() {
    check_crash_store("jsonl-zstd");
}

#[test]
fn sqlite17_crash_cases_show_the_recovery_view() {
    check_crash_store("sqlite17");
}

#[test]
fn sqlite14_crash_cases_show_the_recovery_view() {
    check_crash_store("sqlite14");
}

/// Every regular file under a mounted tree with its bytes (symlinks by target).
fn tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("readdir") {
            let entry = entry.expect("entry");
            let path = entry.path();
            let kind = entry.file_type().expect("type");
            let rel = path
                .strip_prefix(root)
                .expect("prefix")
                .to_string_lossy()
                .into_owned();
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_symlink() {
                // `latest` goes by each store's own write times.
                if path.file_name().is_some_and(|n| n == "latest") {
                    continue;
                }
                out.insert(
                    rel,
                    std::fs::read_link(&path)
                        .expect("link")
                        .into_os_string()
                        .into_encoded_bytes(),
                );
            } else if !matches!(
                path.file_name().and_then(|n| n.to_str()),
                Some("fork" | "flush")
            ) && rel != "sessions.jsonl"
            {
                // sessions.jsonl names each store's own kind, log sizes and times.
                out.insert(rel, std::fs::read(&path).expect("read"));
            }
        }
    }
    out
}

#[test]
fn the_three_encodings_give_byte_identical_trees() {
    let stores = ["jsonl", "jsonl-zstd", "sqlite17", "sqlite14"];
    let copies: Vec<_> = stores.iter().map(|s| store_copy(s)).collect();
    let mounts: Vec<Mount> = copies
        .iter()
        .map(|c| Mount::new(&c.path, &["-o", "grace=0"]))
        .collect();
    let trees: Vec<_> = mounts.iter().map(|m| tree(m.path())).collect();
    for (store, other) in stores.iter().zip(&trees).skip(1) {
        let mut differing: Vec<&String> = trees[0]
            .keys()
            .filter(|k| other.get(*k) != trees[0].get(*k))
            .collect();
        // Schema 14 lost metrics-ignorable's markers; everything else must agree.
        if *store == "sqlite14" {
            differing.retain(|k| !k.starts_with("metrics-ignorable/"));
        }
        assert!(
            differing.is_empty(),
            "{store} differs from jsonl in {} files, e.g. {:?}",
            differing.len(),
            &differing[..differing.len().min(5)]
        );
    }
    assert!(
        trees[0].len() > 2500,
        "the comparison covered {} files",
        trees[0].len()
    );
}

#[test]
fn everyday_tools_agree_with_stat() {
    let copy = store_copy("jsonl-zstd");
    let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
    let out = common::TempDir::new("tools");
    let session = session_dir(mount.path(), "pipeline-compaction");

    // cp -r copies a session directory out; every file equals what cat reads.
    let status = std::process::Command::new("cp")
        .arg("-r")
        .arg(&session)
        .arg(out.path().join("copy"))
        .status()
        .expect("cp");
    assert!(status.success());
    let original = tree(&session);
    let copied = tree(&out.path().join("copy"));
    assert_eq!(original, copied, "cp -r reproduces the session directory");

    // tar sees the same sizes (it reads by stat size).
    let tarball = out.path().join("s.tar");
    let status = std::process::Command::new("tar")
        .arg("cf")
        .arg(&tarball)
        .arg("-C")
        .arg(mount.path())
        .arg("pipeline-compaction")
        .status()
        .expect("tar");
    assert!(status.success());
    let listing = std::process::Command::new("tar")
        .arg("tvf")
        .arg(&tarball)
        .output()
        .expect("tar tvf");
    let listing = String::from_utf8_lossy(&listing.stdout);
    let transcript_size = std::fs::metadata(session.join("transcript.md"))
        .expect("stat")
        .len();
    assert!(
        listing
            .lines()
            .any(|l| l.ends_with("pipeline-compaction/transcript.md")
                && l.contains(&format!(" {transcript_size} "))),
        "{listing}"
    );

    // ls -l lists every session; grep -rl finds text inside compressed logs.
    let ls = std::process::Command::new("ls")
        .arg("-l")
        .arg(mount.path())
        .output()
        .expect("ls");
    assert!(ls.status.success());
    assert_eq!(
        String::from_utf8_lossy(&ls.stdout)
            .lines()
            .filter(|l| l.starts_with('d'))
            .count(),
        15 + 2,
        "15 sessions, by-project and by-date"
    );
    let grep = std::process::Command::new("grep")
        .arg("-rl")
        .arg("watermark")
        .arg(mount.path())
        .output()
        .expect("grep");
    let hits = String::from_utf8_lossy(&grep.stdout);
    assert!(
        hits.lines()
            .any(|l| l.ends_with("pipeline-compaction/transcript.md")),
        "{hits}"
    );
    // Modes: the read bits of the stored 0600 log, so generated files are
    // 0400 and directories 0500.
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(session.join("surface.jsonl"))
            .expect("stat")
            .permissions()
            .mode()
            & 0o777,
        0o400
    );
    assert_eq!(
        std::fs::metadata(&session)
            .expect("stat")
            .permissions()
            .mode()
            & 0o777,
        0o500
    );
    let err = std::fs::write(session.join("surface.jsonl"), b"x")
        .expect_err("generated files are read-only");
    assert!(
        matches!(err.raw_os_error(), Some(libc::EACCES | libc::EROFS)),
        "{err}"
    );
}

/// `ls -l` lists a directory with `readdirplus`: the sizes it shows must be the
/// bytes a read returns, for views (whose attributes the listing leaves stale)
/// and for event files (whose attributes it gives) alike.
#[test]
fn ls_l_shows_the_sizes_that_reads_return() {
    let copy = store_copy("jsonl-zstd");
    let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
    let session = session_dir(mount.path(), "pipeline-compaction");
    let mut checked = 0;
    for dir in [session.clone(), session.join("events")] {
        let ls = std::process::Command::new("ls")
            .args(["-l", "--time-style=+%s"])
            .arg(&dir)
            .output()
            .expect("ls");
        assert!(ls.status.success());
        for line in String::from_utf8_lossy(&ls.stdout).lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if !line.starts_with('-') || fields.len() < 7 {
                continue;
            }
            let name = fields[fields.len() - 1];
            if name == "fork" || name == "flush" {
                continue;
            }
            let read = std::fs::read(dir.join(name)).expect("read").len();
            assert_eq!(fields[4], read.to_string(), "{line}");
            checked += 1;
        }
    }
    assert!(checked > 20, "{checked}");
}

/// What `rsync`, `tar`, `sendfile` and `mmap` copy is the `stat` size: every
/// file of a mounted tree, control files and `steps/` included, reads exactly
/// as many bytes as it stats.
#[test]
fn every_file_reads_as_many_bytes_as_it_stats() {
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
    // A fork and a failed one give both control files something to say.
    let parent = session_dir(mount.path(), "release-notes");
    std::fs::write(parent.join("fork"), b"42 sized-child\n").expect("fork");
    assert!(std::fs::write(parent.join("fork"), b"x\n").is_err());
    let (mut files, mut controls) = (0, 0);
    let mut stack = vec![mount.path().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("readdir") {
            let entry = entry.expect("entry");
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).expect("stat");
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() {
                let read = std::fs::read(&path).expect("read");
                assert_eq!(meta.len(), read.len() as u64, "{}", path.display());
                files += 1;
                controls +=
                    usize::from(entry.file_name() == "fork" || entry.file_name() == "flush");
            }
        }
    }
    assert!(
        files > 1000 && controls > 30,
        "{files} files, {controls} control files"
    );
}

#[test]
fn inode_numbers_stay_stable_while_mounted() {
    use std::os::unix::fs::MetadataExt;
    let copy = store_copy("jsonl");
    let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
    let session = session_dir(mount.path(), "ledger-chat");
    let first: Vec<u64> = [
        "header.json",
        "surface.jsonl",
        "events/00000002-user.message.json",
    ]
    .iter()
    .map(|f| std::fs::metadata(session.join(f)).expect("stat").ino())
    .collect();
    let _ = tree(mount.path());
    let again: Vec<u64> = [
        "header.json",
        "surface.jsonl",
        "events/00000002-user.message.json",
    ]
    .iter()
    .map(|f| std::fs::metadata(session.join(f)).expect("stat").ino())
    .collect();
    assert_eq!(first, again);
    let mut unique = first.clone();
    unique.dedup();
    assert_eq!(unique.len(), 3);
}

/// Bytes the process has read through syscalls so far (`rchar` of /proc/PID/io).
fn bytes_read(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).expect("/proc/PID/io");
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .and_then(|n| n.trim().parse().ok())
        .expect("rchar")
}

#[test]
fn listing_reads_headers_only_and_a_big_session_does_not_slow_the_others() {
    let copy = store_copy("jsonl");
    // A session with thousands of events (about 25 MB of log).
    let dir = copy.path.join("--srv-big--").join("big");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let mut log = String::from(
        "{\"type\":\"session\",\"version\":0,\"id\":\"big\",\"createdAt\":1,\"cwd\":\"/srv/big\",\"delegationDepth\":0}\n",
    );
    let filler = "x".repeat(4000);
    for turn in 0..1500u64 {
        let s = turn * 5;
        log.push_str(&format!(
            "{{\"type\":\"turn/start\",\"seq\":{s},\"time\":{s},\"data\":{{\"turn\":{t}}}}}\n\
             {{\"type\":\"step/start\",\"seq\":{},\"time\":{s},\"data\":{{\"turn\":{t},\"step\":1}}}}\n\
             {{\"type\":\"user/message\",\"seq\":{},\"time\":{s},\"data\":{{\"content\":[{{\"type\":\"text\",\"text\":\"{filler} {turn}\"}}],\"source\":{{\"kind\":\"user\"}},\"role\":\"user\",\"id\":\"u{turn}\"}},\"surfaceOp\":\"append\"}}\n\
             {{\"type\":\"step/end\",\"seq\":{},\"time\":{s},\"data\":{{\"turn\":{t},\"step\":1}}}}\n\
             {{\"type\":\"turn/end\",\"seq\":{},\"time\":{s},\"data\":{{\"turn\":{t},\"reason\":{{\"kind\":\"completed\"}}}}}}\n",
            s + 1,
            s + 2,
            s + 3,
            s + 4,
            t = turn + 1
        ));
    }
    std::fs::write(dir.join("session.jsonl"), &log).expect("write");
    let mount = Mount::new(&copy.path, &["-o", "grace=0"]);
    let before = bytes_read(mount.pid());
    let ls = std::process::Command::new("ls")
        .arg("-l")
        .arg(mount.path())
        .output()
        .expect("ls");
    assert!(ls.status.success());
    assert_eq!(
        String::from_utf8_lossy(&ls.stdout)
            .lines()
            .filter(|l| l.starts_with('d'))
            .count(),
        16 + 2,
    );
    let listing = bytes_read(mount.pid()) - before;
    assert!(
        listing < 200_000,
        "listing the root read {listing} bytes; the logs hold {} bytes",
        log.len()
    );
    // Reading a small session reads nothing of the big one.
    let before = bytes_read(mount.pid());
    std::fs::read(session_dir(mount.path(), "release-notes").join("surface.jsonl")).expect("read");
    let small = bytes_read(mount.pid()) - before;
    assert!(
        small < 1_000_000,
        "reading one small session read {small} bytes"
    );
    // The big session itself mounts and lists.
    let big = session_dir(mount.path(), "big");
    assert_eq!(
        std::fs::read_dir(big.join("events"))
            .expect("events")
            .count(),
        7500
    );
    assert_eq!(
        std::fs::read_to_string(big.join("surface.jsonl"))
            .expect("surface")
            .lines()
            .count(),
        1500
    );
}

/// A mount with `-o options` whose debug log the test reads.
fn logged_mount(store: &Path, options: &str) -> Mount {
    Mount::builder(store)
        .options(&["-o", options])
        .env("RUST_LOG", "sessionfs=debug")
        .capture_stderr()
        .start()
}

/// Asserts that two mounted trees show the same files, `status` aside from
/// its digits (it tells how long each session has been quiet).
fn assert_same_tree(what: &str, want: &BTreeMap<String, Vec<u8>>, got: &BTreeMap<String, Vec<u8>>) {
    let shown = |tree: &BTreeMap<String, Vec<u8>>, name: &str| {
        tree.get(name).map(|bytes| match name.ends_with("/status") {
            true => bytes
                .iter()
                .filter(|b| !b.is_ascii_digit())
                .copied()
                .collect(),
            false => bytes.clone(),
        })
    };
    for name in want.keys() {
        assert!(
            shown(got, name) == shown(want, name),
            "{what}: {name} differs"
        );
    }
    assert_eq!(got.len(), want.len(), "{what}");
}

#[test]
fn a_tree_walked_with_sessions_built_ahead_is_the_tree_walked_without() {
    for store in ["jsonl-zstd", "sqlite17", "crash/jsonl"] {
        let copy = store_copy(store);
        let without = tree(Mount::new(&copy.path, &["-o", "grace=0,noindex,noreadahead"]).path());
        assert!(without.len() > 300, "{store}: {} files", without.len());
        let ahead = logged_mount(&copy.path, "grace=0,noindex");
        let with = tree(ahead.path());
        let built_ahead = ahead.stderr().matches("ahead of its use").count();
        drop(ahead);
        assert_same_tree(
            &format!("{store}, with and without building ahead"),
            &without,
            &with,
        );
        assert!(
            built_ahead >= 3,
            "{store}: {built_ahead} sessions built ahead"
        );
    }
}

#[test]
fn a_remount_with_the_persistent_index_shows_what_a_mount_without_one_does() {
    for store in ["jsonl-zstd", "sqlite17", "crash/jsonl", "crash/sqlite17"] {
        let copy = store_copy(store);
        let index = common::TempDir::new("index");
        let options = format!("grace=0,index={}", index.path().display());
        // The first mount reads every log and saves its scans as it unmounts.
        let first = tree(Mount::new(&copy.path, &["-o", &options]).path());
        let again = logged_mount(&copy.path, &options);
        let again_tree = tree(again.path());
        let continued = again.stderr().matches("continuing its saved scan").count();
        drop(again);
        // One mount at a time: over SQLite, another mount's connection is a
        // possible writer, which `status` would tell.
        let whole_tree = tree(Mount::new(&copy.path, &["-o", "grace=0,noindex"]).path());
        assert!(
            whole_tree.len() > 300,
            "{store}: {} files",
            whole_tree.len()
        );
        let without = format!("{store}, with and without the index");
        assert_same_tree(&without, &whole_tree, &first);
        assert_same_tree(&without, &whole_tree, &again_tree);
        assert!(
            continued >= 5,
            "{store}: {continued} sessions continued a saved scan"
        );
    }
}
