//! The view's unit tests: lifecycle, rereads and reads that end short.

use super::*;
use crate::store::memory::MemoryStore;
use crate::store::{EventLoc, ScanEnd};

fn turn(seq: u64, turn: u64, text: &str) -> Vec<JsonMap> {
    [
        serde_json::json!({"type": "turn/start", "seq": seq, "time": 1, "data": {"turn": turn}}),
        serde_json::json!({"type": "step/start", "seq": seq + 1, "time": 2, "data": {"turn": turn, "step": 1}}),
        serde_json::json!({"type": "user/message", "seq": seq + 2, "time": 3, "data": {"content": [{"type": "text", "text": text}], "source": {"kind": "user"}, "role": "user", "id": format!("u{seq}")}, "surfaceOp": "append"}),
        serde_json::json!({"type": "step/end", "seq": seq + 3, "time": 4, "data": {"turn": turn, "step": 1}}),
        serde_json::json!({"type": "turn/end", "seq": seq + 4, "time": 5, "data": {"turn": turn, "reason": {"kind": "completed"}}}),
    ]
    .into_iter()
    .map(|v| v.as_object().cloned().unwrap())
    .collect()
}

fn indexed(events: Vec<JsonMap>) -> Box<Indexed> {
    let store = MemoryStore::default();
    let header = SessionHeader::new("s", 1);
    store.insert(header.clone(), events);
    let source = SessionSource::new(Arc::new(store), SessionKey::Row("s".into()));
    match SessionView::open(source, "s", None, Duration::from_secs(60), None, None).state {
        State::Indexed(indexed) => indexed,
        State::Unreadable(u) => panic!("{}", u.reason.message()),
    }
}

/// A store whose reads lag its stat, as rclone's cache can: the next scan
/// leaves out the newest `lag` events and ends short.
#[derive(Default)]
struct Lagging {
    store: MemoryStore,
    lag: std::sync::atomic::AtomicU64,
}

impl crate::store::Catalog for Lagging {
    fn describe(&self) -> String {
        self.store.describe()
    }
    fn list(&self) -> Vec<crate::store::Listing> {
        self.store.list()
    }
    fn find(&self, id: &str) -> Vec<crate::store::Listing> {
        self.store.find(id)
    }
    fn contains(&self, id: &str) -> bool {
        self.store.contains(id)
    }
}

impl crate::store::Source for Lagging {
    fn header(&self, key: &SessionKey) -> Result<SessionHeader, Refusal> {
        self.store.header(key)
    }
    fn revision(&self, key: &SessionKey) -> Result<Revision, Refusal> {
        self.store.revision(key)
    }
    fn scan(
        &self,
        key: &SessionKey,
        from: &ScanPoint,
        sink: &mut crate::store::EventSink,
    ) -> Result<(ScanPoint, ScanEnd), Refusal> {
        let lag = self.lag.swap(0, std::sync::atomic::Ordering::Relaxed);
        let mut handed = 0;
        let stated = self.store.revision(key)?;
        let total: u64 = stated.0["memory:".len()..].parse().unwrap();
        let (point, _) = self.store.scan(key, from, &mut |loc, scanned| {
            handed += 1;
            if from.events + handed > total - lag {
                return Ok(());
            }
            sink(loc, scanned)
        })?;
        if lag == 0 {
            return Ok((point, ScanEnd::Complete));
        }
        let events = total - lag;
        let short = ScanPoint {
            events,
            offset: events,
            ..point
        };
        Ok((short, ScanEnd::ShortRead))
    }
    fn fetch(&self, key: &SessionKey, loc: EventLoc) -> Result<JsonMap, Refusal> {
        self.store.fetch(key, loc)
    }
}

impl crate::store::Writer for Lagging {
    fn create(&self, header: &SessionHeader, events: &[JsonMap]) -> std::io::Result<SessionKey> {
        self.store.create(header, events)
    }
    fn repair(
        &self,
        key: &SessionKey,
        keep: &ScanPoint,
        expected: &Revision,
        tail: &[JsonMap],
    ) -> std::io::Result<()> {
        self.store.repair(key, keep, expected, tail)
    }
}

impl crate::store::Watched for Lagging {}

#[test]
fn a_read_that_ended_short_of_the_stated_size_is_read_on_at_the_next_refresh() {
    let store = Arc::new(Lagging::default());
    let header = SessionHeader::new("s", 1);
    store.store.insert(header.clone(), turn(0, 1, "hello"));
    let source = SessionSource::new(store.clone(), SessionKey::Row("s".into()));
    let mut view = SessionView::open(source, "s", None, Duration::from_secs(60), None, None);
    let count = |view: &SessionView| view.indexed().map(|i| i.events.len());
    assert_eq!(count(&view), Some(5));
    // The store grows, but its next read still serves the old bytes.
    store
        .store
        .insert(header, [turn(0, 1, "hello"), turn(5, 2, "more")].concat());
    store.lag.store(5, std::sync::atomic::Ordering::Relaxed);
    view.refresh();
    assert_eq!(count(&view), Some(5), "the lagging read gave nothing new");
    // Nothing changes in the store's stat, yet the next refresh reads on.
    view.refresh();
    assert_eq!(count(&view), Some(10));
}

#[test]
fn a_reread_keeps_the_transcript_lineage_only_when_it_extends_the_old_one() {
    let first = indexed(turn(0, 1, "hello"));
    let mut grown = indexed([turn(0, 1, "hello"), turn(5, 2, "more")].concat());
    grown.succeed(&first);
    assert_eq!(grown.transcript_lineage, first.transcript_lineage);
    assert_ne!(grown.lineage, first.lineage);
    let mut rewritten = indexed(turn(0, 1, "goodbye"));
    rewritten.succeed(&first);
    assert_ne!(rewritten.transcript_lineage, first.transcript_lineage);
}
