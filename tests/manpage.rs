//! man/sessionfs.1 renders without a single warning, passes the checks Debian's
//! lintian runs on manual pages, and documents every option `sessionfs --help`
//! lists (long options and `-o` mount options).
//!
//! `man`, `groff` and `lexgrog` are required: when they are missing the tests
//! fail (install man-db and groff; `bash .ci/run` does).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn page() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("man/sessionfs.1")
}

/// Runs a documentation tool, failing with an installation hint when it is missing.
fn tool(program: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(program);
    command.args(args).stdin(Stdio::null());
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().unwrap_or_else(|e| {
        panic!("cannot run `{program}` ({e}): install man-db and groff (apt-get install -y man-db groff) to check the man page")
    })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn page_arg() -> String {
    page().to_string_lossy().into_owned()
}

#[test]
fn man_renders_without_warnings() {
    // The check lintian runs: every line on stderr is a finding.
    let out = tool(
        "man",
        &[
            "--warnings",
            "-E",
            "UTF-8",
            "-l",
            "-Tutf8",
            "-Z",
            &page_arg(),
        ],
        &[("MANROFFSEQ", ""), ("MANWIDTH", "80")],
    );
    assert!(
        out.status.success(),
        "man failed: {}\n{}",
        out.status,
        text(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "man --warnings reported:\n{}",
        text(&out.stderr)
    );
    assert!(!out.stdout.is_empty(), "man produced no output");
}

#[test]
fn groff_renders_without_warnings() {
    let out = tool("groff", &["-man", "-Tutf8", "-ww", "-z", &page_arg()], &[]);
    assert!(
        out.status.success(),
        "groff failed: {}\n{}",
        out.status,
        text(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "groff -ww reported:\n{}",
        text(&out.stderr)
    );
}

#[test]
fn lexgrog_parses_the_name_section() {
    let out = tool("lexgrog", &[&page_arg()], &[]);
    assert!(
        out.status.success(),
        "lexgrog failed ({}): {}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("\"sessionfs - "),
        "unexpected whatis entry: {}",
        text(&out.stdout)
    );
}

#[test]
fn the_title_line_names_section_1() {
    let source = std::fs::read_to_string(page()).expect("man/sessionfs.1");
    let title = source
        .lines()
        .find(|l| l.starts_with(".TH "))
        .expect("a .TH line");
    let fields: Vec<&str> = title.split_whitespace().collect();
    assert_eq!(fields.get(1), Some(&"SESSIONFS"), "{title}");
    assert_eq!(
        fields.get(2),
        Some(&"1"),
        "the section must match the file suffix: {title}"
    );
}

/// The page as plain text: no hyphenation or justification, long lines, no
/// overstrikes, and ASCII hyphens, so option names appear unbroken.
fn rendered_page() -> String {
    let out = tool(
        "man",
        &["--nh", "--nj", "-E", "UTF-8", "-l", &page_arg()],
        &[("MANWIDTH", "250"), ("MAN_KEEP_FORMATTING", "")],
    );
    assert!(
        out.status.success(),
        "man failed: {}\n{}",
        out.status,
        text(&out.stderr)
    );
    let raw = text(&out.stdout);
    let mut plain = String::with_capacity(raw.len());
    for c in raw.chars() {
        match c {
            // Overstrike: drop the character before the backspace.
            '\u{8}' => {
                plain.pop();
            }
            '\u{2010}' | '\u{2011}' | '\u{2212}' => plain.push('-'),
            _ => plain.push(c),
        }
    }
    plain
}

fn help_text() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sessionfs"))
        .arg("--help")
        .output()
        .expect("run sessionfs --help");
    assert!(out.status.success(), "sessionfs --help failed");
    text(&out.stdout)
}

/// Every `--long` option in the help text.
fn long_options(help: &str) -> Vec<String> {
    let mut options: Vec<String> = Vec::new();
    for word in help.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
        if let Some(name) = word.strip_prefix("--")
            && !name.is_empty()
            && !options.iter().any(|o| o == word)
        {
            options.push(word.to_string());
        }
    }
    options
}

/// Every mount option name in the `-o` part of the help text: the items of its
/// comma-separated lists, without values (`uid=N` gives `uid`) or remarks in
/// parentheses such as "(default 512)".
fn mount_options(help: &str) -> Vec<String> {
    let start = help
        .find("mount options:")
        .expect("the help text has a `-o` section saying \"mount options:\"")
        + "mount options:".len();
    let end = help[start..]
        .find("\n  -")
        .map_or(help.len(), |i| start + i);
    let mut block = help[start..end].to_string();
    // Remarks about defaults are prose, not options.
    while let Some(open) = block.find("(default").or_else(|| block.find("(fork")) {
        let close = block[open..]
            .find(')')
            .map_or(block.len(), |i| open + i + 1);
        block.replace_range(open..close, "");
    }
    let mut names: Vec<String> = Vec::new();
    for item in block.split([',', ';', '(', ')']) {
        let item = item.trim();
        // Items with spaces are prose ("fstab-only options", "are ignored").
        if item.is_empty() || item.contains(char::is_whitespace) {
            continue;
        }
        let name = item
            .split('=')
            .next()
            .unwrap_or(item)
            .trim_end_matches('*')
            .to_string();
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

#[test]
fn the_help_text_is_parsed_as_expected() {
    // Guards the parsing below: if the help text changes shape, this says so.
    let help = help_text();
    let long = long_options(&help);
    for option in [
        "--foreground",
        "--debug",
        "--read-only",
        "--allow-other",
        "--grace",
        "--help",
        "--version",
    ] {
        assert!(
            long.iter().any(|o| o == option),
            "{option} not found in {long:?}"
        );
    }
    let mount = mount_options(&help);
    for option in [
        "ro",
        "allow_other",
        "uid",
        "grace",
        "cache",
        "window",
        "attr_timeout",
        "fsname",
        "noatime",
        "nofail",
        "comment",
        "x-",
    ] {
        assert!(
            mount.iter().any(|o| o == option),
            "{option} not found in {mount:?}"
        );
    }
    for prose in ["default", "fork", "options", "mount"] {
        assert!(
            !mount.iter().any(|o| o == prose),
            "{prose:?} is not a mount option: {mount:?}"
        );
    }
}

fn mentions(page: &str, name: &str) -> bool {
    let is_name_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    page.match_indices(name).any(|(at, _)| {
        let before = page[..at].chars().next_back();
        let after = page[at + name.len()..].chars().next();
        !before.is_some_and(is_name_char)
            && (name.ends_with('-') || !after.is_some_and(is_name_char))
    })
}

#[test]
fn every_option_in_help_is_in_the_man_page() {
    let help = help_text();
    let page = rendered_page();
    let options = page.find("\nOPTIONS\n").expect("an OPTIONS section");
    let files = page
        .find("\nFILES\n")
        .expect("a FILES section after OPTIONS");
    let options_section = &page[options..files];
    let mut missing = Vec::new();
    for option in long_options(&help) {
        if !mentions(options_section, &option) {
            missing.push(option);
        }
    }
    for option in mount_options(&help) {
        if !mentions(options_section, &option) {
            missing.push(format!("-o {option}"));
        }
    }
    assert!(
        missing.is_empty(),
        "options in `sessionfs --help` but not in the man page's OPTIONS: {missing:?}"
    );
}
