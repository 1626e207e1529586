#!/usr/bin/env bash
# Consistent backup of a Harness session store through a sessionfs mount:
#   1. flush through the mount, so everything sessionfs accepted (fork children)
#      is durable before the copy starts;
#   2. snapshot the store with tar;
#   3. restore the snapshot elsewhere, mount it, and compare the two trees.
# usage: examples/backup.sh MOUNTPOINT STORE BACKUP_DIR
# MOUNTPOINT is a live sessionfs mount of STORE. Prints "backup verified" and
# exits 0 when the restored store mounts to an identical tree.
set -euo pipefail

mount_point=$1
store=$2
backup_dir=$3
sessionfs=${SESSIONFS:-sessionfs}

mkdir -p "$backup_dir"
echo > "$mount_point/flush"            # returns once pending writes are durable
grep '^pending: 0 ' "$mount_point/flush" >/dev/null

archive="$backup_dir/store.tar"
tar -C "$(dirname "$store")" -cf "$archive" "$(basename "$store")"

restored="$backup_dir/restored"
check="$backup_dir/mnt"
rm -rf "$restored" "$check"
mkdir -p "$restored" "$check"
tar -C "$restored" -xf "$archive"
"$sessionfs" "$restored/$(basename "$store")" "$check"
trap 'umount "$check" 2>/dev/null || umount -l "$check"' EXIT

# Same sessions, same files, same bytes (control files and status carry live state;
# sessions.jsonl and the latest links go by the times of the restored files).
if diff -r --no-dereference -x flush -x fork -x status -x sessions.jsonl -x latest \
    "$mount_point" "$check"; then
    echo "backup verified: $archive"
else
    echo "backup differs from the live tree" >&2
    exit 1
fi
