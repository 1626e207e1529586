//! Which mount is this daemon's own: its entry in `/proc/self/mountinfo`,
//! recorded right after mounting, so that unmounting never hits another mount
//! stacked on the same path later (a second sessionfs over it, or a new mount
//! after `umount -l`). `umount2(path)` acts on whatever is on top of `path`;
//! it is only called when that top mount is still this one.

use std::path::{Path, PathBuf};

/// One line of `/proc/self/mountinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// The mount's id, unique among mounts that exist at one time.
    pub id: u64,
    /// The device (`major:minor`); a FUSE mount's is its own connection's.
    pub device: String,
    /// Where it is mounted, mountinfo's octal escapes undone.
    pub mount_point: PathBuf,
    /// The filesystem type, from after the `-` separator (`fuse…` for a FUSE mount).
    pub fs_type: String,
}

/// Undoes mountinfo's octal escapes (`\040` for a space, and so on).
fn unescape(field: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            let text = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(text, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// The entries of a mountinfo text, in its order (a later mount on the same
/// path comes later).
pub fn parse(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let separator = fields.iter().position(|f| *f == "-")?;
            Some(MountEntry {
                id: fields.first()?.parse().ok()?,
                device: fields.get(2)?.to_string(),
                mount_point: unescape(fields.get(4)?),
                fs_type: fields.get(separator + 1)?.to_string(),
            })
        })
        .collect()
}

/// The mount on top of `path` now (the one a path lookup reaches).
pub fn top_at(path: &Path) -> Option<MountEntry> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    parse(&text)
        .into_iter()
        .rev()
        .find(|entry| entry.mount_point == path)
}

/// The mount that holds `path` (canonical): the one whose mount point is the
/// longest prefix of it, the latest of those stacked there.
pub fn containing(path: &Path) -> Option<MountEntry> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    holding(parse(&text), path)
}

/// Of `entries` (in mountinfo's order), the one that holds `path`.
fn holding(entries: Vec<MountEntry>, path: &Path) -> Option<MountEntry> {
    let mut best: Option<MountEntry> = None;
    for entry in entries {
        let deeper = best
            .as_ref()
            .is_none_or(|b| entry.mount_point.as_os_str().len() >= b.mount_point.as_os_str().len());
        if path.starts_with(&entry.mount_point) && deeper {
            best = Some(entry);
        }
    }
    best
}

/// This daemon's mount, as recorded when it was made.
pub struct OwnMount {
    /// The mount point, canonicalized.
    pub path: PathBuf,
    /// The mount's entry when it was made, compared with the top one before unmounting.
    pub entry: MountEntry,
}

impl OwnMount {
    /// Records the FUSE mount now on top of `path`: call right after mounting.
    pub fn record(path: &Path) -> Option<OwnMount> {
        let path = path.canonicalize().ok()?;
        let entry = top_at(&path).filter(|e| e.fs_type.starts_with("fuse"))?;
        Some(OwnMount { path, entry })
    }

    /// True while this mount is the one a lookup of its path reaches.
    pub fn is_on_top(&self) -> bool {
        top_at(&self.path).is_some_and(|top| top == self.entry)
    }

    /// Unmounts this mount (lazily when files are still open) if it is on top
    /// of its path; returns false, touching nothing, when it is not (covered by
    /// another mount, or already detached).
    pub fn unmount(&self) -> bool {
        if !self.is_on_top() {
            return false;
        }
        let Ok(path) = std::ffi::CString::new(self.path.as_os_str().as_encoded_bytes()) else {
            return false;
        };
        // SAFETY: a valid NUL-terminated path.
        if unsafe { libc::umount2(path.as_ptr(), 0) } == 0 {
            return true;
        }
        // Busy: detach lazily, once more only if it is still ours on top.
        // SAFETY: as above.
        self.is_on_top() && unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) } == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
97 22 0:52 / /mnt/a\\040b rw,nosuid,nodev,relatime shared:50 - fuse.sessionfs /store rw,user_id=0,group_id=0
98 97 0:53 / /mnt/a\\040b rw,nosuid,nodev,relatime shared:51 - fuse.sessionfs /other rw,user_id=0,group_id=0
";

    #[test]
    fn entries_are_parsed_with_escaped_paths() {
        let entries = parse(SAMPLE);
        assert_eq!(entries.len(), 3);
        assert_eq!(
            entries[1],
            MountEntry {
                id: 97,
                device: "0:52".into(),
                mount_point: PathBuf::from("/mnt/a b"),
                fs_type: "fuse.sessionfs".into(),
            }
        );
    }

    #[test]
    fn the_later_of_stacked_mounts_is_on_top() {
        let top = parse(SAMPLE)
            .into_iter()
            .rev()
            .find(|e| e.mount_point == Path::new("/mnt/a b"));
        assert_eq!(top.map(|e| e.id), Some(98));
    }

    #[test]
    fn a_path_is_held_by_the_deepest_mount_above_it_and_the_latest_stacked_there() {
        let held = |path: &str| holding(parse(SAMPLE), Path::new(path)).map(|e| e.id);
        assert_eq!(held("/mnt/a b/project/session"), Some(98));
        assert_eq!(held("/mnt/a b"), Some(98));
        assert_eq!(held("/mnt/a"), Some(22), "components, not characters");
        assert_eq!(held("/etc"), Some(22));
    }
}
