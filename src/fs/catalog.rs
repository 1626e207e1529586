//! The root's `sessions.jsonl`, rendered from the sessions table: one line per
//! session shown, in name order.

use std::sync::Arc;

use super::sessions::Slot;
use crate::render::catalog::CatalogLine;
use crate::sync::lock;

/// The fewest lines worth a thread of their own.
const PART: usize = 4096;

/// The lines of `shown`, in its order.
pub(super) fn render(shown: &[&Arc<Slot>]) -> Vec<u8> {
    in_parts(shown, |slot, out| {
        let listed = lock(&slot.listed);
        let readable = listed.unreadable.is_none();
        CatalogLine {
            name: &slot.name,
            id: &slot.id,
            cwd: listed.cwd.as_deref(),
            created_at: readable.then_some(listed.created_at),
            last_write: listed.stored.map(|s| s.modified_ms),
            size: listed.stored.map(|s| s.size),
            store: crate::catalog::store_kind(&listed.source.key),
            parent: listed.parent.as_deref(),
            delegation_depth: listed.delegation_depth,
        }
        .render_into(out)
    })
}

/// Each item's line, in order, as `line` appends it to a part's buffer. A
/// large root renders on every core: the first `stat` of the file waits for
/// all of it (its size).
fn in_parts<T: Sync>(items: &[T], line: impl Fn(&T, &mut Vec<u8>) + Sync) -> Vec<u8> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let part = items.len().div_ceil(cores).max(PART);
    let line = &line;
    let parts: Vec<Vec<u8>> = std::thread::scope(|scope| {
        let rendering: Vec<_> = items
            .chunks(part)
            .map(|items| {
                scope.spawn(move || {
                    let mut part = Vec::new();
                    for item in items {
                        line(item, &mut part);
                    }
                    part
                })
            })
            .collect();
        rendering
            .into_iter()
            .map(|part| part.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    parts.concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_rendered_in_parts_are_the_lines_rendered_in_turn() {
        let line = |n: &usize, out: &mut Vec<u8>| out.extend(format!("{{\"n\":{n}}}\n").bytes());
        for count in [0, 1, PART - 1, PART, PART + 1, 3 * PART + 17] {
            let items: Vec<usize> = (0..count).collect();
            let mut in_turn = Vec::new();
            for item in &items {
                line(item, &mut in_turn);
            }
            assert_eq!(in_parts(&items, line), in_turn, "{count} lines");
        }
    }
}
