//! The pure session model: events, the surface, the request header, crash repair
//! and fork rules. Nothing here touches files or FUSE.

pub mod activity;
pub mod catalog;
pub mod chunk_rows;
pub mod fold;
pub mod fork;
pub mod header;
pub mod ids;
pub mod latest;
pub mod legacy;
pub mod quick;
pub mod repair;
pub mod steps;
pub mod surface;
pub mod validate;

use crate::json::JsonMap;

/// One stored event as a backend hands it to the fold.
#[derive(Clone, Debug, PartialEq)]
pub enum Scanned {
    /// Any other stored event, whole.
    Event(JsonMap),
    /// A streamed `assistant/chunk` other than a `finish`: its contents stay in
    /// the store and are fetched when its file is read.
    Chunk {
        /// The chunk's `seq`.
        seq: u64,
        /// The chunk's `time`, in Unix milliseconds.
        time: i64,
        /// The turn and step the chunk names, to match it to its `step/start`.
        step: ChunkStep,
        /// The length of the event pretty-printed (`json::pretty_line`).
        size: u64,
    },
}

/// The `data.turn` and `data.step` of a chunk, as numbers compare in the
/// Harness's JS (the boundary rule of `steps/` matches them to a `step/start`).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ChunkStep {
    /// `data.turn`, as a JS number.
    #[serde(with = "f64_bits")]
    pub turn: f64,
    /// `data.step`, as a JS number.
    #[serde(with = "f64_bits")]
    pub step: f64,
}

/// A run of `assistant/chunk` events of one step: the first seq, and each
/// event's time and pretty-printed length.
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkRun {
    /// The seq of the run's first event; the others follow it without a gap.
    pub seq0: u64,
    /// Each event's `time`, in Unix milliseconds.
    pub times: Vec<i64>,
    /// Each event's pretty-printed length (`json::pretty_line`).
    pub sizes: Vec<u64>,
    /// The turn and step every event of the run names.
    pub step: ChunkStep,
}

impl ChunkRun {
    /// The run's events one by one, as a backend hands them to the fold.
    pub fn events(&self) -> impl Iterator<Item = Scanned> + '_ {
        (self.seq0..)
            .zip(self.times.iter().zip(&self.sizes))
            .map(|(seq, (time, size))| Scanned::Chunk {
                seq,
                time: *time,
                step: self.step,
                size: *size,
            })
    }
}

/// Why a session cannot be shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The log is intact but this build cannot read it (a newer format or type).
    Unsupported(String),
    /// The log is damaged where it was already committed.
    Corrupt(String),
    /// The log cannot be read right now (permission denied, an I/O error, a
    /// database busy past its timeout, a file removed mid-read): no verdict on
    /// its content, and the next access tries again. `error.rs` answers a
    /// reader according to `cause`.
    Unavailable {
        /// What the store saw, which chooses the errno.
        cause: Cause,
        /// The sentence the user is shown.
        reason: String,
    },
}

/// Why a store cannot be read now, as the store saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// Another process holds the store past the wait (a database busy or locked).
    Busy,
    /// Permission to read it was refused.
    Denied,
    /// The file could not be opened or read (an I/O failure).
    Failed,
    /// Memory ran out while reading.
    OutOfMemory,
    /// The session was removed while it was being read.
    Removed,
    /// A system call failed with this error number.
    System(i32),
}

impl Refusal {
    /// The sentence the user is shown.
    pub fn message(&self) -> &str {
        match self {
            Refusal::Unsupported(m) | Refusal::Corrupt(m) => m,
            Refusal::Unavailable { reason, .. } => reason,
        }
    }

    /// True for trouble reading the store now, as opposed to what was read.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Refusal::Unavailable { .. })
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

/// A float saved as its bits, so that it reads back exactly (a decimal
/// rendering need not, and NaN has none).
mod f64_bits {
    pub fn serialize<S: serde::Serializer>(value: &f64, out: S) -> Result<S::Ok, S::Error> {
        out.serialize_u64(value.to_bits())
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(input: D) -> Result<f64, D::Error> {
        <u64 as serde::Deserialize>::deserialize(input).map(f64::from_bits)
    }
}
