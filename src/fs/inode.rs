//! Inode numbers. Three identifier spaces meet here: session ids (strings),
//! event seqs, and FUSE inode numbers. Each session gets a slot number when it is
//! first listed; slots are never reused while mounted, so an inode number always
//! names the same file:
//!
//! `ino = slot << 40 | local`, with slot 0 for the mount root's own entries
//! (1 = the root, 2 = the root `flush` file), and within a session `local` =
//! 1 directory, 2..=12 its fixed files, `1 << 32 | seq` an event file,
//! `2 << 32 | child slot` a symlink in `children/`, `3 << 32 | call` a call's
//! directory in `steps/` and `4 << 32 | call << 1 | file` one of its files.

use crate::view::CallFile;

pub const ROOT: u64 = 1;
pub const ROOT_FLUSH: u64 = 2;

const SLOT_SHIFT: u32 = 40;
const LOCAL_MASK: u64 = (1 << SLOT_SHIFT) - 1;
const EVENT_BASE: u64 = 1 << 32;
const CHILD_BASE: u64 = 2 << 32;
const CALL_BASE: u64 = 3 << 32;
const CALL_FILE_BASE: u64 = 4 << 32;

/// A node inside one session's directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node {
    Dir,
    Header,
    Events,
    Surface,
    Transcript,
    Index,
    Fork,
    Flush,
    Error,
    Parent,
    Children,
    Event(u64),
    Child(u32),
    Steps,
    /// The directory of model call `n` (its index in call order) in `steps/`.
    Call(u32),
    CallFile(u32, CallFile),
}

/// What an inode number names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ino {
    Root,
    RootFlush,
    Session(u32, Node),
}

const FIXED: [(Node, u64); 12] = [
    (Node::Dir, 1),
    (Node::Header, 2),
    (Node::Events, 3),
    (Node::Surface, 4),
    (Node::Transcript, 5),
    (Node::Index, 6),
    (Node::Fork, 7),
    (Node::Flush, 8),
    (Node::Error, 9),
    (Node::Parent, 10),
    (Node::Children, 11),
    (Node::Steps, 12),
];

impl Ino {
    pub fn encode(self) -> u64 {
        match self {
            Ino::Root => ROOT,
            Ino::RootFlush => ROOT_FLUSH,
            Ino::Session(slot, node) => {
                let local = match node {
                    Node::Event(seq) => EVENT_BASE | (seq & (EVENT_BASE - 1)),
                    Node::Child(child) => CHILD_BASE | u64::from(child),
                    Node::Call(call) => CALL_BASE | u64::from(call),
                    Node::CallFile(call, file) => {
                        let bit = u64::from(file == CallFile::Request);
                        CALL_FILE_BASE | (u64::from(call) & ((EVENT_BASE - 1) >> 1)) << 1 | bit
                    }
                    fixed => FIXED
                        .iter()
                        .find(|(n, _)| *n == fixed)
                        .map_or(0, |(_, l)| *l),
                };
                (u64::from(slot) + 1) << SLOT_SHIFT | local
            }
        }
    }

    pub fn decode(ino: u64) -> Option<Ino> {
        match ino {
            ROOT => return Some(Ino::Root),
            ROOT_FLUSH => return Some(Ino::RootFlush),
            _ => {}
        }
        let slot = u32::try_from((ino >> SLOT_SHIFT).checked_sub(1)?).ok()?;
        let local = ino & LOCAL_MASK;
        let node = match local >> 32 {
            1 => Node::Event(local & (EVENT_BASE - 1)),
            2 => Node::Child(u32::try_from(local & (EVENT_BASE - 1)).ok()?),
            3 => Node::Call(u32::try_from(local & (EVENT_BASE - 1)).ok()?),
            4 => {
                let call = u32::try_from((local & (EVENT_BASE - 1)) >> 1).ok()?;
                let file = match local & 1 {
                    0 => CallFile::Messages,
                    _ => CallFile::Request,
                };
                Node::CallFile(call, file)
            }
            0 => FIXED.iter().find(|(_, l)| *l == local)?.0,
            _ => return None,
        };
        Some(Ino::Session(slot, node))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_numbers_round_trip_and_never_collide() {
        let samples = [
            Ino::Root,
            Ino::RootFlush,
            Ino::Session(0, Node::Dir),
            Ino::Session(0, Node::Children),
            Ino::Session(7, Node::Event(0)),
            Ino::Session(7, Node::Event(1_307_072)),
            Ino::Session(9_999, Node::Child(3)),
            Ino::Session(7, Node::Steps),
            Ino::Session(7, Node::Call(0)),
            Ino::Session(7, Node::Call(3)),
            Ino::Session(7, Node::CallFile(3, CallFile::Messages)),
            Ino::Session(7, Node::CallFile(3, CallFile::Request)),
            Ino::Session(7, Node::CallFile((1 << 31) - 1, CallFile::Request)),
        ];
        let numbers: Vec<u64> = samples.iter().map(|i| i.encode()).collect();
        for (ino, n) in samples.iter().zip(&numbers) {
            assert_eq!(Ino::decode(*n), Some(*ino));
        }
        let mut unique = numbers.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), numbers.len());
        assert_eq!(Ino::decode(0), None);
        assert_eq!(Ino::decode(3), None);
    }
}
