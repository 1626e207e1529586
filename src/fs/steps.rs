//! `<session>/steps/`: one directory per model call, each holding
//! `messages.jsonl` and `request.json` (`view::steps` renders them). Called from
//! a few match arms of the filesystem model.

use std::time::SystemTime;

use super::inode::{Ino, Node};
use super::{Attr, DirEntry, Kind, SessionFs, Slot};
use crate::error::{Error, Result};
use crate::view::{CallFile, Content, SessionView};

impl SessionFs {
    /// Whether a node of `steps/` exists: only a readable session has steps.
    pub(super) fn steps_node_present(view: &SessionView, node: Node) -> bool {
        let calls = view.indexed().map_or(0, |i| i.call_count());
        match node {
            Node::Steps => view.indexed().is_some(),
            Node::Call(call) | Node::CallFile(call, _) => (call as usize) < calls,
            _ => false,
        }
    }

    /// The attributes of a node of `steps/`; a call file's size is exact, so it is rendered.
    pub(super) fn steps_attr(
        &self,
        slot: &Slot,
        view: &mut SessionView,
        ino: u64,
        node: Node,
        mtime: SystemTime,
    ) -> Result<Attr> {
        match node {
            Node::CallFile(call, file) => {
                let content = self.call_content(slot, view, call, file)?;
                Ok(self.attr(ino, Kind::File, content.bytes.len() as u64, 0o444, mtime))
            }
            _ => Ok(self.attr(ino, Kind::Dir, 0, 0o555, mtime)),
        }
    }

    pub(super) fn call_content(
        &self,
        slot: &Slot,
        view: &mut SessionView,
        call: u32,
        file: CallFile,
    ) -> Result<Content> {
        let (backend, key) = self.backend_of(slot);
        let indexed = view
            .indexed_mut()
            .ok_or_else(|| Error::NotFound("no steps".into()))?;
        Ok(indexed.call_file(backend.as_ref(), &key, call as usize, file)?)
    }

    /// Looks `name` up in `steps/` or in a call's directory.
    pub(super) fn steps_lookup(&self, number: u32, parent: Node, name: &str) -> Result<Attr> {
        let node = match parent {
            Node::Steps => {
                let slot = self.slot(number)?;
                let guard = self.view(&slot);
                let call = guard
                    .as_ref()
                    .and_then(|v| v.indexed())
                    .and_then(|i| i.call_by_name(name))
                    .ok_or_else(|| Error::NotFound(format!("no model call {name}")))?;
                Node::Call(call as u32)
            }
            Node::Call(call) => {
                let file = CallFile::from_name(name)
                    .ok_or_else(|| Error::NotFound(format!("no file {name}")))?;
                Node::CallFile(call, file)
            }
            _ => return Err(Error::NotDir("not a directory".into())),
        };
        self.getattr(Ino::Session(number, node).encode())
    }

    /// The entries of `steps/` (calls in call order) or of a call's directory.
    pub(super) fn steps_list(&self, number: u32, node: Node) -> Result<Vec<DirEntry>> {
        let slot = self.slot(number)?;
        let guard = self.view(&slot);
        let view = guard
            .as_ref()
            .ok_or_else(|| Error::NotFound("session vanished".into()))?;
        if !Self::steps_node_present(view, node) {
            return Err(Error::NotFound(format!(
                "{} has no such directory",
                slot.name
            )));
        }
        let indexed = view
            .indexed()
            .ok_or_else(|| Error::NotFound("no steps".into()))?;
        Ok(match node {
            Node::Steps => (0..indexed.call_count())
                .filter_map(|call| {
                    Some(DirEntry {
                        ino: Ino::Session(number, Node::Call(call as u32)).encode(),
                        kind: Kind::Dir,
                        name: indexed.call_name(call)?,
                    })
                })
                .collect(),
            Node::Call(call) => CallFile::ALL
                .into_iter()
                .map(|file| DirEntry {
                    ino: Ino::Session(number, Node::CallFile(call, file)).encode(),
                    kind: Kind::File,
                    name: file.name().into(),
                })
                .collect(),
            _ => return Err(Error::NotDir("not a directory".into())),
        })
    }
}
