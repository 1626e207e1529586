//! Whether a session's writer may still be working: what the store can tell
//! of it, and the rule deciding when an open turn is shown as crashed. What
//! the log itself shows the session doing is `repair::TurnScan`.

use std::time::Duration;

/// What the store can tell of a process that may still write the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriterPresence {
    /// Another connection has the store open (SQLite in WAL mode: a lock on
    /// its `-shm` or database file held by another process).
    Connected,
    /// The store can tell, and no other connection has it open.
    Gone,
    /// The store cannot tell (JSONL; SQLite in a rollback-journal mode, whose
    /// idle connections hold no lock).
    Unknown,
}

/// Why an open turn is shown closed by crash repair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepairCause {
    /// No writer can be working on it.
    WriterGone,
    /// The session has been quiet for at least the grace period.
    Quiet(Duration),
}

/// Whether an open turn is shown with its synthetic closers: at once when the
/// store knows no writer is left, else once the session has been quiet for
/// `grace` (a writer may be in a long tool call until then).
pub fn repair_cause(
    writer: WriterPresence,
    quiet_for: Duration,
    grace: Duration,
) -> Option<RepairCause> {
    match writer {
        WriterPresence::Gone => Some(RepairCause::WriterGone),
        WriterPresence::Connected | WriterPresence::Unknown => {
            (quiet_for >= grace).then_some(RepairCause::Quiet(quiet_for))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crash_view_waits_for_the_grace_unless_the_writer_is_gone() {
        let grace = Duration::from_secs(600);
        let short = Duration::from_secs(30);
        let long = Duration::from_secs(601);
        assert_eq!(
            repair_cause(WriterPresence::Gone, Duration::ZERO, grace),
            Some(RepairCause::WriterGone)
        );
        for writer in [WriterPresence::Connected, WriterPresence::Unknown] {
            assert_eq!(repair_cause(writer, short, grace), None);
            assert_eq!(
                repair_cause(writer, long, grace),
                Some(RepairCause::Quiet(long))
            );
        }
    }
}
