//! Writing a fork child without getting in the Harness's way. The Harness
//! opens its database with no busy timeout and plain deferred `BEGIN`s, so
//! any write it tries while sessionfs holds the write lock fails at once, and
//! so does one whose read started before a commit of ours. A child is
//! therefore written in short transactions placed in the gaps between the
//! other writer's commits: each gap starts once a commit of another
//! connection is seen in the WAL-index header (`-shm`) and the header has
//! then stayed still, and no checkpoint of another connection run, for
//! `SETTLE` (and not later than `LATE` after that), or
//! once nothing was committed for `QUIET`;
//! sessionfs then writes for at most `WINDOW`, each transaction inserting rows
//! for at most `ROW_BUDGET`, and stops early once another process is inside a
//! transaction or the writer's next spell of commits is due (see `Cadence`:
//! a writer on a timer starts its commits at a steady rhythm, and a slow
//! commit leaves less of the gap before the next); while another process is
//! inside a transaction (it holds a WAL-index lock) no gap starts, for at
//! most `PATIENCE`: a
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

use std::collections::VecDeque;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use super::liveness::WriterProbe;
use crate::model::activity::WriterPresence;
use crate::sync::lock;

/// How long the WAL-index header must stay unchanged after another
/// connection's commit: a flush may follow its batch at once, and on a busy
/// machine the writer's thread is often descheduled between the two (its
/// deferred `BEGIN` holds no lock meanwhile). Activity closer together than
/// this is one spell.
const SETTLE: Duration = Duration::from_millis(8);
/// A gap not started this soon after the commit that opened it is skipped.
const LATE: Duration = Duration::from_millis(3);
/// How long before the writer's next spell is due a gap ends: its rhythm
/// jitters, a spell seen only by its commit was seen late, and on a busy
/// machine a transaction of ours is descheduled for milliseconds.
const GUARD: Duration = Duration::from_millis(6);
/// How many intervals between spells the rhythm is judged on.
const SPELLS: usize = 8;
/// How long a spell's start is remembered.
const REMEMBER: Duration = Duration::from_secs(1);
/// How long the writer may go unwatched with no break in the evidence of its
/// rhythm: longer than a window of ours and its last transaction, even on a
/// loaded machine (a shorter break left no interval to learn from there);
/// between forks the pacer stops watching for about a second.
const BREAK: Duration = Duration::from_millis(50);
/// With no commit of another connection seen for this long, its writer is
/// taken to be idle.
const QUIET: Duration = Duration::from_millis(50);
/// How long sessionfs writes in one gap.
const WINDOW: Duration = Duration::from_millis(4);
/// How long one transaction inserts rows before it commits.
const ROW_BUDGET: Duration = Duration::from_millis(1);
/// How many of our latest transactions' holds of the write lock are kept.
const HOLDS: usize = 16;
/// The longest a transaction of ours is expected to hold the write lock:
/// longer ones are stalls, and expecting them would leave no gap at all.
const MAX_HOLD: Duration = Duration::from_millis(8);
/// How long sessionfs writes, in transactions one after the other, with no
/// other connection open.
const ALONE_WINDOW: Duration = Duration::from_millis(50);
/// How long a transaction held open by another connection holds a gap back:
/// past it, the next gap after a commit (or a quiet spell) is taken anyway,
/// as a transaction held open this long is no writer between commits.
const PATIENCE: Duration = Duration::from_millis(200);
/// The longest a gap is waited for.
const GIVE_UP: Duration = Duration::from_secs(1);
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
    /// True when another connection holds the WAL write lock: it is writing.
    fn others_writing(&self) -> bool;
    /// True when another connection is checkpointing.
    fn others_checkpointing(&self) -> bool;
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
    fn others_writing(&self) -> bool {
        WriterProbe::others_writing(self)
    }
    fn others_checkpointing(&self) -> bool {
        WriterProbe::others_checkpointing(self)
    }
}

/// The other writer's rhythm: when its spells of commits start. A spell
/// starts when the writer is seen writing (holding the write lock, or, when
/// that fell between two polls, by its commit) after `SETTLE` without. A
/// writer on a timer keeps its phase: a spell that started late (its thread
/// was descheduled) does not put off the next, so each recent start's phase
/// is projected past the latest spell at the typical interval, and the
/// earliest projection is the next spell due. A commit that came late in a
/// spell (a flush's, after its batch) starts no spell of its own when it
/// comes well before the next is due; when it does (the rhythm was not yet
/// known) and its projection passes without a spell, its start is dropped,
/// as are those of an idle writer, which has no phase until it writes again.
/// A spell that runs on into the next one's due (a slow commit) counts as
/// that one too, lest its phase be taken for skipped; and a spell due while
/// sessionfs was not watching (writing, or between forks) is not taken for
/// skipped either, and an interval across a break in watching longer than
/// `BREAK` is no period. Kept by the store across forks, as the writer's rhythm
/// outlives one fork; starts older than `REMEMBER` are forgotten, as a small
/// error in the interval grows with each period projected.
#[derive(Default)]
pub(super) struct Cadence {
    /// The latest spell starts, oldest first.
    starts: VecDeque<Instant>,
    /// When the writer was last seen writing.
    last_seen: Option<Instant>,
    /// Since when the writer is watched without a break: a spell due
    /// before then was not seen, not missed.
    watched_from: Option<Instant>,
    /// When the writer was last watched, once watching stopped.
    watched_until: Option<Instant>,
    /// When watching resumed after a break longer than `BREAK`, within
    /// `REMEMBER`: an interval across one is no period, as the spells in
    /// the break were not seen (between forks: a 975 ms "period" had every
    /// next spell taken for a late commit, and the rhythm learnt was 50 ms).
    resumed: VecDeque<Instant>,
    /// How long our latest transactions held the write lock, oldest first.
    holds: VecDeque<Duration>,
}

impl Cadence {
    fn saw_writing(&mut self, now: Instant) {
        let new_spell =
            self.last_seen.is_none_or(|seen| now - seen > SETTLE) && !self.too_soon(now);
        // Writing that ran on from the last spell up to the next one's due:
        // the next spell came, hidden in it, and keeps the phase.
        let ran_into = match self.due() {
            Some((_, due)) if !new_spell && now + GUARD >= due => Some(due),
            _ => None,
        };
        if let Some(start) = ran_into.or(new_spell.then_some(now)) {
            self.forget_old(now);
            if self.starts.len() > SPELLS {
                self.starts.pop_front();
            }
            self.starts.push_back(start);
        }
        self.last_seen = Some(now);
    }

    /// Drops the starts older than `REMEMBER`.
    fn forget_old(&mut self, now: Instant) {
        let recent = |at: &Instant| now.saturating_duration_since(*at) <= REMEMBER;
        self.starts.retain(recent);
        self.resumed.retain(recent);
    }

    /// Whether writing seen now is too soon after the latest start to be the
    /// next spell: a commit that came late in the latest one.
    fn too_soon(&self, now: Instant) -> bool {
        match (self.starts.back(), self.period()) {
            (Some(&latest), Some(period)) => now.saturating_duration_since(latest) + GUARD < period,
            _ => false,
        }
    }

    /// The median interval between the recent starts (the lower one of an
    /// even count); `None` until an interval was seen.
    fn period(&self) -> Option<Duration> {
        let mut intervals: Vec<Duration> = self
            .starts
            .iter()
            .zip(self.starts.iter().skip(1))
            .filter(|&(earlier, later)| !self.resumed.iter().any(|r| earlier < r && r <= later))
            .map(|(earlier, later)| later.saturating_duration_since(*earlier))
            .collect();
        intervals.sort_unstable();
        intervals.get(intervals.len().checked_sub(1)? / 2).copied()
    }

    /// The next spell due, and the start whose phase projects it.
    fn due(&self) -> Option<(usize, Instant)> {
        let period = self.period()?.max(SETTLE);
        let after = (*self.starts.back()? + SETTLE).max(self.watched_from?);
        self.starts
            .iter()
            .enumerate()
            .map(|(index, &start)| {
                let periods = ((after - start).as_secs_f64() / period.as_secs_f64()).floor();
                (index, start + period * (periods as u32 + 1))
            })
            .min_by_key(|&(_, due)| due)
    }

    /// The writer is watched from `now` on (sessionfs was writing, or
    /// between forks, before).
    fn watch(&mut self, now: Instant) {
        if self
            .watched_until
            .is_some_and(|until| now.saturating_duration_since(until) > BREAK)
        {
            self.resumed.push_back(now);
        }
        self.watched_from = Some(now);
    }

    /// The writer is no longer watched from `now` on (sessionfs writes).
    fn unwatch(&mut self, now: Instant) {
        self.watched_until = Some(now);
    }

    /// A transaction of ours held the write lock for `held`.
    fn held(&mut self, held: Duration) {
        if self.holds.len() == HOLDS {
            self.holds.pop_front();
        }
        self.holds.push_back(held);
    }

    /// How long a transaction of ours is expected to hold the write lock:
    /// the second longest of the latest (one stall is not the machine's
    /// pace), at least `ROW_BUDGET`, at most `MAX_HOLD`. Its commit comes on
    /// top of its rows, and on a slow machine (writer_safety on a VM whose
    /// fresh pages cost more: every fork slower, and short holds of ours met
    /// Harness commits) it takes milliseconds.
    fn expected_hold(&self) -> Duration {
        let mut holds: Vec<Duration> = self.holds.iter().copied().collect();
        holds.sort_unstable();
        let typical = holds.iter().rev().nth(1).copied().unwrap_or(ROW_BUDGET);
        typical.clamp(ROW_BUDGET, MAX_HOLD)
    }

    /// Whether a transaction started now ends `GUARD` before the next spell.
    /// A spell overdue by more than `SETTLE` while watched did not come: its
    /// start is dropped, and the next projection is asked.
    fn has_room(&mut self, now: Instant) -> bool {
        self.forget_old(now);
        let hold = self.expected_hold();
        while let Some((start, due)) = self.due() {
            if now + hold + GUARD <= due {
                return true;
            }
            if now <= due + SETTLE {
                return false;
            }
            self.starts.remove(start);
        }
        true
    }
}

/// The nice value a fork's thread runs at while it paces, when the process
/// may raise its priority (`CAP_SYS_NICE`, or `RLIMIT_NICE`).
const BOOSTED_NICE: libc::c_int = -10;

/// The calling thread's raised priority, restored on drop. A transaction of
/// ours descheduled while it holds the write lock is what a Harness commit
/// meets on a busy machine (writer_safety with both cores kept busy: one
/// transaction of 1 ms took 25 ms); at a higher priority, running threads
/// of normal priority seldom preempt it. The thread mostly sleeps between
/// polls, so the boost takes little from anyone.
struct Boost {
    /// The thread and its nice value before, when it was raised.
    restore: Option<(libc::id_t, libc::c_int)>,
}

impl Boost {
    fn raise() -> Boost {
        // SAFETY: gettid has no preconditions.
        let thread = unsafe { libc::gettid() } as libc::id_t;
        // getpriority may return -1 as a nice value: errno tells an error.
        // SAFETY: the errno location is the calling thread's.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: plain system calls on the calling thread.
        let before = unsafe { libc::getpriority(libc::PRIO_PROCESS, thread) };
        let unknown = before == -1 && std::io::Error::last_os_error().raw_os_error() != Some(0);
        let raised = !unknown
            && before > BOOSTED_NICE
            // SAFETY: as above.
            && unsafe { libc::setpriority(libc::PRIO_PROCESS, thread, BOOSTED_NICE) } == 0;
        Boost {
            restore: raised.then_some((thread, before)),
        }
    }
}

impl Drop for Boost {
    fn drop(&mut self) {
        if let Some((thread, before)) = self.restore {
            // Lowering a priority needs no privilege.
            // SAFETY: a plain system call on the thread that raised it.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, thread, before) };
        }
    }
}

/// Has the allocator tidy its free lists now, before the timing of the
/// next transaction is judged, rather than inside it. glibc keeps small
/// freed blocks in "fast bins" and merges them all at the next request of
/// a large block: after a fork's events were freed, that was the first
/// page SQLite asked for inside a transaction, and the merge held the write
/// lock for 130 ms (writer_safety: `perf` showed `malloc_consolidate` for
/// the whole span of six refused Harness commits). A large request made
/// here does the merge outside the lock, and costs nothing when there is
/// nothing to merge.
fn settle_heap() {
    // Larger than glibc's small bins and its thread cache (1 KiB), so the
    // request reaches the merge.
    let block = std::hint::black_box(Vec::<u8>::with_capacity(64 << 10));
    drop(block);
}

/// Finds gaps between another writer's commits.
pub(super) struct Pacer<'a> {
    probe: &'a dyn Probe,
    /// When the current gap started.
    window: Instant,
    /// No other connection was open at the gap's start.
    alone: bool,
    /// The gap was found before `PATIENCE` ran out, so a transaction another
    /// process begins in it ends the gap (past it, one held open does not).
    heed_others: bool,
    /// No transaction was written in the current gap yet.
    opened: bool,
    /// The store's; a leaf lock, held only for one call on it.
    cadence: &'a Mutex<Cadence>,
    _boost: Boost,
}

impl<'a> Pacer<'a> {
    pub(super) fn new(probe: &'a dyn Probe, cadence: &'a Mutex<Cadence>) -> Pacer<'a> {
        Pacer {
            probe,
            window: Instant::now(),
            alone: false,
            heed_others: false,
            opened: false,
            cadence,
            _boost: Boost::raise(),
        }
    }

    /// Waits for the next gap (none when no other connection is open).
    pub(super) fn gap(&mut self) {
        let alone = self.probe.writer() == WriterPresence::Gone;
        self.open_gap(alone);
        self.opened = true;
    }

    /// Waits for a gap unless `alone`, and starts the window there.
    fn open_gap(&mut self, alone: bool) {
        settle_heap();
        self.alone = alone;
        self.heed_others = !alone && self.wait_for_gap();
        self.window = Instant::now();
        lock(self.cadence).unwatch(self.window);
    }

    /// Returns whether the gap was found before `PATIENCE` ran out.
    fn wait_for_gap(&mut self) -> bool {
        let started = Instant::now();
        lock(self.cadence).watch(started);
        let mut waiting = started;
        let mut seen = self.probe.wal_index_header();
        // The last poll that saw a commit, or a checkpoint still running.
        let mut last_commit: Option<Instant> = None;
        // Whoever asked for a gap may have just met the writer writing.
        let mut last_active = started;
        loop {
            thread::sleep(POLL);
            let now = Instant::now();
            let writing = self.probe.others_writing();
            let checkpointing = self.probe.others_checkpointing();
            let header = self.probe.wal_index_header();
            let committed = header != seen;
            if committed {
                seen = header;
            }
            // SQLite checkpoints in the commit call that filled the WAL, so
            // its writer commits again, when it has a flush to make, the
            // moment the checkpoint ends: the gap is timed from that end
            // (writer_safety: a flush's commit refused by a transaction of
            // ours begun right after the batch's commit and its 10 ms
            // checkpoint, SETTLE after the commit itself).
            // Nor is a checkpoint part of the writer's rhythm, which its
            // timer sets: only its writing and commits are.
            if committed || checkpointing {
                last_commit = Some(now);
                last_active = now;
            }
            if writing || committed {
                lock(self.cadence).saw_writing(now);
                last_active = now;
            }
            let waited = now - started;
            if waited >= PATIENCE + QUIET {
                // A writer whose spells leave no gap with room (slow commits
                // on a slow disk) or that never settles (commits closer than
                // SETTLE apart) holds the flush back no longer than this
                // either. The gap still comes LATE after its last activity,
                // not at once (writer_safety, commits of 12 ms: the flush's
                // commit right after its batch's was refused), and, while it
                // keeps a rhythm, before its next spell; for at most GIVE_UP.
                let clear = now - last_active >= LATE && lock(self.cadence).has_room(now);
                if clear || waited >= GIVE_UP {
                    return false;
                }
                continue;
            }
            if committed || checkpointing {
                continue;
            }
            // Past PATIENCE a transaction held open no longer holds the gap
            // back, but the gap still follows a commit (or a quiet spell):
            // writing at once, at any moment, could meet the writer's next
            // commit (writer_safety, with a reader polling every 3 ms).
            if waited < PATIENCE && self.probe.others_in_transaction() {
                // Reading, or about to write: its commit is yet to come.
                continue;
            }
            let patient = waited < PATIENCE;
            match last_commit {
                Some(at) if now - at > SETTLE + LATE || !lock(self.cadence).has_room(now) => {
                    // Too late in this gap (a reader kept us waiting, or the
                    // writer's spell took most of it): the next commit starts
                    // the next one.
                    (last_commit, waiting) = (None, now);
                }
                Some(at) if now - at >= SETTLE => return patient,
                None if now - waiting >= QUIET && lock(self.cadence).has_room(now) => {
                    return patient;
                }
                _ => {}
            }
        }
    }

    /// Whether the current gap has room for another transaction. The first
    /// one of a gap always has. The next not once the writer's next spell is
    /// near, nor once another process is inside a transaction (unless one
    /// held open past `PATIENCE` let the gap start). Alone, the probe is
    /// asked again before each one, and at least every `ALONE_WINDOW`: a
    /// connection seen now ends the run of transactions, so the next waits
    /// for a gap between its commits.
    pub(super) fn in_window(&mut self) -> bool {
        settle_heap();
        if self.alone && self.probe.writer() != WriterPresence::Gone {
            self.alone = false;
            return false;
        }
        if std::mem::take(&mut self.opened) {
            return true;
        }
        if !self.alone {
            // A writer that began a transaction in the gap writes next: our
            // commit would make its write fail.
            let now = Instant::now();
            if !lock(self.cadence).has_room(now)
                || (self.heed_others && self.probe.others_in_transaction())
            {
                return false;
            }
        }
        let limit = if self.alone { ALONE_WINDOW } else { WINDOW };
        self.window.elapsed() < limit
    }

    /// Our `BEGIN IMMEDIATE` found another connection's write lock held: it
    /// is writing, in a spell not seen coming. Waits for the gap after it,
    /// whose first transaction is the one refused; even when the probe says
    /// no other connection is open, as the lock says otherwise.
    pub(super) fn refused(&mut self) {
        lock(self.cadence).saw_writing(Instant::now());
        self.open_gap(false);
        self.opened = false;
    }

    /// A transaction of ours held the write lock for `held` (its `BEGIN
    /// IMMEDIATE` to its commit): the gaps that follow leave room for as long.
    /// Alone, its rows had a longer budget: it says nothing of a gap's.
    pub(super) fn held(&self, held: Duration) {
        if !self.alone {
            lock(self.cadence).held(held);
        }
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

    /// One commit of the scripted writer: when in its period it takes the
    /// write lock, and for how long.
    #[derive(Clone, Copy)]
    struct Write {
        at: Duration,
        holds: Duration,
    }

    const fn write(at_ms: u64, holds_ms: u64) -> Write {
        Write {
            at: Duration::from_millis(at_ms),
            holds: Duration::from_millis(holds_ms),
        }
    }

    /// Another connection on a timer: every `every` from its creation on
    /// (never, for `None`) it makes the commits of its period's entry in
    /// `periods` (taken in turn; one instant commit at the period's start by
    /// default), and is inside a transaction or not besides.
    struct Scripted {
        start: Instant,
        every: Option<Duration>,
        periods: Vec<Vec<Write>>,
        in_transaction: bool,
        /// What the locks say of the writer's connection.
        presence: WriterPresence,
        /// How long the writer checkpoints after each commit.
        checkpoint: Duration,
    }

    impl Scripted {
        fn new(every: Option<Duration>, in_transaction: bool) -> Scripted {
            Scripted {
                start: Instant::now(),
                every,
                periods: vec![vec![write(0, 0)]],
                in_transaction,
                presence: WriterPresence::Connected,
                checkpoint: Duration::ZERO,
            }
        }

        fn with_periods(mut self, periods: &[&[Write]]) -> Scripted {
            self.periods = periods.iter().map(|writes| writes.to_vec()).collect();
            self
        }

        fn every(&self) -> Duration {
            self.every.expect("a committing writer")
        }

        /// The current period's number and how far into it we are.
        fn now(&self) -> (usize, Duration) {
            let every = self.every().as_nanos();
            let elapsed = self.start.elapsed().as_nanos();
            (
                (elapsed / every) as usize,
                Duration::from_nanos((elapsed % every) as u64),
            )
        }

        fn writes(&self, period: usize) -> &[Write] {
            &self.periods[period % self.periods.len()]
        }

        /// How many commits were made by now.
        fn commits(&self) -> usize {
            if self.every.is_none() {
                return 0;
            }
            let (number, into) = self.now();
            let earlier: usize = (0..number).map(|period| self.writes(period).len()).sum();
            let now = self.writes(number);
            earlier + now.iter().filter(|w| w.at + w.holds <= into).count()
        }

        /// How long ago the last commit was.
        fn since_commit(&self) -> Duration {
            let (number, into) = self.now();
            let done = self.writes(number).iter().map(|w| w.at + w.holds);
            match done.filter(|&end| end <= into).max() {
                Some(end) => into - end,
                None => {
                    let previous = self.writes(number.saturating_sub(1));
                    let end = previous.iter().map(|w| w.at + w.holds).max().unwrap();
                    into + self.every() - end
                }
            }
        }

        /// How long until the writer next holds the write lock.
        fn until_next_write(&self) -> Duration {
            let (number, into) = self.now();
            let writes = self.writes(number);
            if writes.iter().any(|w| w.at <= into && into < w.at + w.holds) {
                return Duration::ZERO;
            }
            match writes.iter().find(|w| w.at > into) {
                Some(next) => next.at - into,
                None => self.every() - into + self.writes(number + 1)[0].at,
            }
        }
    }

    impl Probe for Scripted {
        fn writer(&self) -> WriterPresence {
            self.presence
        }
        fn wal_index_header(&self) -> Option<[u8; 48]> {
            let mut header = [0; 48];
            header[..8].copy_from_slice(&(self.commits() as u64).to_le_bytes());
            Some(header)
        }
        fn others_in_transaction(&self) -> bool {
            self.in_transaction || self.others_writing() || self.others_checkpointing()
        }
        fn others_writing(&self) -> bool {
            self.every.is_some() && self.until_next_write().is_zero()
        }
        fn others_checkpointing(&self) -> bool {
            self.every.is_some() && self.since_commit() < self.checkpoint
        }
    }

    /// How long `gap` waited.
    fn waited(probe: &Scripted) -> Duration {
        let started = Instant::now();
        Pacer::new(probe, &Mutex::default()).gap();
        started.elapsed()
    }

    /// Writes beside `probe` for `run` as the store does, each transaction
    /// taking `ROW_BUDGET`; asserts that none begins less than `ROW_BUDGET`
    /// before the writer's next write, and returns how many were written.
    fn write_beside(probe: &Scripted, run: Duration) -> usize {
        let cadence = Mutex::default();
        let mut pacer = Pacer::new(probe, &cadence);
        let (started, mut transactions) = (Instant::now(), 0);
        while started.elapsed() < run {
            pacer.gap();
            while pacer.in_window() {
                let until = probe.until_next_write();
                assert!(
                    until >= ROW_BUDGET,
                    "transaction {transactions} began {until:?} before the writer's next write"
                );
                thread::sleep(ROW_BUDGET);
                transactions += 1;
            }
        }
        transactions
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
    fn spells_that_leave_no_room_still_give_a_gap_clear_of_their_commits() {
        // Spells of 12 ms every 25 ms: after SETTLE, no gap has room before
        // the next spell; past PATIENCE + QUIET the gap is taken anyway, but
        // not right after a commit, where a flush's commit may follow.
        let probe =
            Scripted::new(Some(Duration::from_millis(25)), false).with_periods(&[&[write(0, 12)]]);
        let cadence = Mutex::default();
        let mut past_patience = 0;
        for _ in 0..4 {
            let started = Instant::now();
            Pacer::new(&probe, &cadence).gap();
            let waited = started.elapsed();
            assert!(waited < GIVE_UP, "{waited:?}");
            past_patience += usize::from(waited >= PATIENCE + QUIET);
            let since = probe.since_commit();
            assert!(since >= LATE, "written {since:?} after a commit");
        }
        assert!(
            past_patience >= 2,
            "gaps had room once the rhythm was known"
        );
    }

    #[test]
    fn a_gap_starts_settle_after_the_checkpoint_that_followed_a_commit() {
        // A writer that checkpoints for 9 ms after each commit: its next
        // commit may come the moment the checkpoint ends, so the gap starts
        // SETTLE after that, not as soon as it ended (SETTLE after the
        // commit). Measured from the last poll that saw the checkpoint,
        // which on a loaded machine wakes late: half SETTLE is the margin.
        let mut probe = Scripted::new(Some(Duration::from_millis(40)), false);
        probe.checkpoint = Duration::from_millis(9);
        for _ in 0..3 {
            waited(&probe);
            let since = probe.since_commit();
            assert!(
                since >= probe.checkpoint + SETTLE / 2,
                "written {since:?} after a commit"
            );
        }
    }

    #[test]
    fn an_idle_writer_gives_a_gap_after_a_quiet_spell() {
        let probe = Scripted::new(None, false);
        let waited = waited(&probe);
        assert!(waited >= QUIET, "{waited:?}");
        // Not the hard bound's return.
        assert!(waited < PATIENCE + QUIET, "{waited:?}");
    }

    /// A writer on a 25 ms timer that commits once (1 ms) at each tick,
    /// and makes the commits `fourth` at every fourth.
    fn every_fourth_tick(fourth: &[Write]) -> Scripted {
        let tick: &[Write] = &[write(0, 1)];
        Scripted::new(Some(Duration::from_millis(25)), false)
            .with_periods(&[tick, tick, tick, fourth])
    }

    #[test]
    fn a_gap_ends_before_the_writers_next_spell_even_after_a_long_one() {
        // A writer on a 25 ms timer whose every fourth spell (a batch, then a
        // flush) takes 15 ms: the gap after that spell starts 23 ms into the
        // period, where a 4 ms window would meet the next spell (seen in
        // writer_safety under load as failed commits right after flushes).
        let probe = every_fourth_tick(&[write(0, 15)]);
        let transactions = write_beside(&probe, Duration::from_secs(2));
        assert!(transactions >= 40, "{transactions} transactions in 2 s");
    }

    #[test]
    fn a_late_commit_in_a_spell_does_not_move_the_writers_phase() {
        // Every fourth period the flush's commit comes 16 ms after the
        // batch's (its thread was descheduled between the two): seen as a
        // spell of its own, it must neither put off the next spell due (seen
        // in writer_safety under load: a gap placed on the writer's next
        // tick) nor, once refuted, hold later gaps back.
        let probe = every_fourth_tick(&[write(0, 1), write(16, 1)]);
        let transactions = write_beside(&probe, Duration::from_secs(2));
        assert!(transactions >= 80, "{transactions} transactions in 2 s");
    }

    /// A cadence watched from now on that saw spells start `spells` ms from
    /// now, each writing for `lasting` ms; and the instant `ms` from now.
    fn watched(spells: &[u64], lasting: u64) -> (Cadence, impl Fn(u64) -> Instant) {
        let origin = Instant::now();
        let at = move |ms: u64| origin + Duration::from_millis(ms);
        let mut cadence = Cadence::default();
        cadence.watch(origin);
        for &spell in spells {
            for ms in spell..=spell + lasting {
                cadence.saw_writing(at(ms));
            }
        }
        (cadence, at)
    }

    #[test]
    fn a_spell_that_runs_into_the_next_keeps_the_writers_phase() {
        // Four spells 25 ms apart, then one whose slow commits run on past
        // the next one's due (100 ms to 126 ms): the spell due at 125 came
        // inside it, so the one at 150 is still expected.
        let (mut cadence, at) = watched(&[0, 25, 50, 75], 1);
        for ms in 100..=126 {
            cadence.saw_writing(at(ms));
        }
        assert!(cadence.has_room(at(134)));
        assert!(!cadence.has_room(at(145)), "the spell due at 150 is near");
        assert!(cadence.has_room(at(160)));
    }

    #[test]
    fn gaps_leave_room_for_transactions_as_long_as_ours_were() {
        // Spells every 25 ms; 9 ms before the next is due there is room for
        // a transaction of ROW_BUDGET, not for one that holds the lock 5 ms.
        let (mut cadence, at) = watched(&[0, 25, 50, 75], 0);
        assert!(cadence.has_room(at(91)));
        // One stall is not the pace.
        cadence.held(Duration::from_millis(40));
        assert!(cadence.has_room(at(91)));
        for _ in 0..HOLDS {
            cadence.held(Duration::from_millis(5));
        }
        assert!(
            !cadence.has_room(at(91)),
            "a 5 ms hold would meet the spell"
        );
        assert!(cadence.has_room(at(89)));
        // Stalls alone are expected no longer than MAX_HOLD.
        for _ in 0..HOLDS {
            cadence.held(Duration::from_millis(40));
        }
        assert_eq!(cadence.expected_hold(), MAX_HOLD);
    }

    #[test]
    fn a_refused_begin_waits_for_the_gap_after_the_writers_commit() {
        // A writer holding the lock 5 ms at each 25 ms tick, which the
        // probe misses (it says no connection is open): a BEGIN refused in
        // its spell is retried SETTLE after its commit, not as soon as the
        // lock is free (a flush's commit may follow the batch's then).
        let mut probe =
            Scripted::new(Some(Duration::from_millis(25)), false).with_periods(&[&[write(0, 5)]]);
        probe.presence = WriterPresence::Gone;
        let cadence = Mutex::default();
        let mut pacer = Pacer::new(&probe, &cadence);
        for _ in 0..3 {
            while !probe.others_writing() {
                thread::sleep(POLL);
            }
            pacer.refused();
            assert!(!probe.others_writing(), "retried in the writer's spell");
            let since = probe.since_commit();
            assert!(since >= SETTLE, "retried {since:?} after its commit");
        }
    }

    #[test]
    fn a_pacer_raises_its_threads_priority_while_it_lives_when_allowed() {
        // SAFETY: plain system calls on the calling thread.
        let nice =
            || unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
        let before = nice();
        let probe = Scripted::new(None, false);
        let cadence = Mutex::default();
        let pacer = Pacer::new(&probe, &cadence);
        // SAFETY: as above.
        if unsafe { libc::geteuid() } == 0 {
            assert_eq!(nice(), BOOSTED_NICE.min(before));
        } else {
            assert!(nice() <= before);
        }
        drop(pacer);
        assert_eq!(nice(), before, "restored");
    }

    #[test]
    fn an_interval_across_a_break_in_watching_is_no_period() {
        // A spell seen at 0, then nothing watched (a fork ended) until
        // 975 ms, then spells every 25 ms: the rhythm learnt is 25 ms, not
        // the 975 ms across the break nor a multiple of 25 ms.
        let (mut cadence, at) = watched(&[0], 0);
        cadence.unwatch(at(1));
        cadence.watch(at(975));
        for spell in (975..1300).step_by(25) {
            cadence.saw_writing(at(spell));
            cadence.has_room(at(spell + 10));
        }
        assert_eq!(cadence.period(), Some(Duration::from_millis(25)));
    }

    #[test]
    fn a_spell_due_while_unwatched_is_not_taken_for_skipped() {
        // Four spells 25 ms apart, then no watching (a fork ended) until
        // 400 ms: the spells due meanwhile say nothing, and the one due at
        // 425 is still expected.
        let (mut cadence, at) = watched(&[0, 25, 50, 75], 0);
        cadence.watch(at(400));
        assert!(cadence.has_room(at(410)));
        assert!(!cadence.has_room(at(420)), "the spell due at 425 is near");
    }
}
