//! The catalogue: store listings turned into what the root's index entries
//! show, between the store (which lists) and the fs (which serves). It reads
//! no log: everything comes from a listing ([`crate::store::Listing`]).

use crate::render::catalog::CatalogLine;
use crate::store::jsonl::is_zstd;
use crate::store::{Listing, SessionKey};

/// The store kind a listing names: `jsonl`, `zstd` or `sqlite`.
pub fn store_kind(key: &SessionKey) -> &'static str {
    match key {
        SessionKey::File(path) if is_zstd(path) => "zstd",
        SessionKey::File(_) => "jsonl",
        SessionKey::Row(_) => "sqlite",
    }
}

/// One `sessions.jsonl` line for a session shown at the root as `name`.
pub fn catalog_line(name: &str, listing: &Listing) -> Vec<u8> {
    let header = listing.header.as_ref().ok();
    CatalogLine {
        name,
        id: &listing.id,
        cwd: header.and_then(|h| h.cwd.as_deref()),
        created_at: header.map(|h| h.created_at),
        last_write: listing.stored.map(|s| s.modified_ms),
        size: listing.stored.map(|s| s.size),
        store: store_kind(&listing.key),
        parent: header.and_then(|h| h.parent_session.as_deref()),
        delegation_depth: header.and_then(|h| h.delegation_depth),
    }
    .render()
}

/// The whole of `sessions.jsonl` for sessions in listing order, each with
/// its name at the root: one snapshot, so its size is exact.
pub fn sessions_jsonl<'a>(sessions: impl IntoIterator<Item = (&'a str, &'a Listing)>) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, listing) in sessions {
        out.extend(catalog_line(name, listing));
    }
    out
}
