//! `<session>/steps/`: one directory per model call, each holding
//! `messages.jsonl` and `request.json` (`view::steps` renders them, and
//! `SessionView::file` serves them like every other generated file).

use super::inode::{Ino, Node};
use super::{Attr, DirEntry, Kind, SessionFs};
use crate::error::{Error, Result};
use crate::view::{CallFile, SessionView};

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

    /// Looks `name` up in `steps/` or in a call's directory.
    pub(super) fn steps_lookup(&self, number: u32, parent: Node, name: &str) -> Result<Attr> {
        let node = match parent {
            Node::Steps => {
                let slot = self.slot(number)?;
                let call = self
                    .with_view(&slot, |view| {
                        view.indexed().and_then(|i| i.call_by_name(name))
                    })?
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

    /// Up to `limit` entries of `steps/` (calls in call order) or of a call's
    /// directory, from `offset` on.
    pub(super) fn steps_list(
        &self,
        number: u32,
        node: Node,
        offset: u64,
        limit: usize,
    ) -> Result<Vec<DirEntry>> {
        let slot = self.slot(number)?;
        self.with_view(&slot, |view| {
            if !Self::steps_node_present(view, node) {
                return Err(Error::NotFound(format!(
                    "{} has no such directory",
                    slot.name
                )));
            }
            let indexed = view
                .indexed()
                .ok_or_else(|| Error::NotFound("no steps".into()))?;
            let first = usize::try_from(offset).unwrap_or(usize::MAX);
            Ok(match node {
                Node::Steps => (first..indexed.call_count())
                    .take(limit)
                    .filter_map(|call| {
                        Some(DirEntry {
                            ino: Ino::Session(number, Node::Call(call as u32)).encode(),
                            kind: Kind::Dir,
                            name: indexed.call_name(call)?,
                            next: call as u64 + 1,
                        })
                    })
                    .collect(),
                Node::Call(call) => CallFile::ALL
                    .into_iter()
                    .enumerate()
                    .skip(first)
                    .take(limit)
                    .map(|(k, file)| DirEntry {
                        ino: Ino::Session(number, Node::CallFile(call, file)).encode(),
                        kind: Kind::File,
                        name: file.name().into(),
                        next: k as u64 + 1,
                    })
                    .collect(),
                _ => return Err(Error::NotDir("not a directory".into())),
            })
        })?
    }
}
