//! The control files, in the manner of Plan 9 `ctl` files: one write is one
//! command, acted on before the write returns, so the write's status is the
//! command's status; reading shows what happened. This module holds the one
//! command grammar and what each session's `fork` file remembers; the
//! façade carries the commands out (`write.rs`).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::error::Error;
use crate::model::fork::parse_fork_command;
use crate::render::format_time;
use crate::sync::lock;

/// A fork this mount made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkRecord {
    /// The last seq the child holds of its parent.
    pub boundary: u64,
    /// The child's id.
    pub child: String,
}

/// What `cat fork` shows: the forks made from this session and the last error.
#[derive(Clone, Debug, Default)]
struct ForkLog {
    forks: Vec<ForkRecord>,
    last_error: Option<(i64, String)>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as i64
}

impl ForkLog {
    /// The text of `cat fork` for `session`.
    fn status(&self, session: &str) -> String {
        let mut out = format!("# write SEQ or \"SEQ NAME\" here to fork {session:?} through SEQ\n");
        for fork in &self.forks {
            out.push_str(&format!(
                "fork: through seq {} -> {}\n",
                fork.boundary, fork.child
            ));
        }
        match &self.last_error {
            Some((when, message)) => {
                out.push_str(&format!("last-error: {} {message}\n", format_time(*when)))
            }
            None => out.push_str("last-error: none\n"),
        }
        out
    }
}

/// The fork logs of the sessions forked while mounted, by slot number: a leaf
/// lock, never held while taking another.
#[derive(Default)]
pub(super) struct Controls {
    logs: Mutex<HashMap<u32, ForkLog>>,
}

impl Controls {
    /// The text of `cat fork` for the session in slot `number`.
    pub fn fork_status(&self, number: u32, session: &str) -> String {
        lock(&self.logs).get(&number).map_or_else(
            || ForkLog::default().status(session),
            |log| log.status(session),
        )
    }

    /// Records what a write to a session's `fork` file did.
    pub fn record(&self, number: u32, outcome: &Result<ForkRecord, Error>) {
        let mut logs = lock(&self.logs);
        let log = logs.entry(number).or_default();
        match outcome {
            Ok(record) => log.forks.push(record.clone()),
            Err(e) => log.last_error = Some((now_ms(), e.to_string())),
        }
    }
}

/// Which control file a command was written to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlFile {
    /// A session's `fork` file.
    Fork,
    /// The root's or a session's `flush` file.
    Flush,
}

/// One command, as written to a control file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Fork the session through seq `through`, naming the child `name` or a
    /// fresh id.
    Fork {
        /// The last seq of the parent the child holds.
        through: u64,
        /// The child's id, when the writer chose one.
        name: Option<String>,
    },
    /// Make everything pending durable.
    Flush,
}

impl Command {
    /// Parses what one write to `file` says: `SEQ` or `SEQ NAME` for `fork`;
    /// an empty line (`echo > flush`) or the word `flush` for `flush`. The
    /// error is the sentence the writer is shown.
    pub fn parse(file: ControlFile, data: &[u8]) -> Result<Command, String> {
        match file {
            ControlFile::Fork => {
                let (through, name) = parse_fork_command(data)?;
                Ok(Command::Fork { through, name })
            }
            ControlFile::Flush => {
                let text = std::str::from_utf8(data)
                    .map_err(|_| "the flush command is not text".to_string())?;
                match text.trim_end_matches('\n') {
                    "" | "flush" => Ok(Command::Flush),
                    other => Err(format!(
                        "unknown flush command {other:?}: write an empty line (echo > flush)"
                    )),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_commands() {
        for ok in [&b"\n"[..], b"", b"flush\n"] {
            assert_eq!(Command::parse(ControlFile::Flush, ok), Ok(Command::Flush));
        }
        assert!(Command::parse(ControlFile::Flush, b"now please\n").is_err());
    }

    #[test]
    fn fork_commands() {
        assert_eq!(
            Command::parse(ControlFile::Fork, b"41 child\n"),
            Ok(Command::Fork {
                through: 41,
                name: Some("child".into())
            })
        );
        assert!(Command::parse(ControlFile::Fork, b"flush").is_err());
    }

    #[test]
    fn fork_log_shows_forks_and_the_last_error() {
        let controls = Controls::default();
        assert!(controls.fork_status(3, "s").ends_with("last-error: none\n"));
        let record = ForkRecord {
            boundary: 4,
            child: "c".into(),
        };
        controls.record(3, &Ok(record));
        controls.record(3, &Err(Error::Invalid("no".into())));
        let status = controls.fork_status(3, "s");
        assert!(status.contains("fork: through seq 4 -> c\n"), "{status}");
        assert!(status.contains(" no\n"), "{status}");
        assert!(controls.fork_status(4, "t").ends_with("last-error: none\n"));
    }
}
