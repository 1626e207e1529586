//! What a rewritable file last showed: enough to tell whether its next version
//! extends it (the same inode, whose readers read on) or rewrites it (the next
//! generation, a new inode, as a file replaced by `rename`).

use super::inode::Rewritable;
use crate::bytes::Bytes;

/// What was last shown of one rewritable file: enough to tell whether its next
/// version extends it (same inode) or rewrites it (the next generation).
#[derive(Default)]
pub(super) struct Shown {
    generation: u32,
    last: Last,
}

#[derive(Default)]
enum Last {
    /// Never shown.
    #[default]
    Nothing,
    /// The bytes, while they are held anyway (a loaded view's snapshots).
    Bytes(Bytes),
    /// A digest of them, once they were let go.
    Digest { len: usize, digest: u64 },
}

impl Shown {
    /// Takes `bytes` as the file shown now; returns its generation.
    pub fn observe(&mut self, bytes: &Bytes) -> u32 {
        let extends = match &self.last {
            Last::Nothing => true,
            Last::Bytes(old) => bytes.starts_with(old),
            Last::Digest { len, digest } => bytes.prefix_digest(*len) == Some(*digest),
        };
        if !extends {
            self.generation = Rewritable::next_generation(self.generation);
        }
        self.last = Last::Bytes(bytes.clone());
        self.generation
    }

    /// The generation last shown.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// The bytes are let go: keep a digest instead.
    pub fn let_go(&mut self) {
        if let Last::Bytes(bytes) = &self.last {
            self.last = Last::Digest {
                len: bytes.len(),
                digest: bytes.prefix_digest(bytes.len()).unwrap_or_default(),
            };
        }
    }
}
