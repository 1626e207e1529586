//! Inode numbers. Three identifier spaces meet here: session ids (strings),
//! event seqs, and FUSE inode numbers. Each session gets a slot number when it is
//! first listed; slots are never reused while mounted, so an inode number always
//! names the same file:
//!
//! `ino = (slot + 1) << 40 | (local ^ spread(slot))`, with 0 in the top bits
//! for the mount root's own entries (1 = the root, 2 = the root `flush` file,
//! 3 = `sessions.jsonl`, 4 = `latest`, 5 = `by-project/`, 6 = `by-date/`,
//! `1 << 32 | n` a project's directory, `2 << 32 | n` its `latest`, `3 << 32 |
//! n` a day's directory, `4 << 32 | slot` the link to a session in them,
//! `7 << 32 | generation` a rewritten `sessions.jsonl`),
//! and within a session `local` = 1 directory, 2..=13 its fixed files,
//! `1 << 32 | seq` an event file, `2 << 32 | child slot` a symlink in
//! `children/`, `3 << 32 | call` a call's directory in `steps/`,
//! `4 << 32 | call << 1 | file` one of its files and `5 << 32 | lineage`
//! `transcript.md`. `spread` changes only the low 32 bits, so the kind of node
//! (bits 32 and up of `local`) reads straight off the number.
//!
//! `transcript.md` is read through the kernel's page cache, which holds one
//! size and one set of pages per inode: each lineage of the transcript (a new
//! one only when a re-read log no longer extends what readers saw) is its own
//! inode, so within one inode the bytes only ever grow, and a descriptor open
//! on an older lineage keeps its own pages.

use crate::view::{CallFile, SessionView};

/// The mount's root directory.
pub const ROOT: u64 = 1;
/// The root's `flush` control file.
pub const ROOT_FLUSH: u64 = 2;

const SLOT_SHIFT: u32 = 40;
const LOCAL_MASK: u64 = (1 << SLOT_SHIFT) - 1;
const EVENT_BASE: u64 = 1 << 32;
const CHILD_BASE: u64 = 2 << 32;
const CALL_BASE: u64 = 3 << 32;
const CALL_FILE_BASE: u64 = 4 << 32;
const TRANSCRIPT_BASE: u64 = 5 << 32;
const REWRITTEN_BASE: u64 = 6 << 32;
/// Bits of a rewritten file's generation in its inode number (beyond them,
/// generations wrap: 2^28 rewrites of one file).
const GENERATION_BITS: u32 = 28;
const GENERATION_MASK: u64 = (1 << GENERATION_BITS) - 1;

/// The files rewritten in place by the log (a compaction, a title, closers
/// showing or giving way, a status line) that are not `transcript.md`: each
/// rewrite that does not extend what was shown moves the file to a new inode,
/// its next generation, as a file replaced by `rename` would. Generation 0 is
/// the file's first inode, among the fixed ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rewritable {
    /// `header.json`.
    Header,
    /// `surface.jsonl`.
    Surface,
    /// `index.jsonl`.
    Index,
    /// `status`.
    Status,
}

impl Rewritable {
    /// Every one, in the order of [`Rewritable::index`].
    pub const ALL: [Rewritable; 4] = [
        Rewritable::Header,
        Rewritable::Surface,
        Rewritable::Index,
        Rewritable::Status,
    ];

    /// Its name in a session's directory.
    pub fn name(self) -> &'static str {
        match self {
            Rewritable::Header => "header.json",
            Rewritable::Surface => "surface.jsonl",
            Rewritable::Index => "index.jsonl",
            Rewritable::Status => "status",
        }
    }

    /// Its place in [`Rewritable::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The generation after `generation`: never 0 again (the fixed inode),
    /// and within what an inode number holds.
    pub fn next_generation(generation: u32) -> u32 {
        match u64::from(generation) + 1 {
            next if next > GENERATION_MASK => 1,
            next => next as u32,
        }
    }

    /// Its node in `generation`.
    pub fn node(self, generation: u32) -> Node {
        match self {
            Rewritable::Header => Node::Header(generation),
            Rewritable::Surface => Node::Surface(generation),
            Rewritable::Index => Node::Index(generation),
            Rewritable::Status => Node::Status(generation),
        }
    }
}

impl Node {
    /// The rewritable file this node shows, with its generation.
    pub fn rewritable(self) -> Option<(Rewritable, u32)> {
        match self {
            Node::Header(g) => Some((Rewritable::Header, g)),
            Node::Surface(g) => Some((Rewritable::Surface, g)),
            Node::Index(g) => Some((Rewritable::Index, g)),
            Node::Status(g) => Some((Rewritable::Status, g)),
            _ => None,
        }
    }
}

/// A node inside one session's directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node {
    /// The session's directory.
    Dir,
    /// `header.json` in one generation (see [`Rewritable`]).
    Header(u32),
    /// `events/`.
    Events,
    /// `surface.jsonl` in one generation (see [`Rewritable`]).
    Surface(u32),
    /// `transcript.md` in one lineage (mod 2^32).
    Transcript(u32),
    /// `index.jsonl` in one generation (see [`Rewritable`]).
    Index(u32),
    /// The `fork` control file.
    Fork,
    /// The session's `flush` control file.
    Flush,
    /// `error`, shown only for a session that cannot be read.
    Error,
    /// `status` in one generation: what the session is doing now.
    Status(u32),
    /// The `parent` link.
    Parent,
    /// `children/`.
    Children,
    /// A file of `events/`, by seq.
    Event(u64),
    /// A link in `children/`, by the child's slot.
    Child(u32),
    /// `steps/`.
    Steps,
    /// The directory of model call `n` (its index in call order) in `steps/`.
    Call(u32),
    /// A file of a model call's directory.
    CallFile(u32, CallFile),
}

/// An entry of the root's lists of the sessions (`sessions.jsonl`,
/// `by-project/`, `by-date/`), all made from the store's listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lists {
    /// `sessions.jsonl` in one generation (a rewrite moves it, as
    /// [`Rewritable`] files move).
    Catalog(u32),
    /// `latest`: the link to the session with the newest event.
    Latest,
    /// `by-project/`.
    ByProject,
    /// `by-date/`.
    ByDate,
    /// A project's directory in `by-project/`, by the project's number.
    Project(u32),
    /// The `latest` link of a project's directory, by the project's number.
    ProjectLatest(u32),
    /// A day's directory in `by-date/`, by the day's number.
    Day(u32),
    /// The link to the session in slot `n`, in its project's and its day's
    /// directory (both two levels below the root, so one target serves both).
    Link(u32),
}

const CATALOG: u64 = 3;
const LATEST: u64 = 4;
const BY_PROJECT: u64 = 5;
const BY_DATE: u64 = 6;
const PROJECT_BASE: u64 = 1 << 32;
const PROJECT_LATEST_BASE: u64 = 2 << 32;
const DAY_BASE: u64 = 3 << 32;
const LINK_BASE: u64 = 4 << 32;
const CATALOG_BASE: u64 = 7 << 32;

impl Lists {
    fn encode(self) -> u64 {
        match self {
            Lists::Catalog(0) => CATALOG,
            Lists::Catalog(generation) => CATALOG_BASE | u64::from(generation),
            Lists::Latest => LATEST,
            Lists::ByProject => BY_PROJECT,
            Lists::ByDate => BY_DATE,
            Lists::Project(n) => PROJECT_BASE | u64::from(n),
            Lists::ProjectLatest(n) => PROJECT_LATEST_BASE | u64::from(n),
            Lists::Day(n) => DAY_BASE | u64::from(n),
            Lists::Link(slot) => LINK_BASE | u64::from(slot),
        }
    }

    fn decode(ino: u64) -> Option<Lists> {
        let low = (ino & (EVENT_BASE - 1)) as u32;
        Some(match ino {
            CATALOG => Lists::Catalog(0),
            LATEST => Lists::Latest,
            BY_PROJECT => Lists::ByProject,
            BY_DATE => Lists::ByDate,
            _ => match ino >> 32 {
                1 => Lists::Project(low),
                2 => Lists::ProjectLatest(low),
                3 => Lists::Day(low),
                4 => Lists::Link(low),
                7 if low != 0 => Lists::Catalog(low),
                _ => return None,
            },
        })
    }
}

/// What an inode number names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ino {
    /// The root directory.
    Root,
    /// The root's `flush` file.
    RootFlush,
    /// An entry of the root's lists of the sessions.
    Lists(Lists),
    /// A node of the session in slot `n`.
    Session(u32, Node),
}

const FIXED: [(Node, u64); 12] = [
    (Node::Dir, 1),
    (Node::Header(0), 2),
    (Node::Events, 3),
    (Node::Surface(0), 4),
    (Node::Index(0), 6),
    (Node::Fork, 7),
    (Node::Flush, 8),
    (Node::Error, 9),
    (Node::Parent, 10),
    (Node::Children, 11),
    (Node::Steps, 12),
    (Node::Status(0), 13),
];

/// Mixed into the low 32 bits of a session's inode numbers. The kernel finds
/// an inode in a hash table keyed mostly by the number's low bits: were they
/// the same for every session (a directory is local 1 in each), `ls -l` of a
/// root of 100,000 sessions would walk one long hash chain per entry. XOR with
/// a function of the slot keeps the numbers decodable and their low bits apart.
fn spread(slot: u32) -> u64 {
    u64::from(slot.wrapping_add(1).wrapping_mul(0x9E37_79B1))
}

impl Ino {
    /// The inode number of this node.
    pub fn encode(self) -> u64 {
        match self {
            Ino::Root => ROOT,
            Ino::RootFlush => ROOT_FLUSH,
            Ino::Lists(entry) => entry.encode(),
            Ino::Session(slot, node) => {
                let local = match node {
                    Node::Event(seq) => EVENT_BASE | (seq & (EVENT_BASE - 1)),
                    Node::Child(child) => CHILD_BASE | u64::from(child),
                    Node::Call(call) => CALL_BASE | u64::from(call),
                    Node::Transcript(lineage) => TRANSCRIPT_BASE | u64::from(lineage),
                    node @ (Node::Header(g)
                    | Node::Surface(g)
                    | Node::Index(g)
                    | Node::Status(g))
                        if g != 0 =>
                    {
                        let (file, _) = node.rewritable().unwrap_or((Rewritable::Header, 0));
                        REWRITTEN_BASE
                            | (file.index() as u64) << GENERATION_BITS
                            | (u64::from(g) & GENERATION_MASK)
                    }
                    Node::CallFile(call, file) => {
                        let bit = u64::from(file == CallFile::Request);
                        CALL_FILE_BASE | (u64::from(call) & ((EVENT_BASE - 1) >> 1)) << 1 | bit
                    }
                    fixed => FIXED
                        .iter()
                        .find(|(n, _)| *n == fixed)
                        .map_or(0, |(_, l)| *l),
                };
                (u64::from(slot) + 1) << SLOT_SHIFT | (local ^ spread(slot))
            }
        }
    }

    /// The node an inode number names, if it names one.
    pub fn decode(ino: u64) -> Option<Ino> {
        match ino {
            ROOT => return Some(Ino::Root),
            ROOT_FLUSH => return Some(Ino::RootFlush),
            ino if ino >> SLOT_SHIFT == 0 => return Lists::decode(ino).map(Ino::Lists),
            _ => {}
        }
        let slot = u32::try_from((ino >> SLOT_SHIFT).checked_sub(1)?).ok()?;
        let local = (ino & LOCAL_MASK) ^ spread(slot);
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
            5 => Node::Transcript(u32::try_from(local & (EVENT_BASE - 1)).ok()?),
            6 => {
                let file = *Rewritable::ALL
                    .get(((local & (EVENT_BASE - 1)) >> GENERATION_BITS) as usize)?;
                let generation = (local & GENERATION_MASK) as u32;
                if generation == 0 {
                    return None;
                }
                file.node(generation)
            }
            0 => FIXED.iter().find(|(_, l)| *l == local)?.0,
            _ => return None,
        };
        Some(Ino::Session(slot, node))
    }
}

/// The inodes of a session whose content may have changed: its directory and
/// the files generated from its whole log, in their current generations.
pub fn session_inodes(
    number: u32,
    view: &SessionView,
    generations: [u32; 4],
) -> impl Iterator<Item = u64> + use<> {
    let transcript = view.transcript_lineage().unwrap_or_default();
    let [header, surface, index, status] = generations;
    [
        Node::Dir,
        Node::Header(header),
        Node::Events,
        Node::Surface(surface),
        Node::Transcript(transcript as u32),
        Node::Index(index),
        Node::Status(status),
        Node::Steps,
    ]
    .into_iter()
    .map(move |node| Ino::Session(number, node).encode())
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
            Ino::Session(7, Node::Transcript(0)),
            Ino::Session(7, Node::Transcript(1)),
            Ino::Session(7, Node::Transcript(u32::MAX)),
            Ino::Session(7, Node::Header(0)),
            Ino::Session(7, Node::Header(1)),
            Ino::Session(7, Node::Surface(1)),
            Ino::Session(7, Node::Index(1)),
            Ino::Session(7, Node::Status(1)),
            Ino::Session(7, Node::Status(0)),
            Ino::Session(7, Node::Header((1 << 28) - 1)),
            Ino::Lists(Lists::Catalog(0)),
            Ino::Lists(Lists::Catalog(1)),
            Ino::Lists(Lists::Catalog(u32::MAX)),
            Ino::Lists(Lists::Latest),
            Ino::Lists(Lists::ProjectLatest(7)),
            Ino::Lists(Lists::ByProject),
            Ino::Lists(Lists::ByDate),
            Ino::Lists(Lists::Project(0)),
            Ino::Lists(Lists::Project(u32::MAX)),
            Ino::Lists(Lists::Day(0)),
            Ino::Lists(Lists::Day(9)),
            Ino::Lists(Lists::Link(0)),
            Ino::Lists(Lists::Link(99_999)),
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
        assert_eq!(Ino::decode(7), None);
        assert_eq!(Rewritable::next_generation(0), 1);
        assert_eq!(Rewritable::next_generation((1 << 28) - 1), 1);
    }

    #[test]
    fn every_slot_and_node_round_trips() {
        for slot in (0..200_000u32)
            .step_by(997)
            .chain([u32::from(u16::MAX), (1 << 24) - 2])
        {
            for node in [
                Node::Dir,
                Node::Index(0),
                Node::Index(7),
                Node::Status(1 << 27),
                Node::Children,
                Node::Parent,
            ]
            .into_iter()
            .chain([0, 1, 77, (1 << 32) - 1].map(Node::Event))
            .chain([0, 5, u32::MAX].map(Node::Child))
            .chain([0, 5, u32::MAX].map(Node::Transcript))
            {
                let ino = Ino::Session(slot, node);
                let number = ino.encode();
                assert!(number > ROOT_FLUSH);
                assert_eq!(Ino::decode(number), Some(ino), "{number:#x}");
            }
        }
    }

    #[test]
    fn session_directories_differ_in_their_low_bits() {
        // What the kernel's inode hash mostly looks at.
        let low: std::collections::HashSet<u64> = (0..10_000u32)
            .map(|slot| Ino::Session(slot, Node::Dir).encode() & 0xffff)
            .collect();
        assert!(low.len() > 5_000, "{} distinct", low.len());
        let events: std::collections::HashSet<u64> = (0..10_000u64)
            .map(|seq| Ino::Session(3, Node::Event(seq)).encode() & 0xffff)
            .collect();
        assert_eq!(events.len(), 10_000);
    }
}
