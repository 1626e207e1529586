//! `sessionfs STORE MOUNTPOINT`: parse the command line, detach (unless `-f`),
//! mount, serve, and unmount cleanly on SIGINT, SIGTERM or `umount`.
//!
//! Exit status: 0 after a clean unmount, 1 when the mount cannot happen or a
//! runtime failure ends it, 2 for a usage error.

#![warn(missing_docs)]

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::process::ExitCode;
use std::sync::Arc;

use fuser::{Config, MountOption, SessionACL};
use sessionfs::cli::{self, Command, IndexPlace, Options};
use sessionfs::fs::writeback::FlushScope;
use sessionfs::fs::{FsConfig, SessionFs};
use sessionfs::fuse::FuseAdapter;
use sessionfs::mountinfo::OwnMount;
use sessionfs::persist::PersistentIndex;
use sessionfs::view::SavedScans;

/// Buffers of 1 MiB or more (a session's transcript, a batch of frames) are
/// mapped and unmapped on their own. glibc would otherwise raise this threshold
/// to the largest buffer freed so far and serve later ones from its heaps,
/// which keep freed memory: the daemon's footprint would then follow the most
/// it ever held, not its cache budget.
fn return_large_buffers_at_once() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets an allocator parameter; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

fn main() -> ExitCode {
    return_large_buffers_at_once();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match cli::parse(&args) {
        Ok(Command::Help) => {
            print!("{}", cli::USAGE);
            return ExitCode::SUCCESS;
        }
        Ok(Command::Version) => {
            println!("sessionfs {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Ok(Command::Mount(options)) => options,
        Err(message) => {
            eprintln!("sessionfs: {message}\nTry 'sessionfs --help' for more information.");
            return ExitCode::from(2);
        }
    };
    // fuser's own warnings are mostly about requests it answers by default.
    let default_level = if options.debug {
        "debug"
    } else {
        "warn,fuser=error"
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default_level))
        .init();

    // Check what can be checked before detaching, so the error reaches the user.
    if let Err(message) = preflight(&options) {
        eprintln!("sessionfs: {message}");
        return ExitCode::from(1);
    }
    if options.foreground {
        return match serve(&options, None) {
            Ok(()) => ExitCode::SUCCESS,
            Err(message) => {
                eprintln!("sessionfs: {message}");
                ExitCode::from(1)
            }
        };
    }
    daemonize(&options)
}

fn preflight(options: &Options) -> Result<(), String> {
    let meta = std::fs::metadata(&options.mountpoint).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOTCONN) => format!(
            "mount point {} is a stale mount (transport endpoint is not connected): run `umount {0}` or `fusermount3 -u {0}` first",
            options.mountpoint.display()
        ),
        _ => format!("mount point {}: {e}", options.mountpoint.display()),
    })?;
    if !meta.is_dir() {
        return Err(format!(
            "mount point {} is not a directory",
            options.mountpoint.display()
        ));
    }
    sessionfs::fuse_device::check()?;
    // Opening the store checks that it is a Harness store at all.
    sessionfs::store::open(&options.store).map(|_| ())
}

/// Forks before any thread exists; the parent exits 0 only once the child reports
/// that the mount is live, or 1 with the child's message.
fn daemonize(options: &Options) -> ExitCode {
    let mut fds = [0; 2];
    // SAFETY: pipe() fills two descriptors we then own.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        eprintln!(
            "sessionfs: cannot create a pipe: {}",
            std::io::Error::last_os_error()
        );
        return ExitCode::from(1);
    }
    // SAFETY: the descriptors were just created by pipe().
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: no threads exist yet, so the child may keep running Rust code.
    match unsafe { libc::fork() } {
        -1 => {
            eprintln!(
                "sessionfs: cannot fork: {}",
                std::io::Error::last_os_error()
            );
            ExitCode::from(1)
        }
        0 => {
            drop(read_end);
            // SAFETY: setsid() has no preconditions in a fresh child.
            unsafe { libc::setsid() };
            let status = std::fs::File::from(write_end);
            // A failure reaches the parent through the pipe, which prints it.
            match serve(options, Some(status)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::from(1),
            }
        }
        _ => {
            drop(write_end);
            let mut answer = String::new();
            let _ = std::fs::File::from(read_end).read_to_string(&mut answer);
            match answer.strip_prefix('E') {
                None if answer.starts_with("ok") => ExitCode::SUCCESS,
                None => {
                    eprintln!("sessionfs: the mount process ended before the mount was live");
                    ExitCode::from(1)
                }
                Some(message) => {
                    eprintln!("sessionfs: {message}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

/// Mounts and serves until unmounted. `ready` (the daemon's pipe to its parent)
/// gets `ok` once the mount is live, or `E` and the reason it could not be.
fn serve(options: &Options, mut ready: Option<std::fs::File>) -> Result<(), String> {
    let result = mount_and_serve(options, &mut ready);
    if let (Err(message), Some(mut pipe)) = (&result, ready) {
        let _ = pipe.write_all(format!("E{message}").as_bytes());
    }
    result
}

/// Why the mount takes no writes: `-o ro`, or an SQLite database on a network
/// or FUSE file system, where SQLite's locking cannot keep two writers apart
/// (said once in the log; `-o unsafe_network_sqlite_writes` overrides it).
fn read_only_reason(options: &Options) -> Option<String> {
    if options.read_only {
        return Some("the mount is read-only (-o ro)".into());
    }
    let sqlite = options.store.is_file();
    if !sqlite
        || options.unsafe_network_sqlite_writes
        || !sessionfs::store::watch::is_remote(&options.store)
    {
        return None;
    }
    let why = format!(
        "the SQLite store {} is on a network or FUSE file system, where SQLite's locking is not safe: \
         forks are refused (mount with -o unsafe_network_sqlite_writes to fork anyway, at the risk \
         of a corrupt database)",
        options.store.display()
    );
    log::warn!("mounted read-only: {why}");
    Some(why)
}

/// The store's persistent index, unless `-o noindex`; a mount without one
/// says why once and reads each log whole.
fn persistent_index(options: &Options) -> Option<PersistentIndex> {
    let base = match &options.index {
        IndexPlace::Off => return None,
        IndexPlace::Dir(dir) => dir.clone(),
        IndexPlace::Default => match PersistentIndex::default_base() {
            Some(base) => base,
            None => {
                log::warn!("no persistent index: neither XDG_CACHE_HOME nor HOME is set");
                return None;
            }
        },
    };
    let opened = options
        .store
        .canonicalize()
        .map_err(|e| e.to_string())
        .and_then(|store| PersistentIndex::open(&base, &store, options.index_max_bytes));
    match opened {
        Ok(index) => {
            log::info!("persistent index in {}", index.dir().display());
            Some(index)
        }
        Err(why) => {
            log::warn!("no persistent index: {why}; every log is read whole");
            None
        }
    }
}

fn mount_and_serve(options: &Options, ready: &mut Option<std::fs::File>) -> Result<(), String> {
    // Signals are handled by one thread with sigwait; every thread blocks them,
    // so they are blocked before any thread starts (the index writer is one).
    let signals = block_signals();
    let store = sessionfs::store::open(&options.store)?;
    let description = store.describe();
    let read_only = read_only_reason(options);
    let index = persistent_index(options).map(Arc::new);
    if let Some(index) = &index {
        store.remember_headers(index.clone());
    }
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let config = FsConfig {
        uid: options.uid.unwrap_or(uid),
        gid: options.gid.unwrap_or(gid),
        repair: options.repair && read_only.is_none(),
        read_only,
        grace: options.grace,
        cache_bytes: options.cache_bytes,
        write_window: options.window,
        umask: options.umask,
        store_read_bits: std::fs::metadata(&options.store)
            .map_or(0o444, |m| (m.permissions().mode() & 0o444) as u16),
        poll: options.poll,
        readahead: options.readahead,
        saved_scans: index.clone().map(|index| index as Arc<dyn SavedScans>),
        ..FsConfig::default()
    };
    let fs = SessionFs::new(store, config);
    let mut mount_options = vec![
        MountOption::FSName(mount_source(options)),
        // Passed as a plain option so that the kernel gets it on a direct mount as root
        // too (fuser gives `Subtype` only to fusermount3): /proc/mounts then says
        // `fuse.sessionfs` either way.
        MountOption::CUSTOM("subtype=sessionfs".into()),
        MountOption::DefaultPermissions,
    ];
    // Safe defaults unless the user (or mount.fuse3, for fstab) says otherwise.
    let flags = &options.kernel_flags;
    if !flags.iter().any(|f| f == "dev" || f == "nodev") {
        mount_options.push(MountOption::NoDev);
    }
    if !flags.iter().any(|f| f == "suid" || f == "nosuid") {
        mount_options.push(MountOption::NoSuid);
    }
    if options.read_only {
        mount_options.push(MountOption::RO);
    }
    for flag in &options.kernel_flags {
        mount_options.push(match flag.as_str() {
            "dev" => MountOption::Dev,
            "nodev" => MountOption::NoDev,
            "suid" => MountOption::Suid,
            "nosuid" => MountOption::NoSuid,
            "exec" => MountOption::Exec,
            "noexec" => MountOption::NoExec,
            "atime" => MountOption::Atime,
            _ => MountOption::NoAtime,
        });
    }
    let acl = if options.allow_other {
        SessionACL::All
    } else if options.allow_root {
        SessionACL::RootAndOwner
    } else {
        SessionACL::Owner
    };
    let mut config = Config::default();
    config.mount_options = mount_options;
    config.acl = acl;
    config.n_threads = Some(4);

    let adapter = FuseAdapter::new(fs.clone(), options.attr_timeout, options.store.clone());
    let session = fuser::Session::new(adapter, &options.mountpoint, &config).map_err(|e| {
        format!(
            "cannot mount {} at {}: {e}",
            options.store.display(),
            options.mountpoint.display()
        )
    })?;
    let own_mount = OwnMount::record(&options.mountpoint);
    if own_mount.is_none() {
        log::warn!(
            "cannot find this mount in /proc/self/mountinfo; a signal will end the daemon without unmounting"
        );
    }
    sessionfs::fuse::notify::start(&fs, session.notifier()).map_err(|e| e.to_string())?;
    let writeback = fs.writeback();
    std::thread::Builder::new()
        .name("writeback".into())
        .spawn(move || writeback.run())
        .map_err(|e| e.to_string())?;
    let mountpoint = options.mountpoint.clone();
    let writeback = fs.writeback();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            // Each signal first makes pending writes durable (a service manager may
            // follow with SIGKILL), then unmounts, lazily when files are still open.
            loop {
                let mut signal = 0;
                // SAFETY: `signals` is an initialised set; sigwait writes one signal number.
                unsafe { libc::sigwait(&signals, &mut signal) };
                log::info!(
                    "signal {signal}: flushing and unmounting {}",
                    mountpoint.display()
                );
                if let Err(why) = writeback.flush(FlushScope::Everything) {
                    log::error!("flush at signal {signal} failed: {why}");
                }
                // Only this daemon's own mount is unmounted. One covered by a
                // later mount on the same path, or already detached, cannot be
                // reached by its path: ending the process ends its connection.
                if !own_mount.as_ref().is_some_and(OwnMount::unmount) {
                    log::warn!(
                        "{} is not this daemon's mount on top any more; ending without unmounting the path",
                        mountpoint.display()
                    );
                    std::process::exit(0);
                }
            }
        })
        .map_err(|e| e.to_string())?;

    if let Some(mut pipe) = ready.take() {
        let _ = pipe.write_all(b"ok");
        drop(pipe);
        detach_stdio(options.log_file.as_deref());
    }
    // Logged after detaching, so a daemon's --log-file starts with it.
    log::info!("{description} mounted at {}", options.mountpoint.display());
    // fuser unmounts the path when a session ends, whatever is mounted there
    // by then; the mount is kept from it (never dropped), and unmounted above
    // only while it is this daemon's own.
    let background = std::mem::ManuallyDrop::new(session.spawn().map_err(|e| e.to_string())?);
    // SAFETY: the handle is moved out once and `background` is never used or
    // dropped again, so nothing is read or freed twice.
    let guard = unsafe { std::ptr::read(&background.guard) };
    let result = guard
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the session thread panicked")))
        .or_else(|e| match e.raw_os_error() {
            // The kernel ends the connection of a mount detached with
            // `umount -l` once its last file closes; a reader still waiting on
            // /dev/fuse then gets ECONNABORTED rather than ENODEV. Both are the
            // end of the mount, not a failure.
            Some(libc::ECONNABORTED) => Ok(()),
            _ => Err(e),
        });
    // Scans saved while mounted reach the disk before the process ends.
    if let Some(index) = &index {
        index.last_saves();
        fs.save_scans();
        index.save_headers();
        index.wait_idle();
    }
    let unwritten = fs.writeback().shutdown();
    if !unwritten.is_empty() {
        log::error!(
            "unmounted with sessions not written to the store: {}",
            unwritten.join(", ")
        );
    }
    log::info!("unmounted {}", options.mountpoint.display());
    result.map_err(|e| format!("the mount ended with an error: {e}"))
}

/// The source the mount table shows: `-o fsname=`, else the store's canonical path,
/// so `findmnt` and `df` name the store whatever directory sessionfs was started in.
fn mount_source(options: &Options) -> String {
    let source = options.fsname.clone().unwrap_or_else(|| {
        std::fs::canonicalize(&options.store)
            .unwrap_or_else(|_| options.store.clone())
            .display()
            .to_string()
    });
    // fusermount3, which mounts for other users, splits its options at commas; a direct
    // mount as root takes the source as it is.
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        source
    } else {
        source.replace(',', "\\,")
    }
}

/// Detaches the daemon from the terminal once the parent has reported success:
/// stdin and stdout go to /dev/null, stderr (the log) to `--log-file` or /dev/null,
/// so a pipeline such as `sessionfs S M 2>&1 | tee` does not wait for the unmount.
fn detach_stdio(log_file: Option<&std::path::Path>) {
    use std::os::fd::AsRawFd;
    let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    else {
        return;
    };
    let log = log_file.and_then(|path| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok()
    });
    let stderr = log.as_ref().map_or(null.as_raw_fd(), |f| f.as_raw_fd());
    // SAFETY: duplicating valid descriptors onto stdio.
    unsafe {
        libc::dup2(null.as_raw_fd(), 0);
        libc::dup2(null.as_raw_fd(), 1);
        libc::dup2(stderr, 2);
    }
}

fn block_signals() -> libc::sigset_t {
    // SAFETY: the set is initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, signal);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}
