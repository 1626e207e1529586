//! The control files, in the manner of Plan 9 `ctl` files: one write is one
//! command, acted on before the write returns, so the write's status is the
//! command's status; reading shows what happened.

use std::time::SystemTime;

use super::inode::{Ino, Node};
use super::table::{Listed, Slot};
use super::writeback::FlushScope;
use super::{Attr, NAME_MAX, SessionFs, lock, mount_name};
use crate::error::Error;
use crate::model::ids::encode_segment;
use crate::render::format_time;
use crate::store::{Catalog, Listing, SessionKey};

/// A fork this mount made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkRecord {
    pub boundary: u64,
    pub child: String,
}

/// What `cat fork` shows: the forks made from this session and the last error.
#[derive(Clone, Debug, Default)]
pub struct ForkLog {
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
    pub fn record_success(&mut self, record: ForkRecord) {
        self.forks.push(record);
    }

    pub fn record_error(&mut self, message: String) {
        self.last_error = Some((now_ms(), message));
    }

    pub fn status(&self, session: &str) -> String {
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

/// A write to `flush` carries no arguments: an empty line (`echo > flush`) or the
/// word `flush`.
pub fn parse_flush_command(data: &[u8]) -> Result<(), String> {
    let text =
        std::str::from_utf8(data).map_err(|_| "the flush command is not text".to_string())?;
    match text.trim_end_matches('\n') {
        "" | "flush" => Ok(()),
        other => Err(format!(
            "unknown flush command {other:?}: write an empty line (echo > flush)"
        )),
    }
}

impl SessionFs {
    /// What reading a control file shows now; its `stat` size is this length.
    pub(super) fn control_status(&self, ino: Ino) -> crate::error::Result<String> {
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
                Ok(lock(&slot.control).status(&slot.id))
            }
            _ => Err(Error::Invalid("not a control file".into())),
        }
    }

    /// A write to a control file.
    pub fn write(&self, ino: u64, data: &[u8]) -> crate::error::Result<usize> {
        if self.config.read_only {
            return Err(Error::ReadOnly("the mount is read-only (-o ro)".into()));
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
                if !self.config.read_only =>
            {
                self.getattr(ino)
            }
            _ => Err(Error::ReadOnly("generated files are read-only".into())),
        }
    }

    fn flush_command(&self, session: Option<&str>, data: &[u8]) -> crate::error::Result<usize> {
        parse_flush_command(data).map_err(Error::Invalid)?;
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
        let slot = self.slot(self.slot_by_id(id)?).ok()?;
        let parent = lock(&slot.listed).parent.clone();
        parent.map(String::from)
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
        let mut log = lock(&slot.control);
        match &result {
            Ok(child) => log.record_success(child.clone()),
            Err(e) => log.record_error(e.to_string()),
        }
        result.map(|_| data.len())
    }

    fn fork(&self, slot: &Slot, data: &[u8]) -> crate::error::Result<ForkRecord> {
        let (boundary, name) =
            crate::model::fork::parse_fork_command(data).map_err(Error::Invalid)?;
        let (backend, key) = self.backend_of(slot);
        let (parent_header, seed) = self.with_view(slot, |view| {
            let indexed = view.indexed().ok_or_else(|| {
                Error::Invalid(format!(
                    "session {:?} cannot be read, so it cannot be forked",
                    slot.id
                ))
            })?;
            // The boundary is checked against the stored events, never the repaired view.
            indexed
                .fold()
                .turns()
                .check(boundary)
                .map_err(|refusal| Error::Invalid(refusal.to_string()))?;
            let seed = (0..=boundary)
                .map(|seq| indexed.event(backend.as_ref(), &key, seq))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            Ok::<_, Error>((indexed.header().clone(), seed))
        })??;
        let child_id = match name {
            Some(name) => {
                if self.store.contains(&name)
                    || self.memory.contains(&name)
                    || self.slot_by_id(&name).is_some()
                {
                    return Err(Error::Exists(format!(
                        "a session named {name:?} already exists in the store"
                    )));
                }
                name
            }
            None => loop {
                let uuid = crate::random::uuid_v4().map_err(|e| Error::Io {
                    errno: libc::EIO,
                    message: format!("cannot make a child id: {e}"),
                })?;
                let id = format!("session-{uuid}");
                if !self.store.contains(&id) && self.slot_by_id(&id).is_none() {
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
        let name = mount_name(&child_id)
            .ok_or_else(|| Error::Invalid("the child name is empty".into()))?;
        // The store keeps one directory per session, named by the encoded id.
        if encode_segment(&child_id).is_some_and(|segment| segment.len() > NAME_MAX) {
            return Err(Error::NameTooLong(format!(
                "the child name {child_id:?} encodes to more than {NAME_MAX} bytes"
            )));
        }
        let listing = Listing::of(header.clone(), SessionKey::Row(child_id.clone()));
        self.writeback.submit(header, events);
        self.table_mut()
            .add(name, &child_id, Listed::of(listing, true), None);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_commands() {
        assert!(parse_flush_command(b"\n").is_ok());
        assert!(parse_flush_command(b"").is_ok());
        assert!(parse_flush_command(b"flush\n").is_ok());
        assert!(parse_flush_command(b"now please\n").is_err());
    }
}
