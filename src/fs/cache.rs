//! Which sessions hold a loaded view, in order of use, and what each costs: a
//! least-recently-used list threaded through a hash map, so that recording a
//! use, updating a cost and choosing the next view to drop are O(1) however
//! many sessions the store holds. Nothing here ever walks every session.
//!
//! The list knows slot numbers only; dropping a view is the caller's job (it
//! must lock that view), so this type never takes another lock.

use std::collections::HashMap;

struct Link {
    newer: Option<u32>,
    older: Option<u32>,
    bytes: usize,
}

#[derive(Default)]
pub struct Lru {
    links: HashMap<u32, Link>,
    newest: Option<u32>,
    oldest: Option<u32>,
    total: usize,
}

impl Lru {
    /// Records a use of `slot`, whose view now holds `bytes`: it becomes the
    /// most recently used.
    pub fn record(&mut self, slot: u32, bytes: usize) {
        self.unlink(slot);
        let link = Link {
            newer: None,
            older: self.newest,
            bytes,
        };
        if let Some(newest) = self.newest
            && let Some(l) = self.links.get_mut(&newest)
        {
            l.newer = Some(slot);
        }
        self.newest = Some(slot);
        if self.oldest.is_none() {
            self.oldest = Some(slot);
        }
        self.total += bytes;
        self.links.insert(slot, link);
    }

    /// Forgets `slot` (its view was dropped); returns what it held.
    pub fn remove(&mut self, slot: u32) -> Option<usize> {
        self.unlink(slot)
    }

    fn unlink(&mut self, slot: u32) -> Option<usize> {
        let link = self.links.remove(&slot)?;
        match link.newer {
            Some(newer) => {
                if let Some(l) = self.links.get_mut(&newer) {
                    l.older = link.older;
                }
            }
            None => self.newest = link.older,
        }
        match link.older {
            Some(older) => {
                if let Some(l) = self.links.get_mut(&older) {
                    l.newer = link.newer;
                }
            }
            None => self.oldest = link.newer,
        }
        self.total -= link.bytes;
        Some(link.bytes)
    }

    /// While the views hold more than `budget`, takes the least recently used
    /// one other than `keep` off the list and returns it with its cost.
    pub fn pop_victim(&mut self, budget: usize, keep: u32) -> Option<(u32, usize)> {
        if self.total <= budget {
            return None;
        }
        let victim = match self.oldest? {
            oldest if oldest == keep => self.links.get(&oldest)?.newer?,
            oldest => oldest,
        };
        self.unlink(victim).map(|bytes| (victim, bytes))
    }

    /// What `slot`'s loaded view holds.
    pub fn bytes_of(&self, slot: u32) -> Option<usize> {
        self.links.get(&slot).map(|link| link.bytes)
    }

    /// How many views are loaded.
    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// Bytes held by all loaded views.
    pub fn total(&self) -> usize {
        self.total
    }

    /// The slots with a loaded view, least recently used first.
    pub fn slots(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.links.len());
        let mut at = self.oldest;
        while let Some(slot) = at {
            out.push(slot);
            at = self.links.get(&slot).and_then(|l| l.newer);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uses_order_the_list_and_costs_add_up() {
        let mut lru = Lru::default();
        lru.record(1, 10);
        lru.record(2, 20);
        lru.record(3, 30);
        assert_eq!(lru.slots(), vec![1, 2, 3]);
        assert_eq!(lru.total(), 60);
        lru.record(1, 15);
        assert_eq!(lru.slots(), vec![2, 3, 1]);
        assert_eq!(lru.total(), 65);
        assert_eq!(lru.remove(3), Some(30));
        assert_eq!(lru.remove(3), None);
        assert_eq!(lru.slots(), vec![2, 1]);
        assert_eq!(lru.total(), 35);
    }

    #[test]
    fn victims_are_the_oldest_but_never_the_one_kept() {
        let mut lru = Lru::default();
        for slot in 0..5 {
            lru.record(slot, 10);
        }
        assert_eq!(lru.pop_victim(50, 4), None, "within budget");
        assert_eq!(lru.pop_victim(25, 4), Some((0, 10)));
        assert_eq!(lru.pop_victim(25, 4), Some((1, 10)));
        assert_eq!(lru.pop_victim(25, 4), Some((2, 10)));
        assert_eq!(lru.pop_victim(25, 4), None);
        // The kept view alone may exceed the budget: it is never its own victim.
        lru.record(4, 100);
        lru.record(3, 1);
        lru.record(4, 100);
        assert_eq!(lru.pop_victim(0, 4), Some((3, 1)));
        assert_eq!(lru.pop_victim(0, 4), None);
        assert_eq!(lru.slots(), vec![4]);
    }

    #[test]
    fn a_long_random_walk_keeps_the_list_and_the_total_consistent() {
        let mut lru = Lru::default();
        let mut model: Vec<(u32, usize)> = Vec::new();
        let mut seed = 7u64;
        for _ in 0..5000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let slot = (seed >> 33) as u32 % 50;
            let bytes = (seed >> 20) as usize % 1000;
            if seed.is_multiple_of(3) {
                lru.remove(slot);
                model.retain(|(s, _)| *s != slot);
            } else {
                lru.record(slot, bytes);
                model.retain(|(s, _)| *s != slot);
                model.push((slot, bytes));
            }
            assert_eq!(
                lru.slots(),
                model.iter().map(|(s, _)| *s).collect::<Vec<_>>()
            );
            assert_eq!(lru.total(), model.iter().map(|(_, b)| b).sum::<usize>());
        }
    }
}
