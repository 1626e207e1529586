//! Reads over a mount that fail loudly: a generated session the mount cannot
//! read would otherwise show up only as a suspiciously fast figure.

use std::fs;

use crate::mount::{Mount, time_sh};

/// Fails loudly when a session is shown unreadable (an `error` file instead of views).
pub fn expect_readable(mount: &Mount, name: &str) {
    let error = mount.path(name).join("error");
    if let Ok(text) = fs::read_to_string(&error) {
        panic!(
            "generated session {name} is unreadable in the mount: {}",
            text.trim()
        );
    }
    for file in ["transcript.md", "surface.jsonl"] {
        let path = mount.path(name).join(file);
        assert!(
            path.is_file(),
            "generated session {name} has no {file} in the mount"
        );
    }
}

/// Runs a timed shell command over the mount; on failure, says why the session
/// is unreadable when it is.
pub fn timed(mount: &Mount, name: &str, script: &str) -> (f64, String) {
    let outcome = std::panic::catch_unwind(|| time_sh(script));
    match outcome {
        Ok(result) => result,
        Err(panic) => {
            expect_readable(mount, name);
            std::panic::resume_unwind(panic)
        }
    }
}
