//! The thin fuser adapter: each callback calls the filesystem model, then replies
//! with the result or with the error's errno, logging the reason. A panic in a
//! handler is caught and answered with EIO, so one bad request never takes the
//! mount down.

pub mod notify;

use std::ffi::OsStr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};

use crate::error::{Error, Unserved};
use crate::fs::setattr::AttrChange;
use crate::fs::{Attr, Caching, DirEntry, Kind, SessionFs};

/// The fuser `Filesystem` of one mount, over its [`SessionFs`].
pub struct FuseAdapter {
    fs: Arc<SessionFs>,
    /// How long the kernel may cache attributes and entries.
    ttl: Duration,
    /// The store, whose file system's free space `statfs` reports: forks are written
    /// there, and `df` lists a file system only when it has blocks.
    store: PathBuf,
    /// How many names to ask the model for per `readdir` and per `readdirplus`.
    names_batch: ListingBatch,
    entries_batch: ListingBatch,
}

/// How many entries to ask the model for per listing request. The kernel's
/// buffer is a page, or since Linux 6.x as large as the reader's (32 KiB for
/// `ls`: about 580 event names), and fuser does not say its size; so the batch
/// follows what the last replies held. Asking for too few costs a request per
/// batch (10,220 for the 1.3 M names of a huge `events/` at 128 a time).
#[derive(Debug)]
struct ListingBatch(AtomicUsize);

impl ListingBatch {
    const FLOOR: usize = 64;
    const CEILING: usize = 4096;

    fn new() -> ListingBatch {
        ListingBatch(AtomicUsize::new(Self::FLOOR))
    }

    fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// Learns from a reply that was asked `asked` entries and held `sent`:
    /// a full buffer sets the batch to a little more than it held (names
    /// vary in length); one that took every entry asked doubles it.
    fn learn(&self, asked: usize, sent: usize, full: bool) {
        let next = if full {
            sent + sent / 4 + 1
        } else if sent == asked {
            asked * 2
        } else {
            // The listing ended: nothing learnt about the buffer.
            return;
        };
        self.0
            .store(next.clamp(Self::FLOOR, Self::CEILING), Ordering::Relaxed);
    }
}

impl FuseAdapter {
    /// An adapter letting the kernel cache attributes and names for `ttl`;
    /// `statfs` reports the space of the file system holding `store`.
    pub fn new(fs: Arc<SessionFs>, ttl: Duration, store: PathBuf) -> FuseAdapter {
        FuseAdapter {
            fs,
            ttl,
            store,
            names_batch: ListingBatch::new(),
            entries_batch: ListingBatch::new(),
        }
    }

    /// How long the kernel may cache a node's attributes. A transcript only
    /// grows within its inode, and its growth is announced while its session
    /// is followed (`notify`): its attributes may be cached, so that a reader
    /// is not asked for them again before each `read` (grep over every
    /// transcript made 40 GETATTRs per file). Other rewritable files are not.
    fn attr_ttl(&self, ino: u64) -> Duration {
        if crate::fs::is_rewritable(ino) && !crate::fs::is_paged(ino) {
            Duration::ZERO
        } else {
            self.entry_ttl(ino)
        }
    }

    /// How long the kernel may cache a name. A session directory's name and
    /// attributes never change while mounted, and its removal is announced
    /// (`SessionFs::take_removed`): it may be cached long enough that `ls -l`
    /// of a root of 100,000 sessions stats names it listed seconds ago without
    /// a lookup each. A rewritten `transcript.md` moves to a new inode under a
    /// name still cached: the old inode answers ESTALE, and the kernel then
    /// looks the name up again (a name cached for no time at all would drop the
    /// inode, and its pages, at each use). The other rewritten files are read
    /// past the page cache and move to a new inode at a rewrite: their names
    /// are not cached, so a `stat` of the path never meets the older inode a
    /// descriptor still holds.
    fn entry_ttl(&self, ino: u64) -> Duration {
        if crate::fs::moves_when_rewritten(ino) {
            Duration::ZERO
        } else if crate::fs::is_session_dir(ino) {
            self.ttl.max(SESSION_DIR_TTL)
        } else {
            self.ttl
        }
    }
}

const SESSION_DIR_TTL: Duration = Duration::from_secs(60);

fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
        Kind::Symlink => FileType::Symlink,
    }
}

/// Above `i64::MAX`: the kernel links no dentry and changes no inode for a
/// `readdirplus` entry with this size, yet lists its name and inode number
/// (`fuse_direntplus_link` rejects the attributes, then forgets the entry).
/// fuser 0.18 sends `attr.ino` as both the node id and the listed inode, so
/// node id 0, the protocol's "no attributes", would list inode 0, which
/// glibc before 2.37 skips.
const WITHHELD_SIZE: u64 = u64::MAX;

/// Attributes for a `readdirplus` entry the fs gave none for: the kernel
/// ignores them and looks the name up when it is used.
fn withheld_attr(ino: u64, kind: Kind) -> FileAttr {
    let attr = Attr {
        ino,
        kind,
        size: 0,
        perm: 0,
        nlink: 1,
        mtime: std::time::UNIX_EPOCH,
        uid: 0,
        gid: 0,
    };
    FileAttr {
        size: WITHHELD_SIZE,
        blocks: 0,
        ..file_attr(&attr)
    }
}

fn file_attr(attr: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(attr.ino),
        size: attr.size,
        blocks: attr.size.div_ceil(512),
        atime: attr.mtime,
        mtime: attr.mtime,
        ctime: attr.mtime,
        crtime: attr.mtime,
        kind: file_type(attr.kind),
        perm: attr.perm,
        nlink: attr.nlink,
        uid: attr.uid,
        gid: attr.gid,
        rdev: 0,
        // `cat` and `cp` read in blocks of this size: a large file in 1 MiB
        // requests (the kernel's max_pages allows it) rather than eight of
        // 128 KiB. A small file keeps 128 KiB: with direct I/O the kernel pins
        // the whole buffer a read asks for, so a 1 MiB buffer made each read of
        // a small file cost four times as much.
        blksize: if attr.size >= 1 << 20 {
            1 << 20
        } else {
            128 << 10
        },
        flags: 0,
    }
}

fn unserved(request: Unserved) -> Errno {
    Errno::from_i32(request.errno())
}

/// Runs a handler, turning a panic into an EIO error.
fn guarded<T>(op: &str, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Errno> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => {
            if error.is_routine() {
                log::debug!("{op}: {error}");
            } else {
                log::warn!("{op} failed with errno {}: {error}", error.errno());
            }
            Err(Errno::from_i32(error.errno()))
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned());
            log::error!(
                "{op} panicked: {}; the request failed",
                what.unwrap_or_default()
            );
            Err(unserved(Unserved::Panicked))
        }
    }
}

/// The space of the file system holding the store, or `None` when it cannot be read.
fn store_space(store: &Path) -> Option<libc::statvfs> {
    let path = std::ffi::CString::new(store.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: a valid NUL-terminated path and a zeroed struct for statvfs to fill.
    unsafe {
        let mut space: libc::statvfs = std::mem::zeroed();
        (libc::statvfs(path.as_ptr(), &mut space) == 0).then_some(space)
    }
}

fn name_str(name: &OsStr) -> Result<&str, Error> {
    name.to_str()
        .ok_or_else(|| Error::NotFound("names in this filesystem are UTF-8".into()))
}

/// One of fuser's two directory replies. The cookie scheme and `.`/`..` are
/// written once, in [`FuseAdapter::reply_listing`]; a replier only adds what
/// it is handed, and says when the kernel's buffer is full.
trait DirectoryReplier {
    /// Adds `.` or `..` (of directory `dir`); true when the buffer is full.
    fn add_dot(&mut self, dir: INodeNo, cookie: u64, name: &str) -> bool;
    /// Adds one entry of the model's listing; true when the buffer is full.
    fn add_entry(&mut self, entry: DirEntry, cookie: u64) -> bool;
    /// Sends what was added.
    fn ok(self);
    /// Answers the listing with an error instead.
    fn error(self, errno: Errno);
}

/// `readdir`: names and kinds only.
struct Names(ReplyDirectory);

impl DirectoryReplier for Names {
    fn add_dot(&mut self, dir: INodeNo, cookie: u64, name: &str) -> bool {
        self.0.add(dir, cookie, FileType::Directory, name)
    }

    fn add_entry(&mut self, entry: DirEntry, cookie: u64) -> bool {
        self.0.add(
            INodeNo(entry.ino),
            cookie,
            file_type(entry.kind),
            &entry.name,
        )
    }

    fn ok(self) {
        self.0.ok()
    }

    fn error(self, errno: Errno) {
        self.0.error(errno)
    }
}

/// `readdirplus`: each entry with its attributes, found only for entries sent.
struct WithAttrs<'a> {
    adapter: &'a FuseAdapter,
    reply: ReplyDirectoryPlus,
    /// The directory's own attributes, which `.` and `..` carry (the kernel
    /// links no dentry for them, so they are never cached).
    own: FileAttr,
}

impl DirectoryReplier for WithAttrs<'_> {
    fn add_dot(&mut self, dir: INodeNo, cookie: u64, name: &str) -> bool {
        let ttl = Duration::ZERO;
        self.reply
            .add(dir, cookie, name, &ttl, &self.own, Generation(0))
    }

    fn add_entry(&mut self, entry: DirEntry, cookie: u64) -> bool {
        let fs = &self.adapter.fs;
        // A panic finding one entry's attributes ends the page there.
        let Ok(plus) = guarded("readdirplus", || Ok(fs.entry_plus(entry))) else {
            return true;
        };
        let (attr, ttl) = match &plus.attr {
            Some(attr) => (file_attr(attr), self.adapter.attr_ttl(plus.entry.ino)),
            None => (
                withheld_attr(plus.entry.ino, plus.entry.kind),
                Duration::ZERO,
            ),
        };
        let ino = INodeNo(plus.entry.ino);
        self.reply
            .add(ino, cookie, &plus.entry.name, &ttl, &attr, Generation(0))
    }

    fn ok(self) {
        self.reply.ok()
    }

    fn error(self, errno: Errno) {
        self.reply.error(errno)
    }
}

impl FuseAdapter {
    /// Answers one page of a listing from `offset`. Cookies: 1 and 2 are `.`
    /// and `..`; an entry's cookie is 2 + the offset the model continues from
    /// after it, so a cookie stays valid while entries come and go.
    fn reply_listing(
        &self,
        op: &str,
        dir: INodeNo,
        offset: u64,
        batch: &ListingBatch,
        mut replier: impl DirectoryReplier,
    ) {
        const DOTS: u64 = 2;
        let asked = batch.get();
        let entries = match guarded(op, || {
            self.fs.readdir(dir.0, offset.saturating_sub(DOTS), asked)
        }) {
            Ok(entries) => entries,
            Err(errno) => return replier.error(errno),
        };
        for (cookie, name) in [(1, "."), (DOTS, "..")] {
            if offset < cookie && replier.add_dot(dir, cookie, name) {
                return replier.ok();
            }
        }
        let (mut sent, mut full) = (0, false);
        for entry in entries {
            let cookie = entry.next + DOTS;
            if replier.add_entry(entry, cookie) {
                full = true;
                break;
            }
            sent += 1;
        }
        batch.learn(asked, sent, full);
        replier.ok()
    }
}

impl Filesystem for FuseAdapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // `echo N > fork` then opens with O_TRUNC instead of a separate truncate.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_ATOMIC_O_TRUNC);
        // A growing file's cached pages are dropped when its size or mtime changes.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_AUTO_INVAL_DATA);
        let _ = config.set_max_readahead(1 << 20);
        // Files that can be rewritten are read with direct I/O (each descriptor
        // its own snapshot); this lets them be mapped all the same (Linux 6.6+).
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
        // `ls -l` of the root gets each session's attributes with the listing.
        let _ = config.add_capabilities(
            fuser::InitFlags::FUSE_DO_READDIRPLUS | fuser::InitFlags::FUSE_READDIRPLUS_AUTO,
        );
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match guarded("lookup", || self.fs.lookup(parent.0, name_str(name)?)) {
            Ok(attr) => reply.entry_with_ttls(
                &self.attr_ttl(attr.ino),
                &self.entry_ttl(attr.ino),
                &file_attr(&attr),
                Generation(0),
            ),
            Err(errno) => reply.error(errno),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let result = guarded("getattr", || match fh {
            Some(fh) => self.fs.getattr_open(ino.0, fh.0),
            None => self.fs.getattr(ino.0),
        });
        match result {
            Ok(attr) => reply.attr(&self.attr_ttl(attr.ino), &file_attr(&attr)),
            Err(errno) => reply.error(errno),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<std::time::SystemTime>,
        _fh: Option<FileHandle>,
        crtime: Option<std::time::SystemTime>,
        chgtime: Option<std::time::SystemTime>,
        bkuptime: Option<std::time::SystemTime>,
        flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let change = AttrChange {
            size,
            mode_or_owner: mode.is_some() || uid.is_some() || gid.is_some() || flags.is_some(),
            modification_times: mtime.is_some() || ctime.is_some(),
            other_times: atime.is_some()
                || crtime.is_some()
                || chgtime.is_some()
                || bkuptime.is_some(),
        };
        let result = guarded("setattr", || self.fs.setattr(ino.0, change));
        match result {
            Ok(attr) => reply.attr(&self.ttl, &file_attr(&attr)),
            Err(errno) => reply.error(errno),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match guarded("readlink", || self.fs.readlink(ino.0)) {
            Ok(target) => reply.data(target.as_bytes()),
            Err(errno) => reply.error(errno),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let write = flags.0 & libc::O_ACCMODE != libc::O_RDONLY;
        match guarded("open", || self.fs.open(ino.0, write)) {
            Ok((fh, caching)) => {
                let flags = match caching {
                    Caching::Direct => FopenFlags::FOPEN_DIRECT_IO,
                    Caching::PageCache => FopenFlags::empty(),
                    Caching::KeepPageCache => FopenFlags::FOPEN_KEEP_CACHE,
                };
                reply.opened(FileHandle(fh), flags)
            }
            Err(errno) => reply.error(errno),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match guarded("read", || self.fs.read(fh.0, offset, size)) {
            Ok(data) => reply.data(data.as_slice()),
            Err(errno) => reply.error(errno),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match guarded("write", || self.fs.write(ino.0, data)) {
            Ok(written) => reply.written(written as u32),
            Err(errno) => reply.error(errno),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing is buffered per open file: control commands act inside write().
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.fs.release(fh.0);
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.reply_listing("readdir", ino, offset, &self.names_batch, Names(reply));
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        // More names than fit may be listed, but attributes are found only for those sent.
        match guarded("readdirplus", || self.fs.getattr(ino.0)) {
            Ok(own) => {
                let replier = WithAttrs {
                    adapter: self,
                    reply,
                    own: file_attr(&own),
                };
                self.reply_listing("readdirplus", ino, offset, &self.entries_batch, replier);
            }
            Err(errno) => reply.error(errno),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let files = self.fs.session_count() as u64;
        match store_space(&self.store) {
            Some(space) => reply.statfs(
                space.f_blocks,
                space.f_bfree,
                space.f_bavail,
                files,
                0,
                space.f_bsize as u32,
                255,
                space.f_frsize as u32,
            ),
            None => reply.statfs(0, 0, 0, files, 0, 4096, 255, 4096),
        }
    }

    // The tree is generated from the store: nothing can be created, removed or
    // renamed (error.rs chooses the answers).
    fn mknod(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        reply.error(unserved(Unserved::NamespaceChange));
    }

    fn mkdir(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        reply.error(unserved(Unserved::NamespaceChange));
    }

    fn unlink(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(unserved(Unserved::NamespaceChange));
    }

    fn rmdir(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(unserved(Unserved::NamespaceChange));
    }

    fn symlink(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        reply.error(unserved(Unserved::NamespaceChange));
    }

    fn rename(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _newparent: INodeNo,
        _newname: &OsStr,
        _flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(unserved(Unserved::NamespaceChange));
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply.error(unserved(Unserved::NamespaceChange));
    }

    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: fuser::ReplyCreate,
    ) {
        reply.error(unserved(Unserved::NamespaceChange));
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(unserved(Unserved::NamespaceChange));
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(unserved(Unserved::NamespaceChange));
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        reply.error(unserved(Unserved::Ioctl));
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(unserved(Unserved::Xattr));
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        reply.error(unserved(Unserved::Xattr));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::FsConfig;
    use crate::fs::inode::ROOT;
    use crate::model::header::SessionHeader;
    use crate::store::memory::MemoryStore;

    /// A kernel buffer that holds `room` entries, as mountpoint-s3's test
    /// replier caps entries per call, so paging is exercised without a mount.
    struct Page<'a> {
        room: usize,
        added: &'a mut Vec<(u64, String)>,
        answer: &'a mut Option<Result<(), Errno>>,
    }

    impl Page<'_> {
        fn push(&mut self, cookie: u64, name: &str) -> bool {
            if self.added.len() == self.room {
                return true;
            }
            self.added.push((cookie, name.to_string()));
            false
        }
    }

    impl DirectoryReplier for Page<'_> {
        fn add_dot(&mut self, _dir: INodeNo, cookie: u64, name: &str) -> bool {
            self.push(cookie, name)
        }

        fn add_entry(&mut self, entry: DirEntry, cookie: u64) -> bool {
            self.push(cookie, &entry.name)
        }

        fn ok(self) {
            *self.answer = Some(Ok(()));
        }

        fn error(self, errno: Errno) {
            *self.answer = Some(Err(errno));
        }
    }

    /// Lists `dir` page by page, each resumed from the last cookie sent, as
    /// the kernel does; `room` entries fit in a page.
    fn list_by_pages(adapter: &FuseAdapter, dir: u64, room: usize) -> Vec<String> {
        let (mut names, mut offset) = (Vec::new(), 0);
        loop {
            let (mut added, mut answer) = (Vec::new(), None);
            let page = Page {
                room,
                added: &mut added,
                answer: &mut answer,
            };
            adapter.reply_listing("readdir", INodeNo(dir), offset, &adapter.names_batch, page);
            assert_eq!(answer, Some(Ok(())));
            let Some(&(last, _)) = added.last() else {
                return names;
            };
            assert!(last > offset, "cookie {last} after offset {offset}");
            offset = last;
            names.extend(added.into_iter().map(|(_, name)| name));
        }
    }

    fn adapter_over(sessions: &[String]) -> FuseAdapter {
        let store = MemoryStore::default();
        for id in sessions {
            store.insert(SessionHeader::new(id, 1_772_457_300_000), Vec::new());
        }
        let fs = SessionFs::new(Box::new(store), FsConfig::default());
        FuseAdapter::new(fs, Duration::from_secs(1), PathBuf::from("/"))
    }

    #[test]
    fn paged_listings_send_the_dots_then_every_name_once() {
        let sessions: Vec<String> = (0..300).map(|n| format!("s{n:03}")).collect();
        let adapter = adapter_over(&sessions);
        for room in [1, 2, 3, 7, 128, 1000] {
            let names = list_by_pages(&adapter, ROOT, room);
            assert_eq!(names[..2], [".", ".."], "room {room}");
            assert!(!names[2..].iter().any(|name| name.starts_with('.')));
            let mut listed: Vec<&str> = names[2..]
                .iter()
                .map(String::as_str)
                .filter(|name| name.starts_with('s') && *name != "sessions.jsonl")
                .collect();
            listed.sort_unstable();
            let expected: Vec<&str> = sessions.iter().map(String::as_str).collect();
            assert_eq!(listed, expected, "room {room}");
        }
    }

    #[test]
    fn the_batch_grows_to_fill_a_large_buffer_and_shrinks_to_a_small_one() {
        let batch = ListingBatch::new();
        let request = |room: usize| {
            let asked = batch.get();
            // A reply asked more than fits is full at the first that does not.
            batch.learn(asked, asked.min(room), asked > room);
        };
        for _ in 0..8 {
            request(900);
        }
        assert!((900..=1126).contains(&batch.get()), "{}", batch.get());
        request(2000);
        assert!(batch.get() > 1800, "{}", batch.get());
        for _ in 0..3 {
            request(40);
        }
        assert_eq!(batch.get(), ListingBatch::FLOOR);
        let before = batch.get();
        batch.learn(before, 3, false);
        assert_eq!(batch.get(), before, "a listing that ended teaches nothing");
        for _ in 0..20 {
            request(usize::MAX);
        }
        assert_eq!(batch.get(), ListingBatch::CEILING);
    }

    #[test]
    fn a_listing_of_no_directory_is_answered_with_its_errno() {
        let adapter = adapter_over(&[]);
        let (mut added, mut answer) = (Vec::new(), None);
        let page = Page {
            room: 10,
            added: &mut added,
            answer: &mut answer,
        };
        adapter.reply_listing("readdir", INodeNo(u64::MAX), 0, &adapter.names_batch, page);
        assert_eq!(answer, Some(Err(Errno::ENOENT)));
        assert!(added.is_empty());
    }
}
