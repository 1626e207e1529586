//! Write-behind for the sessions sessionfs writes (fork children), shaped like the
//! Harness's controller (spec §12.1): the first pending write starts one fixed
//! window (200 ms by default), later ones join it without moving the deadline,
//! and when it closes everything pending is written durably in one go. `flush`
//! writes everything pending now (or one session's lineage: it and every fork
//! made from it or its descendants) and returns only when it is durable.
//! After writing, the store is asked for a checkpoint that never waits on the
//! Harness (SQLite: a PASSIVE WAL checkpoint), so a copy of the database file
//! alone holds what sessionfs wrote whenever SQLite allowed it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use crate::error::FlushError;
use crate::json::JsonMap;
use crate::model::header::SessionHeader;
use crate::render::format_time;
use crate::store::memory::MemoryStore;
use crate::store::{Backend, Checkpoint, SessionKey};
use crate::sync;

/// Called when a pending session became durable, with its key in the store.
pub type DurableHook = Box<dyn Fn(&str, SessionKey) + Send + Sync>;

struct Pending {
    header: SessionHeader,
    events: Vec<JsonMap>,
}

/// A session taken from the queue and being written: still pending for
/// `status`, `is_pending` and a flush's lineage until it is durable.
struct InFlight {
    id: String,
    events: usize,
    parent: Option<String>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Pending>,
    deadline: Option<Instant>,
    /// The batch being written with the lock released; empty when none is.
    in_flight: Vec<InFlight>,
    /// After a background failure automatic retries pause until the next
    /// submission or an explicit flush, as the Harness does.
    paused: bool,
    shutdown: bool,
    /// Each session made durable here: its last seq and its parent.
    durable: BTreeMap<String, (u64, Option<String>)>,
    last_flush: Option<(SystemTime, Result<String, String>)>,
    last_checkpoint: Option<(SystemTime, Result<Checkpoint, String>)>,
    last_error: Option<String>,
}

/// What a flush covers.
#[derive(Clone, Copy)]
pub enum FlushScope<'a> {
    /// Every pending session (the root `flush`).
    Everything,
    /// One session and its descendants: pending forks made from it, from its
    /// children, and so on down. `parent_of` names the parent of a session that
    /// is not pending here (one the store holds), so lineage through sessions
    /// the Harness wrote is followed too.
    Lineage {
        /// The session whose lineage is flushed.
        session: &'a str,
        /// The parent of a session not pending here.
        parent_of: &'a dyn Fn(&str) -> Option<String>,
    },
}

/// The write-behind of fork children (see the module doc).
pub struct Writeback {
    store: Arc<dyn Backend>,
    memory: Arc<MemoryStore>,
    window: Duration,
    state: Mutex<State>,
    wake: Condvar,
    on_durable: OnceLock<DurableHook>,
}

impl Writeback {
    /// Write-behind into `store`, of children served from `memory` until durable.
    pub fn new(
        store: Arc<dyn Backend>,
        memory: Arc<MemoryStore>,
        window: Duration,
    ) -> Arc<Writeback> {
        Arc::new(Writeback {
            store,
            memory,
            window,
            state: Mutex::default(),
            wake: Condvar::new(),
            on_durable: OnceLock::new(),
        })
    }

    /// Sets what is called when a pending session became durable.
    pub fn set_durable_hook(&self, hook: DurableHook) {
        let _ = self.on_durable.set(hook);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        sync::lock(&self.state)
    }

    /// Accepts a new session, which the caller already serves from the memory
    /// store: it is written when the window closes (or at the next flush); with
    /// no window, before this returns. Once durable it leaves the memory store.
    pub fn submit(&self, header: SessionHeader, events: Vec<JsonMap>) {
        let mut state = self.lock();
        state.paused = false;
        // A fixed window from the first pending write; later ones join it.
        if state.deadline.is_none() {
            state.deadline = Some(Instant::now() + self.window);
        }
        state.queue.push_back(Pending { header, events });
        if self.window.is_zero() {
            // No write-behind: written before the submitting request returns.
            state.deadline = None;
            let mut state = self.wait_for_writes(state);
            let batch: Vec<Pending> = state.queue.drain(..).collect();
            let (state, outcome) = self.write(state, batch, true);
            if outcome.written > 0 {
                drop(self.checkpoint(state));
            }
            return;
        }
        self.wake.notify_all();
    }

    /// The background loop: waits for the window to close, then writes.
    pub fn run(self: &Arc<Self>) {
        let mut state = self.lock();
        loop {
            if state.shutdown {
                return;
            }
            match state.deadline {
                Some(deadline) if state.in_flight.is_empty() && !state.paused => {
                    let now = Instant::now();
                    if now >= deadline {
                        state.deadline = None;
                        let batch: Vec<Pending> = state.queue.drain(..).collect();
                        let (after, outcome) = self.write(state, batch, true);
                        state = after;
                        if outcome.written > 0 {
                            state = self.checkpoint(state);
                        }
                        continue;
                    }
                    state = sync::wait_timeout(&self.wake, state, deadline - now);
                }
                _ => state = sync::wait(&self.wake, state),
            }
        }
    }

    /// Writes a batch with the lock released; failed writes go back to the front
    /// of the queue in order.
    fn write<'a>(
        &'a self,
        mut state: MutexGuard<'a, State>,
        batch: Vec<Pending>,
        background: bool,
    ) -> (MutexGuard<'a, State>, WriteOutcome) {
        if batch.is_empty() {
            return (state, WriteOutcome::default());
        }
        state.in_flight = batch
            .iter()
            .map(|p| InFlight {
                id: p.header.id.clone(),
                events: p.events.len(),
                parent: p.header.parent_session.clone(),
            })
            .collect();
        drop(state);
        let mut failed = Vec::new();
        let mut first_error = None;
        let mut written = Vec::new();
        for pending in batch {
            match self.store.create(&pending.header, &pending.events) {
                Ok(key) => written.push((pending.header, pending.events.len() as u64, key)),
                Err(source) => {
                    let error = FlushError {
                        session: pending.header.id.clone(),
                        source,
                    };
                    log::error!("{error}");
                    first_error.get_or_insert(error);
                    failed.push(pending);
                }
            }
        }
        let count = written.len();
        for (header, count, key) in written {
            if let Some(hook) = self.on_durable.get() {
                hook(&header.id, key);
            }
            self.memory.remove(&header.id);
            let mut state = self.lock();
            state.in_flight.retain(|f| f.id != header.id);
            state
                .durable
                .insert(header.id, (count.saturating_sub(1), header.parent_session));
        }
        let mut state = self.lock();
        state.in_flight.clear();
        for pending in failed.into_iter().rev() {
            state.queue.push_front(pending);
        }
        if let Some(error) = &first_error {
            state.last_error = Some(error.to_string());
            state.paused |= background;
        }
        self.wake.notify_all();
        (
            state,
            WriteOutcome {
                written: count,
                error: first_error,
            },
        )
    }

    /// Asks the store to checkpoint (with the lock released) and records the answer.
    fn checkpoint<'a>(&'a self, state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        drop(state);
        let outcome = self.store.checkpoint().map_err(|e| {
            log::warn!("checkpoint after a flush failed: {e}");
            e.to_string()
        });
        let mut state = self.lock();
        state.last_checkpoint = Some((SystemTime::now(), outcome));
        state
    }

    fn wait_for_writes<'a>(&'a self, mut state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        while !state.in_flight.is_empty() {
            state = sync::wait(&self.wake, state);
        }
        state
    }

    /// The ids `scope` covers among the sessions known here (pending or made
    /// durable here); `None` for everything. The parent chain is walked with the
    /// lock released, since `parent_of` may take the caller's own locks.
    fn covered(&self, scope: FlushScope) -> Option<BTreeSet<String>> {
        let FlushScope::Lineage { session, parent_of } = scope else {
            return None;
        };
        let parents: BTreeMap<String, Option<String>> = {
            let state = self.lock();
            let durable = state
                .durable
                .iter()
                .map(|(id, (_, parent))| (id.clone(), parent.clone()));
            let pending = state
                .queue
                .iter()
                .map(|p| (p.header.id.clone(), p.header.parent_session.clone()));
            let in_flight = state
                .in_flight
                .iter()
                .map(|f| (f.id.clone(), f.parent.clone()));
            durable.chain(pending).chain(in_flight).collect()
        };
        let descends = |id: &str| {
            let mut seen = BTreeSet::new();
            let mut current = id.to_string();
            loop {
                if current == session {
                    return true;
                }
                // A cycle of headers naming each other ends the walk.
                if !seen.insert(current.clone()) {
                    return false;
                }
                let parent = match parents.get(&current) {
                    Some(parent) => parent.clone(),
                    None => parent_of(&current),
                };
                match parent {
                    Some(parent) => current = parent,
                    None => return false,
                }
            }
        };
        Some(parents.keys().filter(|id| descends(id)).cloned().collect())
    }

    /// Writes everything pending in `scope` and returns when it is durable, then
    /// checkpoints the store. `Err` carries the first failure, after every write
    /// was tried.
    pub fn flush(&self, scope: FlushScope) -> Result<String, FlushError> {
        let covered = {
            let state = self.wait_for_writes(self.lock());
            drop(state);
            self.covered(scope)
        };
        let mut state = self.wait_for_writes(self.lock());
        let (batch, rest): (Vec<Pending>, Vec<Pending>) = state.queue.drain(..).partition(|p| {
            covered
                .as_ref()
                .is_none_or(|ids| ids.contains(&p.header.id))
        });
        state.queue.extend(rest);
        if state.queue.is_empty() {
            state.deadline = None;
        }
        let count = batch.len();
        let (state, outcome) = self.write(state, batch, false);
        let mut state = self.checkpoint(state);
        let result = match outcome.error {
            Some(error) => Err(error),
            None if count == 0 => Ok(
                "nothing was pending; everything sessionfs wrote was already durable".to_string(),
            ),
            None => Ok(format!(
                "{count} pending session(s) written and made durable"
            )),
        };
        let shown = result
            .as_ref()
            .map(String::clone)
            .map_err(|e| e.to_string());
        state.last_flush = Some((SystemTime::now(), shown));
        result
    }

    /// Stops the background loop after writing what is pending; returns what could
    /// not be written.
    pub fn shutdown(&self) -> Vec<String> {
        let _ = self.flush(FlushScope::Everything);
        let mut state = self.lock();
        state.shutdown = true;
        self.wake.notify_all();
        for pending in &state.queue {
            self.store.release(&pending.header);
        }
        state.queue.iter().map(|p| p.header.id.clone()).collect()
    }

    /// True while `id` is accepted but not durable yet.
    pub fn is_pending(&self, id: &str) -> bool {
        let state = self.lock();
        state.queue.iter().any(|p| p.header.id == id) || state.in_flight.iter().any(|f| f.id == id)
    }

    /// The status shown by `cat flush`: what a flush of `scope` would write, what
    /// was made durable, and how the last flush and checkpoint went.
    pub fn status(&self, scope: FlushScope) -> String {
        let covered = self.covered(scope);
        let in_scope = |id: &str| covered.as_ref().is_none_or(|ids| ids.contains(id));
        let state = self.lock();
        // Oldest first: the batch being written, then the queue.
        let pending: Vec<(&str, usize)> = state
            .in_flight
            .iter()
            .map(|f| (f.id.as_str(), f.events))
            .chain(
                state
                    .queue
                    .iter()
                    .map(|p| (p.header.id.as_str(), p.events.len())),
            )
            .filter(|(id, _)| in_scope(id))
            .collect();
        let mut out = format!(
            "pending: {} session(s), {} event(s)\n",
            pending.len(),
            pending.iter().map(|(_, events)| events).sum::<usize>()
        );
        for (id, events) in &pending {
            out.push_str(&format!("pending-session: {id} ({events} events)\n"));
        }
        for (id, (seq, _)) in state.durable.iter().filter(|(id, _)| in_scope(id)) {
            out.push_str(&format!("durable: {id} through seq {seq}\n"));
        }
        match &state.last_flush {
            None => out.push_str("last-flush: none\n"),
            Some((when, Ok(what))) => {
                out.push_str(&format!("last-flush: {} ok: {what}\n", shown_time(*when)))
            }
            Some((when, Err(why))) => out.push_str(&format!(
                "last-flush: {} FAILED: {why}\n",
                shown_time(*when)
            )),
        }
        match &state.last_checkpoint {
            None => out.push_str("last-checkpoint: none\n"),
            Some((when, outcome)) => out.push_str(&format!(
                "last-checkpoint: {} {}\n",
                shown_time(*when),
                describe_checkpoint(outcome)
            )),
        }
        if let Some(error) = &state.last_error {
            out.push_str(&format!("last-error: {error}\n"));
        }
        out.push_str(
            "note: sessionfs writes only what it creates (fork children); a flush here cannot make a running Harness flush its own buffers.\n",
        );
        out
    }
}

/// What one batch of writes did.
#[derive(Default)]
struct WriteOutcome {
    written: usize,
    error: Option<FlushError>,
}

fn shown_time(when: SystemTime) -> String {
    let ms = when
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as i64;
    format_time(ms)
}

/// One `last-checkpoint:` status, starting with a word a script can test.
fn describe_checkpoint(outcome: &Result<Checkpoint, String>) -> String {
    match outcome {
        Ok(Checkpoint::NotNeeded) => {
            "not-needed: the store keeps no write-ahead log; writes land in its files".into()
        }
        Ok(Checkpoint::Passive { frames, copied }) if copied >= frames => format!(
            "complete: all {frames} WAL frame(s) are in the database file"
        ),
        Ok(Checkpoint::Passive { frames, copied }) => format!(
            "incomplete: {copied} of {frames} WAL frame(s) are in the database file; another connection still reads or writes the rest (copy the database with its -wal file, or use sqlite3 .backup)"
        ),
        Ok(Checkpoint::Busy) => "incomplete: another connection was checkpointing; copy the database with its -wal file, or use sqlite3 .backup".into(),
        Err(why) => format!("FAILED: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Catalog;

    fn header(id: &str) -> SessionHeader {
        SessionHeader::new(id, 1)
    }

    #[test]
    fn the_window_closes_and_writes_everything_pending() {
        let store = Arc::new(MemoryStore::default());
        let writeback = Writeback::new(
            store.clone(),
            Arc::new(MemoryStore::default()),
            Duration::from_millis(50),
        );
        let runner = writeback.clone();
        let thread = std::thread::spawn(move || runner.run());
        writeback.submit(header("a"), Vec::new());
        writeback.submit(header("b"), Vec::new());
        assert!(writeback.is_pending("a"));
        let start = Instant::now();
        // A session stays pending until it is durable, in the store.
        while writeback.is_pending("a") || writeback.is_pending("b") {
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "the window never closed"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(store.contains("a") && store.contains("b"));
        assert_eq!(
            writeback.flush(FlushScope::Everything).ok().as_deref(),
            Some("nothing was pending; everything sessionfs wrote was already durable")
        );
        assert!(writeback.shutdown().is_empty());
        thread.join().unwrap();
    }

    #[test]
    fn a_session_being_written_is_still_pending_until_durable() {
        let writeback = Writeback::new(
            Arc::new(MemoryStore::default()),
            Arc::new(MemoryStore::default()),
            Duration::from_secs(60),
        );
        // The hook runs once a session's write returned and before it is
        // recorded as durable: what `cat flush` shows at that moment.
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (observer, record) = (Arc::downgrade(&writeback), seen.clone());
        writeback.set_durable_hook(Box::new(move |id, _| {
            let writeback = observer.upgrade().expect("writeback");
            let status = writeback.status(FlushScope::Everything);
            record
                .lock()
                .unwrap()
                .push((id.to_string(), writeback.is_pending(id), status));
        }));
        writeback.submit(header("a"), vec![JsonMap::new(); 3]);
        writeback.submit(header("b"), Vec::new());
        assert!(writeback.flush(FlushScope::Everything).is_ok());
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2);
        for (id, pending, status) in seen.iter() {
            assert!(*pending, "{id} was not pending while being written");
            assert!(
                status.contains(&format!("pending-session: {id} (")),
                "{id} vanished from the status while being written:\n{status}"
            );
        }
        assert!(seen[0].2.starts_with("pending: 2 session(s), 3 event(s)\n"));
        let after = writeback.status(FlushScope::Everything);
        assert!(after.starts_with("pending: 0 session(s)"), "{after}");
        assert!(after.contains("durable: a through seq 2\n"), "{after}");
    }

    fn child(id: &str, parent: &str) -> SessionHeader {
        SessionHeader {
            parent_session: Some(parent.into()),
            ..header(id)
        }
    }

    #[test]
    fn a_session_flush_covers_its_descendants_and_nothing_else() {
        let store = Arc::new(MemoryStore::default());
        let writeback = Writeback::new(
            store.clone(),
            Arc::new(MemoryStore::default()),
            Duration::from_secs(60),
        );
        // root -> a -> b (both pending); root -> stored -> c (the middle one the
        // store holds); other -> d; e and f name each other.
        writeback.submit(child("a", "root"), Vec::new());
        writeback.submit(child("b", "a"), Vec::new());
        writeback.submit(child("c", "stored"), Vec::new());
        writeback.submit(child("d", "other"), Vec::new());
        writeback.submit(child("e", "f"), Vec::new());
        writeback.submit(child("f", "e"), Vec::new());
        let parent_of = |id: &str| (id == "stored").then(|| "root".to_string());
        let root = FlushScope::Lineage {
            session: "root",
            parent_of: &parent_of,
        };
        assert!(writeback.status(root).starts_with("pending: 3 session(s)"));
        assert_eq!(
            writeback.flush(root).ok().as_deref(),
            Some("3 pending session(s) written and made durable")
        );
        for id in ["a", "b", "c"] {
            assert!(store.contains(id) && !writeback.is_pending(id), "{id}");
        }
        for id in ["d", "e", "f"] {
            assert!(!store.contains(id) && writeback.is_pending(id), "{id}");
        }
        let status = writeback.status(root);
        assert!(status.starts_with("pending: 0 session(s)"), "{status}");
        assert!(status.contains("durable: b through seq 0"), "{status}");
        assert!(
            status.contains("last-checkpoint: ") && status.contains(" not-needed: "),
            "{status}"
        );
        // A child's flush does not reach up to its parent.
        let e = FlushScope::Lineage {
            session: "e",
            parent_of: &|_| None,
        };
        assert!(writeback.flush(e).is_ok());
        assert!(store.contains("e") && store.contains("f") && !store.contains("d"));
        assert!(writeback.flush(FlushScope::Everything).is_ok());
        assert!(store.contains("d"));
    }
}
