//! Sessions grouped by a name they share, for `by-project/` and `by-date/`:
//! each group keeps a number (its directory's inode) and its members' slots
//! in the order they were listed. Groups are only ever appended, like slots,
//! so a number keeps naming the same group while mounted; an emptied group
//! leaves the listing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};

/// Which of the two groupings: `by-project/` or `by-date/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum By {
    /// By the header's cwd.
    Project,
    /// By the UTC day of creation.
    Day,
}

/// No slot: a group (or the root) whose `latest` leads nowhere yet.
pub(super) const NO_SLOT: u32 = u32::MAX;

/// Groups of slots under names.
#[derive(Default)]
pub(super) struct Groups {
    names: Vec<String>,
    by_name: HashMap<String, u32>,
    members: Vec<Vec<u32>>,
    /// Each group's member with the newest event, moved without the table's
    /// write lock as sessions are used ([`NO_SLOT`]: none).
    latest: Vec<AtomicU32>,
}

impl Groups {
    /// Adds `slot` to the group `name` (made when new); returns its number.
    pub fn join(&mut self, name: String, slot: u32) -> u32 {
        let number = match self.by_name.get(&name) {
            Some(&number) => number,
            None => {
                let number = self.names.len() as u32;
                self.by_name.insert(name.clone(), number);
                self.names.push(name);
                self.members.push(Vec::new());
                self.latest.push(AtomicU32::new(NO_SLOT));
                number
            }
        };
        self.members[number as usize].push(slot);
        number
    }

    /// Takes `slot` out of group `number`.
    pub fn leave(&mut self, number: u32, slot: u32) {
        if let Some(members) = self.members.get_mut(number as usize) {
            members.retain(|&s| s != slot);
        }
    }

    /// The group named `name`, when it has members.
    pub fn by_name(&self, name: &str) -> Option<u32> {
        let number = *self.by_name.get(name)?;
        (!self.members[number as usize].is_empty()).then_some(number)
    }

    /// The member of group `number` with the newest event, or [`NO_SLOT`].
    pub fn latest(&self, number: u32) -> &AtomicU32 {
        &self.latest[number as usize]
    }

    /// The latest of group `number`, when it has one.
    pub fn latest_of(&self, number: u32) -> Option<u32> {
        let slot = self.latest.get(number as usize)?.load(Ordering::Relaxed);
        (slot != NO_SLOT).then_some(slot)
    }

    /// The members of group `number`, in the order they joined.
    pub fn members(&self, number: u32) -> &[u32] {
        self.members.get(number as usize).map_or(&[], Vec::as_slice)
    }

    /// Up to `limit` groups with members from group `from` on, each with its
    /// number.
    pub fn listed_from(&self, from: usize, limit: usize) -> Vec<(u32, String)> {
        self.names
            .iter()
            .enumerate()
            .skip(from)
            .filter(|(number, _)| !self.members[*number].is_empty())
            .take(limit)
            .map(|(number, name)| (number as u32, name.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_keep_their_numbers_and_an_empty_one_leaves_the_listing() {
        let mut groups = Groups::default();
        assert_eq!(groups.join("a".into(), 0), 0);
        assert_eq!(groups.join("b".into(), 1), 1);
        assert_eq!(groups.join("a".into(), 2), 0);
        assert_eq!(groups.members(0), &[0, 2]);
        groups.leave(1, 1);
        assert_eq!(groups.by_name("b"), None);
        assert_eq!(groups.listed_from(0, 10), vec![(0, "a".to_string())]);
        assert_eq!(groups.join("b".into(), 3), 1, "a group keeps its number");
        assert_eq!(groups.listed_from(1, 10), vec![(1, "b".to_string())]);
    }
}
