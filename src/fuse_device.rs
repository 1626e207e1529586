//! The check that `/dev/fuse` can be opened, made before mounting so that the
//! reason reaches the user: a missing device names the kernel module, a device the
//! user may not open names its mode, its owner and the user, and the usual fixes.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

const PATH: &str = "/dev/fuse";

/// Opens `/dev/fuse` for reading and writing, as fuser will, and explains a failure.
pub fn check() -> Result<(), String> {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(PATH)
    {
        Ok(_) => Ok(()),
        Err(error) => Err(explain(Path::new(PATH), &error)),
    }
}

/// A sentence for a failure to open the FUSE device at `path`.
pub fn explain(path: &Path, error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::NotFound => format!(
            "{} does not exist: load the fuse kernel module (`modprobe fuse`)",
            path.display()
        ),
        io::ErrorKind::PermissionDenied => match std::fs::metadata(path) {
            Ok(meta) => {
                // SAFETY: getuid and getgid cannot fail.
                let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
                permission_message(
                    path,
                    &Device {
                        mode: mode_string(&meta),
                        owner: user_name(meta.uid()),
                        group: group_name(meta.gid()),
                    },
                    &format!("{} (uid {uid}, gid {gid})", user_name(uid)),
                    error,
                )
            }
            Err(_) => format!("cannot open {}: {error}", path.display()),
        },
        _ => format!(
            "cannot use {} ({error}); is the fuse kernel module loaded?",
            path.display()
        ),
    }
}

/// What `ls -l` says of the device.
struct Device {
    mode: String,
    owner: String,
    group: String,
}

fn permission_message(path: &Path, device: &Device, user: &str, error: &io::Error) -> String {
    format!(
        "cannot open {path} ({error}): it is {mode} {owner}:{group}, and you are {user}. \
         Mount as root, or have an administrator make it usable: udev's default rule makes \
         it crw-rw-rw- (`chmod 0666 {path}` does the same until the next boot), or add your \
         user to its group. A container must also be given the device (--device {path}).",
        path = path.display(),
        mode = device.mode,
        owner = device.owner,
        group = device.group,
    )
}

/// `crw-rw-rw-` and the like.
fn mode_string(meta: &std::fs::Metadata) -> String {
    let kind = match meta.file_type() {
        t if t.is_char_device() => 'c',
        t if t.is_block_device() => 'b',
        t if t.is_dir() => 'd',
        _ => '-',
    };
    let mode = meta.mode();
    let mut text = String::from(kind);
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 0o7;
        text.push(if bits & 4 != 0 { 'r' } else { '-' });
        text.push(if bits & 2 != 0 { 'w' } else { '-' });
        text.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    text
}

fn user_name(uid: u32) -> String {
    // SAFETY: getpwuid returns a pointer to static storage or null; sessionfs calls
    // it before starting any thread, and copies the name before the next call.
    unsafe {
        let entry = libc::getpwuid(uid);
        if entry.is_null() {
            return uid.to_string();
        }
        std::ffi::CStr::from_ptr((*entry).pw_name)
            .to_string_lossy()
            .into_owned()
    }
}

fn group_name(gid: u32) -> String {
    // SAFETY: as in `user_name`.
    unsafe {
        let entry = libc::getgrgid(gid);
        if entry.is_null() {
            return gid.to_string();
        }
        std::ffi::CStr::from_ptr((*entry).gr_name)
            .to_string_lossy()
            .into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permission_problem_names_the_mode_the_owner_and_the_user() {
        let message = permission_message(
            Path::new("/dev/fuse"),
            &Device {
                mode: "crw-------".into(),
                owner: "root".into(),
                group: "root".into(),
            },
            "ana (uid 1000, gid 1000)",
            &io::Error::from_raw_os_error(libc::EACCES),
        );
        assert!(message.contains("crw------- root:root"), "{message}");
        assert!(message.contains("you are ana (uid 1000"), "{message}");
        assert!(message.contains("chmod 0666 /dev/fuse"), "{message}");
        assert!(!message.contains("module"), "{message}");
    }

    #[test]
    fn a_missing_device_names_the_module() {
        let message = explain(
            Path::new("/nonexistent/fuse"),
            &io::Error::from_raw_os_error(libc::ENOENT),
        );
        assert!(message.contains("modprobe fuse"), "{message}");
    }
}
