//! Change notification for a store's directories through Linux inotify, used
//! directly through libc (a few calls; a crate would add a dependency and an
//! event loop sessionfs does not need). A directory is watched, never a file,
//! so a log replaced by a rename or created after the watch is seen too.
//!
//! inotify does not see changes made on another machine (NFS, SMB, 9p, FUSE
//! stores): [`is_remote`] tells such stores, which are then polled.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

/// What changes a directory watch reports: entries made, removed, renamed,
/// written or changed in their metadata. Reads and opens are not changes.
const DIRECTORY_CHANGES: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_MODIFY
    | libc::IN_CLOSE_WRITE
    | libc::IN_ATTRIB
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF;

/// One reported change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The watch it belongs to.
    pub watch: i32,
    /// The entry of the watched directory it concerns (empty for the
    /// directory itself).
    pub name: String,
    /// Events were lost (the kernel's queue overflowed): anything may have changed.
    pub overflow: bool,
}

/// An inotify instance.
pub struct Watcher {
    fd: OwnedFd,
}

impl Watcher {
    /// A fresh inotify instance, non-blocking and closed on exec.
    pub fn new() -> io::Result<Watcher> {
        // SAFETY: inotify_init1 has no preconditions; a descriptor is returned or -1.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor we own.
        Ok(Watcher {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Watches a directory; the same directory watched twice gives the same
    /// watch. Fails with ENOSPC when the user's watch limit is reached.
    pub fn watch(&self, dir: &Path) -> io::Result<i32> {
        let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a valid descriptor and NUL-terminated path.
        let wd = unsafe {
            libc::inotify_add_watch(
                self.fd.as_raw_fd(),
                path.as_ptr(),
                DIRECTORY_CHANGES | libc::IN_ONLYDIR,
            )
        };
        if wd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(wd)
    }

    /// Stops a watch; an unknown one is ignored.
    pub fn unwatch(&self, watch: i32) {
        // SAFETY: a valid descriptor; an unknown watch is refused harmlessly.
        unsafe { libc::inotify_rm_watch(self.fd.as_raw_fd(), watch) };
    }

    /// Waits up to `timeout` for changes and returns those that arrived.
    pub fn wait(&self, timeout: Duration) -> Vec<Event> {
        let mut poll = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut poll, 1, ms) } <= 0 {
            return Vec::new();
        }
        let mut events = Vec::new();
        let mut buffer = vec![0u8; 64 << 10];
        loop {
            // SAFETY: reading into a buffer of the length given.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    buffer.as_mut_ptr().cast(),
                    buffer.len(),
                )
            };
            if n <= 0 {
                return events;
            }
            events.extend(parse_events(&buffer[..n as usize]));
        }
    }
}

/// The events of one `read` of an inotify descriptor.
fn parse_events(mut bytes: &[u8]) -> Vec<Event> {
    const HEADER: usize = std::mem::size_of::<libc::inotify_event>();
    let mut events = Vec::new();
    while bytes.len() >= HEADER {
        // SAFETY: at least a header's bytes remain; read_unaligned copes with
        // any alignment.
        let header: libc::inotify_event =
            unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
        let end = (HEADER + header.len as usize).min(bytes.len());
        let name = &bytes[HEADER..end];
        let name = &name[..name.iter().position(|b| *b == 0).unwrap_or(name.len())];
        events.push(Event {
            watch: header.wd,
            name: String::from_utf8_lossy(name).into_owned(),
            overflow: header.mask & libc::IN_Q_OVERFLOW != 0,
        });
        bytes = &bytes[end..];
    }
    events
}

/// The magic number `statfs` gives a FUSE file system.
const FUSE_MAGIC: i64 = 0x6573_5546;

/// True for a store on a filesystem whose changes inotify may not report:
/// network and FUSE filesystems, written to by other machines or processes
/// the kernel does not see.
pub fn is_remote(path: &Path) -> bool {
    const REMOTE: [i64; 10] = [
        0x6969, // NFS
        FUSE_MAGIC,
        0x517b,      // SMB
        0xff53_4d42, // CIFS
        0xfe53_4d42, // SMB2
        0x0102_1997, // 9P
        0x00c3_6400, // Ceph
        0x5346_414f, // AFS
        0x0bd0_0bd0, // Lustre
        0x0116_1970, // GFS2
    ];
    fs_magic(path).is_some_and(|magic| REMOTE.contains(&magic))
}

/// True for a store whose directories' times may stay put as entries come
/// and go: a FUSE file system other than sshfs (rclone keeps the time it first
/// listed; an object store has no directories to keep one). sshfs, NFS and
/// SMB pass the server's own times through.
pub fn directory_times_unreliable(path: &Path) -> bool {
    fs_magic(path) == Some(FUSE_MAGIC)
        && crate::mountinfo::containing(path).is_none_or(|mount| mount.fs_type != "fuse.sshfs")
}

/// The `statfs` type of the file system holding `path`.
fn fs_magic(path: &Path) -> Option<i64> {
    let path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statfs fills the zeroed struct for a valid path.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    Some(stat.f_type as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_in_a_watched_directory_is_reported_with_its_name() {
        let dir = std::env::temp_dir().join(format!("sessionfs-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let watcher = Watcher::new().unwrap();
        let wd = watcher.watch(&dir).unwrap();
        assert!(watcher.wait(Duration::ZERO).is_empty(), "nothing yet");
        std::fs::write(dir.join("session.jsonl"), b"{}\n").unwrap();
        let events = watcher.wait(Duration::from_secs(1));
        assert!(
            events
                .iter()
                .any(|e| e.watch == wd && e.name == "session.jsonl"),
            "{events:?}"
        );
        watcher.unwatch(wd);
        std::fs::write(dir.join("session.jsonl"), b"{}\n{}\n").unwrap();
        assert!(
            watcher
                .wait(Duration::from_millis(50))
                .iter()
                .all(|e| e.watch != wd || e.name.is_empty()),
            "no events after unwatching"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
