//! Helpers for tests that need the system to look different from what it is:
//! a binary in the shell's default PATH, or a `/dev/fuse` with other permissions.
//! They run a script in a private mount namespace, so every bind mount they make
//! (and every mount made inside) is gone when the script ends, and other tests
//! never see it.

#![allow(dead_code)]

use std::process::{Command, Output, Stdio};

/// Why namespace tests cannot run here, if they cannot.
pub fn unavailable(tools: &[&str]) -> Option<String> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root to make a private mount namespace".into());
    }
    for tool in ["unshare", "setpriv"].iter().chain(tools) {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Some(format!("{tool} is not installed"));
        }
    }
    None
}

/// Runs `script` with `sh -eu` as root in a private mount namespace.
pub fn run(script: &str) -> Output {
    Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-eu",
            "-c",
            script,
        ])
        .stdin(Stdio::null())
        .output()
        .expect("unshare")
}

/// The user tests run unprivileged commands as: `nobody`, when it exists.
pub fn nobody() -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&"nobody") && fields.len() > 3)
            .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
            .flatten()
    })
}

/// Output as text, for assertion messages.
pub fn describe(output: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
