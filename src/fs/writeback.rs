//! Write-behind for the sessions sessionfs writes (fork children), shaped like the
//! Harness's controller (spec §12.1): the first pending write starts one fixed
//! window (200 ms by default), later ones join it without moving the deadline,
//! and when it closes everything pending is written durably in one go. `flush`
//! writes everything pending now and returns only when it is durable.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use crate::json::JsonMap;
use crate::model::header::SessionHeader;
use crate::render::format_time;
use crate::store::memory::MemoryStore;
use crate::store::{Backend, SessionKey};

/// Called when a pending session became durable, with its key in the store.
pub type DurableHook = Box<dyn Fn(&str, SessionKey) + Send + Sync>;

struct Pending {
    header: SessionHeader,
    events: Vec<JsonMap>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Pending>,
    deadline: Option<Instant>,
    writing: bool,
    /// After a background failure automatic retries pause until the next
    /// submission or an explicit flush, as the Harness does.
    paused: bool,
    shutdown: bool,
    durable: BTreeMap<String, u64>,
    last_flush: Option<(SystemTime, Result<String, String>)>,
    last_error: Option<String>,
}

pub struct Writeback {
    store: Arc<dyn Backend>,
    memory: Arc<MemoryStore>,
    window: Duration,
    state: Mutex<State>,
    wake: Condvar,
    on_durable: OnceLock<DurableHook>,
}

impl Writeback {
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

    pub fn set_durable_hook(&self, hook: DurableHook) {
        let _ = self.on_durable.set(hook);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Accepts a new session: it is served from memory at once and written when
    /// the window closes (or at the next flush).
    pub fn submit(&self, header: SessionHeader, events: Vec<JsonMap>) {
        self.memory.insert(header.clone(), events.clone());
        let mut state = self.lock();
        state.paused = false;
        // A fixed window from the first pending write; later ones join it.
        if state.deadline.is_none() {
            state.deadline = Some(Instant::now() + self.window);
        }
        state.queue.push_back(Pending { header, events });
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
                Some(deadline) if !state.writing && !state.paused => {
                    let now = Instant::now();
                    if now >= deadline {
                        state.deadline = None;
                        let batch: Vec<Pending> = state.queue.drain(..).collect();
                        state = self.write(state, batch, true).0;
                        continue;
                    }
                    state = self
                        .wake
                        .wait_timeout(state, deadline - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                _ => state = self.wake.wait(state).unwrap_or_else(|p| p.into_inner()),
            }
        }
    }

    /// Writes a batch with the lock released; failed writes go back to the front
    /// of the queue in order. Returns the first error.
    fn write<'a>(
        &'a self,
        mut state: MutexGuard<'a, State>,
        batch: Vec<Pending>,
        background: bool,
    ) -> (MutexGuard<'a, State>, Option<String>) {
        if batch.is_empty() {
            return (state, None);
        }
        state.writing = true;
        drop(state);
        let mut failed = Vec::new();
        let mut first_error = None;
        let mut written = Vec::new();
        for pending in batch {
            match self.store.create(&pending.header, &pending.events) {
                Ok(key) => {
                    written.push((pending.header.id.clone(), pending.events.len() as u64, key))
                }
                Err(e) => {
                    let message = format!("writing session {:?} failed: {e}", pending.header.id);
                    log::error!("{message}");
                    first_error.get_or_insert(message);
                    failed.push(pending);
                }
            }
        }
        for (id, count, key) in written {
            if let Some(hook) = self.on_durable.get() {
                hook(&id, key);
            }
            self.memory.remove(&id);
            let mut state = self.lock();
            state.durable.insert(id, count.saturating_sub(1));
        }
        let mut state = self.lock();
        state.writing = false;
        for pending in failed.into_iter().rev() {
            state.queue.push_front(pending);
        }
        if let Some(error) = &first_error {
            state.last_error = Some(error.clone());
            state.paused |= background;
        }
        self.wake.notify_all();
        (state, first_error)
    }

    /// Writes everything pending (for one session, or all) and returns when it is
    /// durable. `Err` carries the first failure, after every write was tried.
    pub fn flush(&self, session: Option<&str>) -> Result<String, String> {
        let mut state = self.lock();
        while state.writing {
            state = self.wake.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        let (batch, rest): (Vec<Pending>, Vec<Pending>) = state
            .queue
            .drain(..)
            .partition(|p| session.is_none_or(|id| p.header.id == id));
        state.queue.extend(rest);
        if state.queue.is_empty() {
            state.deadline = None;
        }
        let count = batch.len();
        let (mut state, error) = self.write(state, batch, false);
        let outcome = match error {
            Some(error) => Err(error),
            None if count == 0 => Ok(
                "nothing was pending; everything sessionfs wrote was already durable".to_string(),
            ),
            None => Ok(format!(
                "{count} pending session(s) written and made durable"
            )),
        };
        state.last_flush = Some((SystemTime::now(), outcome.clone()));
        outcome
    }

    /// Stops the background loop after writing what is pending; returns what could
    /// not be written.
    pub fn shutdown(&self) -> Vec<String> {
        let _ = self.flush(None);
        let mut state = self.lock();
        state.shutdown = true;
        self.wake.notify_all();
        state.queue.iter().map(|p| p.header.id.clone()).collect()
    }

    /// True while `id` is accepted but not durable yet.
    pub fn is_pending(&self, id: &str) -> bool {
        self.lock().queue.iter().any(|p| p.header.id == id)
    }

    /// The status shown by `cat flush`.
    pub fn status(&self, session: Option<&str>) -> String {
        let state = self.lock();
        let pending: Vec<&Pending> = state
            .queue
            .iter()
            .filter(|p| session.is_none_or(|id| p.header.id == id))
            .collect();
        let mut out = format!(
            "pending: {} session(s), {} event(s)\n",
            pending.len(),
            pending.iter().map(|p| p.events.len()).sum::<usize>()
        );
        for p in &pending {
            out.push_str(&format!(
                "pending-session: {} ({} events)\n",
                p.header.id,
                p.events.len()
            ));
        }
        for (id, seq) in state
            .durable
            .iter()
            .filter(|(id, _)| session.is_none_or(|s| s == id.as_str()))
        {
            out.push_str(&format!("durable: {id} through seq {seq}\n"));
        }
        match &state.last_flush {
            None => out.push_str("last-flush: none\n"),
            Some((when, outcome)) => {
                let ms = when
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis() as i64;
                match outcome {
                    Ok(what) => {
                        out.push_str(&format!("last-flush: {} ok: {what}\n", format_time(ms)))
                    }
                    Err(why) => {
                        out.push_str(&format!("last-flush: {} FAILED: {why}\n", format_time(ms)))
                    }
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;

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
        while writeback.is_pending("a") || writeback.is_pending("b") {
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "the window never closed"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(store.contains("a") && store.contains("b"));
        assert_eq!(
            writeback.flush(None),
            Ok("nothing was pending; everything sessionfs wrote was already durable".into())
        );
        assert!(writeback.shutdown().is_empty());
        thread.join().unwrap();
    }
}
