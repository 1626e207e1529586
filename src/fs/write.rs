//! Writes to the control files, carried out before the write returns: a
//! flush waits until what it covers is durable, and a fork's child is in the
//! table before it is handed to the write-behind, so it can be looked up the
//! moment the write returns.

use std::time::SystemTime;

use super::Attr;
use super::SessionFs;
use super::control::{Command, ControlFile, ForkRecord};
use super::inode::{Ino, Node};
use super::names::{NAME_MAX, mount_name};
use super::sessions::{Listed, Slot};
use super::writeback::FlushScope;
use crate::error::Error;
use crate::model::ids::encode_segment;
use crate::store::{Catalog, Listing, SessionKey};

impl SessionFs {
    /// What reading a control file shows now; its `stat` size is this length.
    pub(super) fn control_status(&self, ino: Ino) -> crate::error::Result<String> {
        let mut status = self.control_state(ino)?;
        // Why a write would be refused, where it can be read.
        if let Some(why) = &self.config.read_only {
            status.push_str(&format!("read-only: {why}\n"));
        }
        Ok(status)
    }

    fn control_state(&self, ino: Ino) -> crate::error::Result<String> {
        match ino {
            Ino::RootFlush => Ok(self.writeback.status(FlushScope::Everything)),
            Ino::Session(number, Node::Flush) => {
                let slot = self.slot(number)?;
                Ok(self.writeback.status(FlushScope::Lineage {
                    session: &slot.id,
                    parent_of: &|id| self.parent_of(id),
                }))
            }
            Ino::Session(number, Node::Fork) => {
                let slot = self.slot(number)?;
                Ok(self.controls.fork_status(number, &slot.id))
            }
            _ => Err(Error::Invalid("not a control file".into())),
        }
    }

    /// A write to a control file.
    pub fn write(&self, ino: u64, data: &[u8]) -> crate::error::Result<usize> {
        if let Some(why) = &self.config.read_only {
            return Err(Error::ReadOnly(why.clone()));
        }
        match Ino::decode(ino) {
            Some(Ino::RootFlush) => self.flush_command(None, data),
            Some(Ino::Session(number, Node::Flush)) => {
                let slot = self.slot(number)?;
                self.flush_command(Some(&slot.id), data)
            }
            Some(Ino::Session(number, Node::Fork)) => self.fork_command(number, data),
            _ => Err(Error::ReadOnly(
                "only the fork and flush control files can be written".into(),
            )),
        }
    }

    /// `setattr` with a size: the `O_TRUNC` of `echo N > fork` is a no-op on
    /// control files; generated files cannot be changed.
    pub fn truncate(&self, ino: u64) -> crate::error::Result<Attr> {
        match Ino::decode(ino) {
            Some(Ino::RootFlush | Ino::Session(_, Node::Fork | Node::Flush))
                if self.config.read_only.is_none() =>
            {
                self.getattr(ino)
            }
            _ => Err(Error::ReadOnly("generated files are read-only".into())),
        }
    }

    fn flush_command(&self, session: Option<&str>, data: &[u8]) -> crate::error::Result<usize> {
        Command::parse(ControlFile::Flush, data).map_err(Error::Invalid)?;
        let parent_of = |id: &str| self.parent_of(id);
        let scope = match session {
            Some(session) => FlushScope::Lineage {
                session,
                parent_of: &parent_of,
            },
            None => FlushScope::Everything,
        };
        self.writeback.flush(scope)?;
        Ok(data.len())
    }

    /// The parent a listed session's header names, for a flush's lineage.
    fn parent_of(&self, id: &str) -> Option<String> {
        self.sessions.parent_of(id)
    }

    fn fork_command(&self, number: u32, data: &[u8]) -> crate::error::Result<usize> {
        let slot = self.slot(number)?;
        // The reason names the session: the adapter logs it, and `cat fork` shows it.
        let result = self.fork(&slot, data).map_err(|e| match e {
            Error::Invalid(m) => Error::Invalid(format!("fork of {:?} refused: {m}", slot.id)),
            Error::Exists(m) => Error::Exists(format!("fork of {:?} refused: {m}", slot.id)),
            Error::NameTooLong(m) => {
                Error::NameTooLong(format!("fork of {:?} refused: {m}", slot.id))
            }
            other => other,
        });
        self.controls.record(number, &result);
        result.map(|_| data.len())
    }

    fn fork(&self, slot: &Slot, data: &[u8]) -> crate::error::Result<ForkRecord> {
        let Command::Fork {
            through: boundary,
            name,
        } = Command::parse(ControlFile::Fork, data).map_err(Error::Invalid)?
        else {
            return Err(Error::Invalid("not a fork command".into()));
        };
        let (parent_header, seed) = self.with_view(slot, |view| {
            // A session that cannot be read answers why, with that reason's
            // errno: the store's own when it cannot be read just now.
            let Some(indexed) = view.indexed() else {
                return Err(Error::from(view.refusal().cloned().unwrap_or_else(|| {
                    crate::model::Refusal::Corrupt("the session cannot be read".into())
                })));
            };
            // The boundary is checked against the stored events, never the repaired view.
            indexed
                .fold()
                .turns()
                .check(boundary)
                .map_err(|refusal| Error::Invalid(refusal.to_string()))?;
            let seed = (0..=boundary)
                .map(|seq| view.event(seq))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            Ok::<_, Error>((indexed.header().clone(), seed))
        })??;
        let child_id = match name {
            Some(name) => {
                if self.store.contains(&name)
                    || self.memory.contains(&name)
                    || self.sessions.by_id(&name).is_some()
                {
                    return Err(Error::Exists(format!(
                        "a session named {name:?} already exists in the store"
                    )));
                }
                name
            }
            None => loop {
                let uuid = crate::random::uuid_v4()
                    .map_err(|e| Error::io("cannot make a child id", &e))?;
                let id = format!("session-{uuid}");
                if !self.store.contains(&id) && self.sessions.by_id(&id).is_none() {
                    break id;
                }
            },
        };
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as i64;
        let header = crate::model::fork::child_header(&parent_header, &child_id, boundary, now);
        let events = crate::model::fork::child_events(seed, now);
        let name = mount_name(&child_id);
        // The store keeps one directory per session, named by the encoded id.
        if encode_segment(&child_id).is_some_and(|segment| segment.len() > NAME_MAX) {
            return Err(Error::NameTooLong(format!(
                "the child name {child_id:?} encodes to more than {NAME_MAX} bytes"
            )));
        }
        // Taken in the store now: another sessionfs sharing it that forks the
        // same name meets EEXIST here, not a failed write later.
        self.store.reserve(&header).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => Error::Exists(e.to_string()),
            _ => Error::io("cannot take the child's name in the store", &e),
        })?;
        let listing = Listing::of(header.clone(), SessionKey::Row(child_id.clone()));
        // Served from memory, then in the table, then submitted: it may be
        // written at once (a root flush), and making it durable moves its
        // slot to the store, so the slot must be there by then.
        self.memory.insert(header.clone(), events.clone());
        let listed = Listed::of(listing, self.memory.clone(), true);
        self.sessions.add(name, &child_id, listed);
        self.writeback.submit(header, events);
        log::info!(
            "forked session {:?} through seq {boundary} into {child_id:?}",
            slot.id
        );
        Ok(ForkRecord {
            boundary,
            child: child_id,
        })
    }
}
