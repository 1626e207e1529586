//! The Harness's own `inspect()` as a reference for figure 1 (issue 15): the
//! issue's target for a cold mount + `cat surface.jsonl` + `ls events` is at
//! most ⅓ of what the Harness takes to read and check the same session.
//!
//! The bench neither ships nor builds the Harness. `--harness-inspect 'CMD'`
//! names a shell command that opens a store with the Harness's own persistence
//! package and runs `inspect()` on one session; the bench substitutes
//! `{store}` (a JSONL store's root directory, or a SQLite store's database
//! file), `{id}` (the session id) and `{encoding}` (`zstd`, `raw` or `sqlite`),
//! each already shell-quoted, and times the whole command after dropping the
//! page cache, as it does for its floors. That time includes starting the
//! command's runtime, which the sessionfs figure (an already running mount) does
//! not; the command's last line of output is printed in the notes, so a driver
//! can report the time spent in `inspect()` itself. Its CPU time is given too:
//! on a machine shared with other work it moves much less than wall time.

use std::path::Path;

use crate::Bench;
use crate::mount::{quote, try_time_sh};
use crate::table::{Row, secs, yes};
use crate::write::Enc;

/// The target for a first mount: sessionfs at most this fraction of
/// the Harness's time.
pub const TARGET: f64 = 1.0 / 3.0;

/// The command for one session: the template with its placeholders filled in.
fn command(template: &str, store: &Path, id: &str, enc: Enc) -> String {
    template
        .replace("{store}", &quote(store))
        .replace("{id}", &quote(Path::new(id)))
        .replace("{encoding}", enc.name())
}

/// What the reference gave, cold.
pub struct Measured {
    pub seconds: f64,
    /// User and system CPU time of the command and everything it waited for.
    pub cpu: f64,
    /// The last line it printed.
    pub said: String,
}

/// What the reference gave, or why it failed.
pub type Reference = Result<Measured, String>;

/// User and system CPU time of this process's children that have been waited for.
fn children_cpu() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// Runs the reference cold on one session of a store (no mount is running:
/// the children's CPU time it adds is the command's).
pub fn measure(bench: &mut Bench, template: &str, store: &Path, id: &str, enc: Enc) -> Reference {
    let script = command(template, store, id, enc);
    bench.cold();
    let cpu = children_cpu();
    let (seconds, stdout, stderr) = try_time_sh(&script)?;
    let cpu = children_cpu() - cpu;
    let said = [stdout.as_str(), stderr.as_str()]
        .iter()
        .flat_map(|text| text.lines())
        .map(str::trim)
        .rfind(|line| !line.is_empty())
        .unwrap_or("")
        .to_string();
    Ok(Measured { seconds, cpu, said })
}

/// The row comparing sessionfs's time for the task with the Harness's: at
/// most `target` (`label`) of it.
pub fn row(
    figure: String,
    sessionfs: f64,
    reference: Option<&Reference>,
    (target, label): (f64, &str),
) -> Row {
    let target_text = format!("≤ {label} of the Harness");
    let (floor, ratio, met) = match reference {
        Some(Ok(harness)) => {
            let ratio = sessionfs / harness.seconds;
            (
                secs(harness.seconds),
                format!("{ratio:.2}×"),
                yes(ratio <= target),
            )
        }
        Some(Err(_)) => ("failed".into(), "-".into(), "-".into()),
        None => ("not measured".into(), "-".into(), "-".into()),
    };
    Row {
        figure,
        value: secs(sessionfs),
        floor,
        ratio,
        target: target_text,
        met,
    }
}

/// How to measure the reference, for a run without it.
pub const NOT_MEASURED: &str = "1: the Harness `inspect()` reference was not measured: give `--harness-inspect 'CMD'`, a shell command that runs the Harness's `inspect()` on one session, with {store}, {id} and {encoding} in it (see the bench's doc comment and README)";
