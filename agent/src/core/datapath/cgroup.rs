//! Where the socket hooks attach: the root of the cgroup2 (unified) hierarchy, whose hooks
//! run for every process of the machine (on a cgroup v1 hybrid, every process is in it; on
//! a pure cgroup v2 host, its descendants' sockets see the root's links too).

use std::io;
use std::path::PathBuf;

/// The mount point of the unified hierarchy's root, from `/proc/self/mountinfo`: the first
/// `cgroup2` mount whose root is `/` (not a bind mount of some sub-cgroup). Under a private
/// cgroup namespace that root is the namespace's: run the agent in the host's.
///
/// # Errors
/// `NotFound` when no such mount exists (mount one: `mount -t cgroup2 none /sys/fs/cgroup`).
pub fn cgroup2_root() -> io::Result<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    root_in(&info).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "no cgroup2 mount of the hierarchy's root in /proc/self/mountinfo \
             (mount one: mount -t cgroup2 none /sys/fs/cgroup)",
        )
    })
}

/// `id parent major:minor root mount-point options [optional…] - fstype source super-options`.
fn root_in(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut fields = left.split(' ');
        let root = fields.nth(3)?;
        let point = fields.next()?;
        (right.split(' ').next()? == "cgroup2" && root == "/").then(|| PathBuf::from(unescape(point)))
    })
}

/// The kernel writes space, tab, newline and backslash in a path as `\ooo` (octal).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let code = b
            .get(i + 1..i + 4)
            .filter(|o| b[i] == b'\\' && o.iter().all(|c| (b'0'..=b'7').contains(c)))
            .map(|o| o.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0')));
        match code.and_then(|c| u8::try_from(c).ok()) {
            Some(c) => {
                out.push(c);
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
25 1 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
30 25 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw
33 30 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,cpu,cpuacct
";

    #[test]
    fn the_unified_mount_of_a_hybrid_host() {
        assert_eq!(root_in(HYBRID), Some(PathBuf::from("/sys/fs/cgroup/unified")));
    }

    #[test]
    fn a_bind_mount_of_a_sub_cgroup_is_not_the_root() {
        let info = "40 30 0:27 /kubepods /mnt/cg rw - cgroup2 cgroup2 rw\n\
                    41 30 0:27 / /mnt/my\\040cgroup rw shared:3 - cgroup2 cgroup2 rw\n";
        assert_eq!(root_in(info), Some(PathBuf::from("/mnt/my cgroup")));
        assert_eq!(
            root_in("40 30 0:27 /kubepods /mnt/cg rw - cgroup2 cgroup2 rw\n"),
            None
        );
        assert_eq!(
            root_in("31 30 0:27 / /sys/fs/cgroup rw - cgroup cgroup rw,cpu\n"),
            None
        );
    }
}
