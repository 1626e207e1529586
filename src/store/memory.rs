//! Sessions that exist only in memory: fork children accepted by sessionfs whose
//! write-behind window has not closed yet. They are served exactly like stored
//! sessions until they are durable.

use std::collections::HashMap;
use std::sync::RwLock;

use crate::json::JsonMap;
use crate::model::Refusal;
use crate::model::Scanned;
use crate::model::header::SessionHeader;
use crate::store::{
    Catalog, EventLoc, EventSink, Listing, Revision, ScanEnd, ScanPoint, SessionKey, Source,
    Watched, Writer, find_row,
};
use crate::sync;

/// Fork children not yet written to the store: each one's header and events, by id.
#[derive(Default)]
pub struct MemoryStore {
    sessions: RwLock<HashMap<String, (SessionHeader, Vec<JsonMap>)>>,
}

impl MemoryStore {
    /// Serves a session from memory until it is durable (replacing one of the same id).
    pub fn insert(&self, header: SessionHeader, events: Vec<JsonMap>) {
        let mut sessions = sync::write(&self.sessions);
        sessions.insert(header.id.clone(), (header, events));
    }

    /// Stops serving a session from memory, once the store holds it.
    pub fn remove(&self, id: &str) {
        sync::write(&self.sessions).remove(id);
    }

    fn with<T>(
        &self,
        key: &SessionKey,
        f: impl FnOnce(&SessionHeader, &[JsonMap]) -> T,
    ) -> Result<T, Refusal> {
        let SessionKey::Row(id) = key else {
            return Err(Refusal::Corrupt("not a pending session".into()));
        };
        let sessions = sync::read(&self.sessions);
        let (header, events) = sessions
            .get(id)
            .ok_or_else(|| Refusal::Corrupt(format!("pending session {id:?} is gone")))?;
        Ok(f(header, events))
    }
}

impl Catalog for MemoryStore {
    fn describe(&self) -> String {
        "sessions pending in memory".into()
    }

    fn list(&self) -> Vec<Listing> {
        let sessions = sync::read(&self.sessions);
        sessions
            .iter()
            .map(|(id, (header, _))| Listing::of(header.clone(), SessionKey::Row(id.clone())))
            .collect()
    }

    fn contains(&self, id: &str) -> bool {
        sync::read(&self.sessions).contains_key(id)
    }

    fn find(&self, id: &str) -> Vec<Listing> {
        find_row(self, id)
    }
}

impl Source for MemoryStore {
    fn header(&self, key: &SessionKey) -> Result<SessionHeader, Refusal> {
        self.with(key, |header, _| header.clone())
    }

    fn revision(&self, key: &SessionKey) -> Result<Revision, Refusal> {
        self.with(key, |_, events| {
            Revision(format!("memory:{}", events.len()))
        })
    }

    fn scan(
        &self,
        key: &SessionKey,
        from: &ScanPoint,
        sink: &mut EventSink,
    ) -> Result<(ScanPoint, ScanEnd), Refusal> {
        let events = self.with(key, |_, events| events.to_vec())?;
        for (seq, event) in events.into_iter().enumerate().skip(from.events as usize) {
            sink(
                EventLoc {
                    record: seq as u64,
                    within: 0,
                    member: 0,
                },
                Scanned::Event(event),
            )?;
        }
        let count = self.with(key, |_, events| events.len() as u64)?;
        Ok((
            ScanPoint {
                events: count,
                offset: count,
                ..ScanPoint::default()
            },
            ScanEnd::Complete,
        ))
    }

    fn fetch(&self, key: &SessionKey, loc: EventLoc) -> Result<JsonMap, Refusal> {
        self.with(key, |_, events| events.get(loc.record as usize).cloned())?
            .ok_or_else(|| Refusal::Corrupt(format!("pending session has no event {}", loc.record)))
    }
}

impl Writer for MemoryStore {
    fn create(&self, header: &SessionHeader, events: &[JsonMap]) -> std::io::Result<SessionKey> {
        self.insert(header.clone(), events.to_vec());
        Ok(SessionKey::Row(header.id.clone()))
    }

    fn repair(
        &self,
        _key: &SessionKey,
        _keep: &ScanPoint,
        _expected: &Revision,
        _tail: &[JsonMap],
    ) -> std::io::Result<()> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "a pending session is complete; it needs no repair",
        ))
    }
}

impl Watched for MemoryStore {}
