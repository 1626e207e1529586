//! Which session is `latest`, at the root and in each `by-project/` directory,
//! kept up to date as listings and writes report sessions, so a lookup of
//! `latest` reads one ordered set instead of walking every session.
//!
//! The newest session is the one with the greatest last-write time; among equal
//! times, the greatest id, so the answer never depends on arrival order.
//! Every operation costs O(log n).

use std::collections::{BTreeSet, HashMap};

/// The newest session overall and per project.
#[derive(Debug, Default)]
pub struct Latest {
    sessions: HashMap<String, Entry>,
    overall: BTreeSet<(i64, String)>,
    by_project: HashMap<String, BTreeSet<(i64, String)>>,
}

#[derive(Debug)]
struct Entry {
    project: String,
    last_write: i64,
}

impl Latest {
    /// Records a session's project and last write (ms), replacing what was known.
    pub fn update(&mut self, id: &str, project: &str, last_write: i64) {
        if let Some(entry) = self.sessions.get(id)
            && entry.project == project
            && entry.last_write == last_write
        {
            return;
        }
        self.remove(id);
        let key = (last_write, id.to_string());
        self.overall.insert(key.clone());
        self.by_project
            .entry(project.to_string())
            .or_default()
            .insert(key);
        let project = project.to_string();
        self.sessions.insert(
            id.to_string(),
            Entry {
                project,
                last_write,
            },
        );
    }

    /// Forgets a session that left the store.
    pub fn remove(&mut self, id: &str) {
        let Some(entry) = self.sessions.remove(id) else {
            return;
        };
        let key = (entry.last_write, id.to_string());
        self.overall.remove(&key);
        if let Some(set) = self.by_project.get_mut(&entry.project) {
            set.remove(&key);
            if set.is_empty() {
                self.by_project.remove(&entry.project);
            }
        }
    }

    /// The newest session of all.
    pub fn newest(&self) -> Option<&str> {
        self.overall.last().map(|(_, id)| id.as_str())
    }

    /// The newest session of one project.
    pub fn newest_in(&self, project: &str) -> Option<&str> {
        let set = self.by_project.get(project)?;
        set.last().map(|(_, id)| id.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer by a walk over every session, which `Latest` must equal.
    fn walked<'a>(
        known: &'a HashMap<String, (String, i64)>,
        project: Option<&str>,
    ) -> Option<&'a str> {
        known
            .iter()
            .filter(|(_, (p, _))| project.is_none_or(|want| p == want))
            .max_by(|(a, (_, ta)), (b, (_, tb))| (ta, a).cmp(&(tb, b)))
            .map(|(id, _)| id.as_str())
    }

    #[test]
    fn matches_a_walk_over_every_session_through_a_random_history() {
        let mut state: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let projects = ["home∕ana∕proj", "_no-cwd", "srv∕x"];
        let mut latest = Latest::default();
        let mut known: HashMap<String, (String, i64)> = HashMap::new();
        for _ in 0..5_000 {
            let id = format!("s{}", next() % 40);
            if next().is_multiple_of(7) {
                latest.remove(&id);
                known.remove(&id);
            } else {
                let project = projects[(next() % 3) as usize];
                let time = (next() % 50) as i64;
                latest.update(&id, project, time);
                known.insert(id, (project.to_string(), time));
            }
            assert_eq!(latest.newest(), walked(&known, None));
            for project in projects {
                assert_eq!(latest.newest_in(project), walked(&known, Some(project)));
            }
        }
    }

    #[test]
    fn latest_moves_when_another_session_becomes_newer() {
        let mut latest = Latest::default();
        latest.update("a", "p", 10);
        latest.update("b", "q", 5);
        assert_eq!(latest.newest(), Some("a"));
        latest.update("b", "q", 11);
        assert_eq!(latest.newest(), Some("b"));
        assert_eq!(latest.newest_in("p"), Some("a"));
        latest.remove("b");
        assert_eq!(latest.newest(), Some("a"));
        assert_eq!(latest.newest_in("q"), None);
    }
}
