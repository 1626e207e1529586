//! Command-line parsing, in the shape FUSE users know:
//! `sessionfs [OPTIONS] STORE MOUNTPOINT`, with `-o opt[,opt]`.

use std::path::PathBuf;
use std::time::Duration;

/// The `--help` text (the man page is the complete reference).
pub const USAGE: &str = "\
Usage: sessionfs [OPTIONS] STORE MOUNTPOINT

Mount a DeepSeek Harness session store (a directory of session.jsonl /
session.jsonl.zstd logs, or an SQLite sessions database) as a read-only tree:
one directory per session with header.json, events/, surface.jsonl,
transcript.md, index.jsonl, status and the fork and flush control files;
at the root, sessions.jsonl (one line per session), latest (a link to the
session written last) and by-project/ and by-date/ (links to the sessions
of a cwd, or of a day in UTC).

Options:
  -f, --foreground        stay in the foreground (default: detach once mounted)
  -d, --debug             log debug messages to stderr (implies -f)
  -r, --read-only         refuse writes to the control files (same as -o ro)
      --allow-other       let other users use the mount (same as -o allow_other)
      --grace SECONDS     quiet time before an open turn is shown repaired (default 600)
      --log-file PATH     where a detached sessionfs writes its log (default: nowhere)
  -o OPT[,OPT...]         mount options:
                            ro, rw, allow_other, allow_root, default_permissions,
                            repair (write the crash repair of quiet sessions
                            into the store, as the Harness's load would),
                            poll (check used sessions every 0.5 s instead of
                            inotify; automatic on NFS, SMB, 9p and FUSE stores),
                            unsafe_network_sqlite_writes (fork into an SQLite
                            store on a network or FUSE file system anyway; it
                            is mounted read-only there, as SQLite's locking
                            cannot be trusted over one),
                            uid=N, gid=N, grace=SECONDS, cache=MIB (default 192),
                            window=MS (fork write-behind window, default 200),
                            index=DIR (where scans are kept between mounts;
                            default $XDG_CACHE_HOME/sessionfs), noindex,
                            index_max=MIB (its bound per store, default 1024),
                            noreadahead (build no session ahead of a reader
                            that walks the sessions in order),
                            attr_timeout=SECONDS (default 1), fsname=NAME,
                            umask=OCTAL (fixed modes; default: each session's
                            stored read bits),
                            dev, nodev, suid, nosuid, exec, noexec, atime, noatime;
                            fstab-only options (auto, noauto, user, users,
                            nouser, _netdev, nofail, comment=, x-*) are ignored
  -h, --help              print this help and exit
  -V, --version           print the version and exit

Unmount with `umount MOUNTPOINT` (root) or `fusermount3 -u MOUNTPOINT`.
Logging: RUST_LOG=info (default warn); session contents are never logged.
See sessionfs(1).
";

/// A mount as the command line asks for it.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// The Harness store: a directory of session logs, or an SQLite database.
    pub store: PathBuf,
    /// Where the tree is mounted.
    pub mountpoint: PathBuf,
    /// `-f`: serve in the foreground instead of detaching once mounted.
    pub foreground: bool,
    /// `-d`: log debug messages to stderr (implies `foreground`).
    pub debug: bool,
    /// `-r` or `-o ro`: the control files refuse writes.
    pub read_only: bool,
    /// `-o unsafe_network_sqlite_writes`: fork into an SQLite store on a network
    /// or FUSE file system, whose locking SQLite cannot trust.
    pub unsafe_network_sqlite_writes: bool,
    /// `-o allow_other`: other users may use the mount.
    pub allow_other: bool,
    /// `-o allow_root`: root may use the mount as well as its owner.
    pub allow_root: bool,
    /// `-o uid=`: the owner every node reports (default: the mounting user).
    pub uid: Option<u32>,
    /// `-o gid=`: the group every node reports (default: the mounting group).
    pub gid: Option<u32>,
    /// `--grace`: quiet time before an open turn is shown repaired.
    pub grace: Duration,
    /// `-o cache=`: memory for indexed sessions and rendered files, in bytes.
    pub cache_bytes: usize,
    /// `-o window=`: the write-behind window of fork children.
    pub window: Duration,
    /// `-o attr_timeout=`: how long the kernel may cache attributes and names.
    pub attr_timeout: Duration,
    /// `-o fsname=`: the source the mount table shows (default: the store's path).
    pub fsname: Option<String>,
    /// `-o umask=`: fixed modes instead of each session's stored modes.
    pub umask: Option<u16>,
    /// Make the crash repair of quiet sessions durable in the store.
    pub repair: bool,
    /// Poll used sessions for changes instead of watching the store with inotify.
    pub poll: bool,
    /// `-o noreadahead`: build no session ahead of a reader walking them in order.
    pub readahead: bool,
    /// Where a detached sessionfs writes its log (stderr otherwise goes to /dev/null).
    pub log_file: Option<PathBuf>,
    /// `-o index=DIR` / `-o noindex`: where the persistent index lives.
    pub index: IndexPlace,
    /// `-o index_max=`: the persistent index's bound per store, in bytes.
    pub index_max_bytes: u64,
    /// Generic mount flags passed to the kernel as given.
    pub kernel_flags: Vec<String>,
}

/// Where the persistent index lives.
#[derive(Clone, Debug, PartialEq)]
pub enum IndexPlace {
    /// `$XDG_CACHE_HOME/sessionfs`, else `~/.cache/sessionfs`.
    Default,
    /// `-o index=DIR`.
    Dir(PathBuf),
    /// `-o noindex`: every mount reads each log whole.
    Off,
}

/// What the command line asks for.
#[derive(Debug, PartialEq)]
pub enum Command {
    /// Mount a store.
    Mount(Box<Options>),
    /// `-h`, `--help`: print [`USAGE`].
    Help,
    /// `-V`, `--version`: print the version.
    Version,
}

fn seconds(value: &str, what: &str) -> Result<Duration, String> {
    value
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{what} must be a number of seconds, not {value:?}"))
}

fn number<T: std::str::FromStr>(value: &str, what: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{what} must be a whole number, not {value:?}"))
}

impl Options {
    fn apply_mount_option(&mut self, option: &str) -> Result<(), String> {
        let (key, value) = match option.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (option, None),
        };
        let need = |what: &str| {
            value.ok_or_else(|| format!("mount option {what} needs a value ({what}=...)"))
        };
        match key {
            "" => {}
            "ro" => self.read_only = true,
            "unsafe_network_sqlite_writes" => self.unsafe_network_sqlite_writes = true,
            "repair" => self.repair = true,
            "poll" => self.poll = true,
            "noindex" => self.index = IndexPlace::Off,
            "noreadahead" => self.readahead = false,
            "index" => self.index = IndexPlace::Dir(PathBuf::from(need("index")?)),
            "index_max" => {
                self.index_max_bytes =
                    number::<u64>(need("index_max")?, "index_max")?.saturating_mul(1 << 20)
            }
            "rw" => self.read_only = false,
            "allow_other" => self.allow_other = true,
            "allow_root" => self.allow_root = true,
            // Always on: the kernel checks the modes sessionfs reports.
            "default_permissions" => {}
            "debug" => {
                self.debug = true;
                self.foreground = true;
            }
            "uid" => self.uid = Some(number(need("uid")?, "uid")?),
            "gid" => self.gid = Some(number(need("gid")?, "gid")?),
            "grace" => self.grace = seconds(need("grace")?, "grace")?,
            "cache" => {
                self.cache_bytes = number::<usize>(need("cache")?, "cache")?.saturating_mul(1 << 20)
            }
            "window" => {
                let ms: u64 = number(need("window")?, "window")?;
                if !(1..=2_147_483_647).contains(&ms) {
                    return Err("window must be between 1 and 2147483647 milliseconds".into());
                }
                self.window = Duration::from_millis(ms);
            }
            "attr_timeout" | "entry_timeout" => self.attr_timeout = seconds(need(key)?, key)?,
            "fsname" => self.fsname = Some(need("fsname")?.to_string()),
            "umask" => {
                let text = need("umask")?;
                let umask = u16::from_str_radix(text, 8)
                    .ok()
                    .filter(|m| *m <= 0o777)
                    .ok_or_else(|| format!("umask must be octal, 0 to 777, not {text:?}"))?;
                self.umask = Some(umask);
            }
            "dev" | "nodev" | "suid" | "nosuid" | "exec" | "noexec" | "atime" | "noatime" => {
                self.kernel_flags.push(key.to_string())
            }
            "auto" | "noauto" | "user" | "nouser" | "users" | "_netdev" | "nofail" | "comment" => {}
            _ if key.starts_with("x-") => {}
            _ => {
                return Err(format!(
                    "unknown mount option {option:?} (see sessionfs --help)"
                ));
            }
        }
        Ok(())
    }
}

/// Parses `argv` (without the program name).
pub fn parse(args: &[String]) -> Result<Command, String> {
    let mut options = Options {
        store: PathBuf::new(),
        mountpoint: PathBuf::new(),
        foreground: false,
        debug: false,
        read_only: false,
        unsafe_network_sqlite_writes: false,
        allow_other: false,
        allow_root: false,
        uid: None,
        gid: None,
        grace: Duration::from_secs(600),
        cache_bytes: 192 << 20,
        window: Duration::from_millis(200),
        attr_timeout: Duration::from_secs(1),
        fsname: None,
        umask: None,
        repair: false,
        poll: false,
        readahead: true,
        log_file: None,
        index: IndexPlace::Default,
        index_max_bytes: crate::persist::DEFAULT_MAX_BYTES,
        kernel_flags: Vec::new(),
    };
    let mut positional = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let mut value = |name: &str| {
            iter.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match arg.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            "-f" | "--foreground" => options.foreground = true,
            "-d" | "--debug" => {
                options.debug = true;
                options.foreground = true;
            }
            "-r" | "--read-only" => options.read_only = true,
            "--allow-other" => options.allow_other = true,
            "--grace" => options.grace = seconds(&value("--grace")?, "--grace")?,
            "--log-file" => options.log_file = Some(PathBuf::from(value("--log-file")?)),
            "-o" => {
                for option in value("-o")?.split(',') {
                    options.apply_mount_option(option)?;
                }
            }
            other if other.starts_with("-o") && other.len() > 2 => {
                for option in other[2..].split(',') {
                    options.apply_mount_option(option)?;
                }
            }
            "--" => positional.extend(iter.by_ref().cloned()),
            other if other.starts_with('-') && other.len() > 1 => {
                return Err(format!("unknown option {other:?}"));
            }
            other => positional.push(other.to_string()),
        }
    }
    match positional.as_slice() {
        [store, mountpoint] => {
            options.store = PathBuf::from(store);
            options.mountpoint = PathBuf::from(mountpoint);
            Ok(Command::Mount(Box::new(options)))
        }
        [] | [_] => Err("missing STORE or MOUNTPOINT".into()),
        _ => Err(format!("too many arguments: {}", positional[2..].join(" "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_the_fuse_shaped_command_line() {
        let Ok(Command::Mount(options)) = parse(&args(&[
            "-f",
            "-o",
            "ro,allow_other,uid=5,grace=0.5,noauto",
            "/s",
            "/m",
        ])) else {
            panic!("expected a mount");
        };
        assert!(options.foreground && options.read_only && options.allow_other);
        assert_eq!(options.uid, Some(5));
        assert_eq!(options.grace, Duration::from_millis(500));
        assert_eq!(options.store, PathBuf::from("/s"));
        assert_eq!(parse(&args(&["--help"])), Ok(Command::Help));
        assert_eq!(parse(&args(&["-V"])), Ok(Command::Version));
    }

    #[test]
    fn accepts_what_mount_fuse3_passes_and_ignores_fstab_only_options() {
        // mount.fuse3 runs `sessionfs STORE MOUNTPOINT -o OPTIONS`.
        let Ok(Command::Mount(options)) = parse(&args(&[
            "/s",
            "/m",
            "-o",
            "ro,dev,suid,noauto,user,user=ana,users,nofail,_netdev,comment=x,x-systemd.automount",
        ])) else {
            panic!("expected a mount");
        };
        assert_eq!(
            (options.store.to_str(), options.mountpoint.to_str()),
            (Some("/s"), Some("/m"))
        );
        assert!(options.read_only);
        assert_eq!(options.kernel_flags, ["dev", "suid"]);
    }

    #[test]
    fn rejects_bad_command_lines() {
        for bad in [
            &["/s"][..],
            &["-x", "/s", "/m"],
            &["-o", "bogus", "/s", "/m"],
            &["-o", "uid=x", "/s", "/m"],
            &["/a", "/b", "/c"],
            &["-o"],
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad:?}");
        }
    }
}
