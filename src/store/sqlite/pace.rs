//! Writing a fork child without getting in the Harness's way. The Harness
//! opens its database with no busy timeout and plain deferred `BEGIN`s, so
//! any write it tries while sessionfs holds the write lock fails at once, and
//! so does one whose read started before a commit of ours. A child is
//! therefore written in short transactions placed in the gaps between the
//! other writer's commits: each gap starts once a commit of another
//! connection is seen in the WAL-index header (`-shm`) and the header has
//! then stayed still for `SETTLE` (and not later than `LATE` after that), or
//! once nothing was committed for `QUIET`;
//! sessionfs then writes for at most `WINDOW`, each transaction inserting rows
//! for at most `ROW_BUDGET`; while another process is inside a transaction
//! (it holds a WAL-index lock) no gap starts, for at most `PATIENCE`: a
//! connection that keeps a transaction open (a reader, `sqlite3` inside
//! `BEGIN`, a backup) would otherwise hold the flush back for good. With no
//! other connection open (the probe says gone) the child is written without
//! pauses, in transactions no longer than a gap's, the probe asked again
//! before each.
//!
//! Those transactions commit without `fsync` (`synchronous = NORMAL`): their
//! rows are invisible, so losing them loses nothing. After the last one, and
//! outside the lock, the WAL is synced, which makes the whole child durable
//! at once before `create` returns (a rollback-journal database commits the
//! last one with `synchronous = FULL` instead).
//!
//! The rows go in before their session row, so neither the Harness nor a
//! mount lists the child until one last small transaction adds that row; a
//! marker file (see `pending`) names the child meanwhile, so rows left by a
//! crash are removed at the next mount.

use std::thread;
use std::time::{Duration, Instant};

use super::liveness::WriterProbe;
use crate::model::activity::WriterPresence;

/// How long the WAL-index header must stay unchanged after another
/// connection's commit: a flush may follow its batch at once.
const SETTLE: Duration = Duration::from_millis(3);
/// A gap not started this soon after the commit that opened it is skipped.
const LATE: Duration = Duration::from_millis(2);
/// With no commit of another connection seen for this long, its writer is
/// taken to be idle.
const QUIET: Duration = Duration::from_millis(50);
/// How long sessionfs writes in one gap.
const WINDOW: Duration = Duration::from_millis(4);
/// How long one transaction inserts rows before it commits.
const ROW_BUDGET: Duration = Duration::from_millis(1);
/// How long sessionfs writes, in transactions one after the other, with no
/// other connection open.
const ALONE_WINDOW: Duration = Duration::from_millis(50);
/// How long a transaction held open by another connection holds a gap back:
/// past it, the next gap after a commit (or a quiet spell) is taken anyway,
/// as a transaction held open this long is no writer between commits.
const PATIENCE: Duration = Duration::from_millis(200);
/// How often the header is read while waiting for a gap.
const POLL: Duration = Duration::from_micros(250);

/// What the pacer reads of the other connections: [`WriterProbe`], or a
/// scripted one in tests.
pub(super) trait Probe {
    /// What the locks say of another connection now.
    fn writer(&self) -> WriterPresence;
    /// The WAL-index header, which every commit rewrites.
    fn wal_index_header(&self) -> Option<[u8; 48]>;
    /// True when another connection is inside a transaction.
    fn others_in_transaction(&self) -> bool;
}

impl Probe for WriterProbe {
    fn writer(&self) -> WriterPresence {
        WriterProbe::writer(self)
    }
    fn wal_index_header(&self) -> Option<[u8; 48]> {
        WriterProbe::wal_index_header(self)
    }
    fn others_in_transaction(&self) -> bool {
        WriterProbe::others_in_transaction(self)
    }
}

/// Finds gaps between another writer's commits.
pub(super) struct Pacer<'a> {
    probe: &'a dyn Probe,
    /// When the current gap started.
    window: Instant,
    /// No other connection was open at the gap's start.
    alone: bool,
}

impl<'a> Pacer<'a> {
    pub(super) fn new(probe: &'a dyn Probe) -> Pacer<'a> {
        Pacer {
            probe,
            window: Instant::now(),
            alone: false,
        }
    }

    /// Waits for the next gap (none when no other connection is open).
    pub(super) fn gap(&mut self) {
        self.alone = self.probe.writer() == WriterPresence::Gone;
        if !self.alone {
            self.wait_for_gap();
        }
        self.window = Instant::now();
    }

    fn wait_for_gap(&self) {
        let started = Instant::now();
        let mut waiting = started;
        let mut seen = self.probe.wal_index_header();
        let mut last_commit: Option<Instant> = None;
        loop {
            thread::sleep(POLL);
            let now = Instant::now();
            // A writer that never settles (commits closer than SETTLE apart)
            // holds the flush back no longer than this either.
            if now - started >= PATIENCE + QUIET {
                return;
            }
            let header = self.probe.wal_index_header();
            if header != seen {
                (seen, last_commit) = (header, Some(now));
                continue;
            }
            // Past PATIENCE a transaction held open no longer holds the gap
            // back, but the gap still follows a commit (or a quiet spell):
            // writing at once, at any moment, could meet the writer's next
            // commit (writer_safety, with a reader polling every 3 ms).
            if now - started < PATIENCE && self.probe.others_in_transaction() {
                // Reading, or about to write: its commit is yet to come.
                continue;
            }
            match last_commit {
                Some(at) if now - at > SETTLE + LATE => {
                    // Too late in this gap (a reader kept us waiting): the
                    // next commit starts the next one.
                    (last_commit, waiting) = (None, now);
                }
                Some(at) if now - at >= SETTLE => return,
                None if now - waiting >= QUIET => return,
                _ => {}
            }
        }
    }

    /// Whether the current gap has room for another transaction. Alone, the
    /// probe is asked again before each one, and at least every
    /// `ALONE_WINDOW`: a connection seen now ends the run of transactions, so
    /// the next waits for a gap between its commits.
    pub(super) fn in_window(&mut self) -> bool {
        if self.alone && self.probe.writer() != WriterPresence::Gone {
            self.alone = false;
            return false;
        }
        let limit = if self.alone { ALONE_WINDOW } else { WINDOW };
        self.window.elapsed() < limit
    }

    /// How long the next transaction may insert rows. Alone, no longer than
    /// in a gap either: the probe has been seen to say no connection is open
    /// while the Harness's was (writer_safety: 40,000 rows in one 51 ms
    /// transaction, and a Harness commit refused), so no transaction holds
    /// the write lock longer than a gap's.
    pub(super) fn row_budget(&self) -> Duration {
        if self.alone { WINDOW } else { ROW_BUDGET }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another connection that commits every `every` from its creation on
    /// (never, for `None`), and is inside a transaction or not.
    struct Scripted {
        start: Instant,
        every: Option<Duration>,
        in_transaction: bool,
    }

    impl Scripted {
        fn new(every: Option<Duration>, in_transaction: bool) -> Scripted {
            Scripted {
                start: Instant::now(),
                every,
                in_transaction,
            }
        }

        /// How many commits were made by now.
        fn commits(&self) -> u128 {
            self.every.map_or(0, |every| {
                self.start.elapsed().as_nanos() / every.as_nanos()
            })
        }

        /// How long ago the last commit was.
        fn since_commit(&self) -> Duration {
            let every = self.every.expect("a committing writer");
            let elapsed = self.start.elapsed().as_nanos();
            Duration::from_nanos((elapsed % every.as_nanos()) as u64)
        }
    }

    impl Probe for Scripted {
        fn writer(&self) -> WriterPresence {
            WriterPresence::Connected
        }
        fn wal_index_header(&self) -> Option<[u8; 48]> {
            let mut header = [0; 48];
            header[..16].copy_from_slice(&self.commits().to_le_bytes());
            Some(header)
        }
        fn others_in_transaction(&self) -> bool {
            self.in_transaction
        }
    }

    /// How long `gap` waited.
    fn waited(probe: &Scripted) -> Duration {
        let started = Instant::now();
        Pacer::new(probe).gap();
        started.elapsed()
    }

    #[test]
    fn past_patience_a_transaction_held_open_still_gets_a_gap_after_a_commit() {
        // A writer committing every 20 ms beside a reader that never ends its
        // transaction: past PATIENCE, the gap still follows a commit by
        // SETTLE, not any moment (a commit falls at PATIENCE itself).
        let probe = Scripted::new(Some(Duration::from_millis(20)), true);
        let waited = waited(&probe);
        assert!(waited >= PATIENCE, "{waited:?}");
        assert!(
            waited < PATIENCE + QUIET + Duration::from_secs(1),
            "{waited:?}"
        );
        let since = probe.since_commit();
        assert!(since >= SETTLE, "written {since:?} after a commit");
    }

    #[test]
    fn a_writer_that_never_settles_holds_the_gap_back_a_bounded_time() {
        let probe = Scripted::new(Some(Duration::from_micros(500)), true);
        let waited = waited(&probe);
        assert!(waited >= PATIENCE + QUIET, "{waited:?}");
        assert!(
            waited < PATIENCE + QUIET + Duration::from_secs(1),
            "{waited:?}"
        );
    }

    #[test]
    fn an_idle_writer_gives_a_gap_after_a_quiet_spell() {
        let probe = Scripted::new(None, false);
        let waited = waited(&probe);
        assert!(waited >= QUIET, "{waited:?}");
        // Not the hard bound's return.
        assert!(waited < PATIENCE + QUIET, "{waited:?}");
    }
}
