//! The root's lists of the sessions, all made from the store's listing (no
//! log is read for them): `sessions.jsonl`, one line per session; `latest`,
//! a link to the session with the newest event; `by-project/NAME/` and
//! `by-date/YYYY-MM-DD/`, links to the sessions of a project (its cwd, `/`
//! shown as `∕`, with a `latest` of its own) or of a day of creation (UTC).

use std::sync::Arc;

use super::attr::dir_perm;
use super::clock::time_of;
use super::groups::By;
use super::inode::{Ino, Lists};
use super::sessions::Slot;
use super::{Attr, DirEntry, Kind, SessionFs};
use crate::error::{Error, Result};
use crate::sync::lock;
use crate::view::Content;

/// The root's lists, by name, in the order the root lists them.
pub(super) const ROOT_LISTS: [(&str, Lists, Kind); 4] = [
    ("sessions.jsonl", Lists::Catalog(0), Kind::File),
    ("latest", Lists::Latest, Kind::Symlink),
    ("by-project", Lists::ByProject, Kind::Dir),
    ("by-date", Lists::ByDate, Kind::Dir),
];

/// The directory of group `number` of a grouping.
fn group_dir(by: By, number: u32) -> Lists {
    match by {
        By::Project => Lists::Project(number),
        By::Day => Lists::Day(number),
    }
}

/// The grouping a list directory (or its parent) belongs to.
fn grouping(list: Lists) -> By {
    match list {
        Lists::ByDate | Lists::Day(_) => By::Day,
        _ => By::Project,
    }
}

impl Slot {
    /// Its group in a grouping (`None`: its header could not be read).
    fn group(&self, by: By) -> Option<u32> {
        match by {
            By::Project => self.project,
            By::Day => self.day,
        }
    }
}

impl SessionFs {
    /// The root list named `name`, in its current generation.
    pub(super) fn root_list(&self, name: &str) -> Option<Lists> {
        match ROOT_LISTS.iter().find(|(n, _, _)| *n == name)?.1 {
            Lists::Catalog(_) => {
                // Opened by name, it shows the store as it is now.
                self.relist(self.config.relist);
                Some(Lists::Catalog(self.sessions.catalog().0))
            }
            Lists::Latest => {
                // Looked up by name, it may lead to a session not listed yet.
                self.relist(self.config.relist);
                Some(Lists::Latest)
            }
            list => Some(list),
        }
    }

    /// Looks `name` up in `by-project/`, `by-date/` or one of their directories.
    pub(super) fn lists_lookup(&self, parent: Lists, name: &str) -> Result<Attr> {
        let missing = || Error::NotFound(format!("no entry {name}"));
        let entry = match parent {
            Lists::ByProject | Lists::ByDate => {
                let by = grouping(parent);
                let find = || self.sessions.group_by_name(by, name);
                // A name not known yet may be a project or day just added.
                let group = find()
                    .or_else(|| {
                        self.relist(self.config.relist);
                        find()
                    })
                    .ok_or_else(missing)?;
                group_dir(by, group)
            }
            Lists::Project(group) if name == "latest" => Lists::ProjectLatest(group),
            Lists::Project(group) | Lists::Day(group) => {
                let by = grouping(parent);
                let slot = self.sessions.by_name(name).ok_or_else(missing)?;
                // A slot knows its own groups: no walk over the members.
                if self.slot(slot)?.group(by) != Some(group) {
                    return Err(missing());
                }
                Lists::Link(slot)
            }
            _ => return Err(Error::NotDir(format!("{name}: not in a directory"))),
        };
        self.getattr(Ino::Lists(entry).encode())
    }

    /// Up to `limit` entries of a list directory from `offset` on.
    pub(super) fn lists_readdir(
        &self,
        dir: Lists,
        offset: u64,
        limit: usize,
    ) -> Result<Vec<DirEntry>> {
        match dir {
            Lists::ByProject | Lists::ByDate => {
                let by = grouping(dir);
                if offset == 0 {
                    self.relist(self.config.relist);
                }
                Ok(self
                    .sessions
                    .groups_from(by, offset as usize, limit)
                    .into_iter()
                    .map(|(group, name)| DirEntry {
                        ino: Ino::Lists(group_dir(by, group)).encode(),
                        kind: Kind::Dir,
                        name,
                        next: u64::from(group) + 1,
                    })
                    .collect())
            }
            Lists::Project(group) | Lists::Day(group) => {
                let by = grouping(dir);
                // A project's `latest` first, at offset 0; member `k` at `k + 1`.
                let latest = (by == By::Project
                    && offset == 0
                    && self.sessions.latest(Some(group)).is_some())
                .then(|| DirEntry {
                    ino: Ino::Lists(Lists::ProjectLatest(group)).encode(),
                    kind: Kind::Symlink,
                    name: "latest".into(),
                    next: 1,
                });
                let room = limit - usize::from(latest.is_some());
                let from = offset.saturating_sub(1) as usize;
                let links = self
                    .sessions
                    .members_from(by, group, from, room)
                    .into_iter()
                    .map(|(k, slot)| DirEntry {
                        ino: Ino::Lists(Lists::Link(slot.number)).encode(),
                        kind: Kind::Symlink,
                        name: slot.name.clone(),
                        next: k as u64 + 2,
                    });
                Ok(latest.into_iter().chain(links).take(limit).collect())
            }
            _ => Err(Error::NotDir("not a directory".into())),
        }
    }

    /// The attributes of a list entry.
    pub(super) fn lists_attr(&self, entry: Lists) -> Result<Attr> {
        let ino = Ino::Lists(entry).encode();
        let perm = self.root_read_bits();
        match entry {
            Lists::Catalog(_) => {
                let content = self.catalog_file(entry)?;
                let size = content.bytes.len() as u64;
                Ok(self.make_attr(ino, Kind::File, size, perm, self.started))
            }
            Lists::ByProject | Lists::ByDate => {
                Ok(self.make_attr(ino, Kind::Dir, 0, dir_perm(perm), self.started))
            }
            Lists::Project(group) | Lists::Day(group) => {
                let by = grouping(entry);
                // The time of its newest session: it changes only when one joins.
                let newest = self
                    .sessions
                    .newest_created(by, group)
                    .ok_or_else(|| Error::NotFound(format!("no group {group}")))?;
                let time = time_of(newest);
                Ok(self.make_attr(ino, Kind::Dir, 0, dir_perm(perm), time))
            }
            Lists::Latest | Lists::ProjectLatest(_) => {
                let (_, target) = self.latest_target(entry)?;
                // The mount's time, not its session's: a copy made twice in a
                // row (`rsync -a`) finds nothing to update while it leads to
                // the same session, though that session's events are newer.
                Ok(self.make_attr(ino, Kind::Symlink, target.len() as u64, 0o777, self.started))
            }
            Lists::Link(number) => {
                let slot = self.slot(number)?;
                if slot.is_gone() || slot.project.is_none() {
                    return Err(Error::NotFound(format!("no session slot {number}")));
                }
                let target = Self::link_target(&slot.name);
                let created = time_of(lock(&slot.listed).created_at);
                Ok(self.make_attr(ino, Kind::Symlink, target.len() as u64, 0o777, created))
            }
        }
    }

    /// The session a `latest` link leads to, and its target: at the root, the
    /// session's name; in a project's directory, `../../` and its name.
    pub(super) fn latest_target(&self, entry: Lists) -> Result<(Arc<Slot>, String)> {
        let project = match entry {
            Lists::Latest => None,
            Lists::ProjectLatest(group) => Some(group),
            _ => return Err(Error::Invalid("not a latest link".into())),
        };
        let slot = self
            .sessions
            .latest(project)
            .ok_or_else(|| Error::NotFound("no session yet".into()))?;
        let target = match project {
            None => slot.name.clone(),
            Some(_) => Self::link_target(&slot.name),
        };
        Ok((slot, target))
    }

    /// Where a link in a project's or a day's directory leads.
    pub(super) fn link_target(name: &str) -> String {
        format!("../../{name}")
    }

    /// `sessions.jsonl` as inode `entry` shows it: ESTALE once it was rewritten
    /// (a descriptor open on it keeps its snapshot).
    pub(super) fn catalog_file(&self, entry: Lists) -> Result<Content> {
        let Lists::Catalog(generation) = entry else {
            return Err(Error::IsDir("not a regular file".into()));
        };
        let (now, bytes) = self.sessions.catalog();
        if now != generation {
            return Err(Error::Stale(
                "sessions.jsonl was rewritten (the store's sessions changed); open it again".into(),
            ));
        }
        Ok(Content {
            bytes,
            lineage: u64::from(generation),
        })
    }
}
