//! Which processes hold the NPU open: `/proc/<pid>/fd/*` links that point at an NPU device node,
//! and whether HailoRT's multi-process service runs. A device one process holds is refused to the
//! next (HailoRT's `HAILO_OUT_OF_PHYSICAL_DEVICES`) unless both go through that service.

use crate::model::stack::NpuUser;
use crate::root::{ReadErrorKind, SysRoot};

/// Arguments of a holder's command line kept to name it (`python3 -m wyoming_hailo_whisper`).
const CMDLINE_ARGS: usize = 3;

/// Most processes whose open files are read (a board runs a few hundred).
const MAX_PROCESSES: usize = 4096;

/// The comm of HailoRT's multi-process service.
pub const HAILORT_SERVICE: &str = "hailort_service";

/// True for a device node an NPU runtime opens.
pub fn is_npu_device(target: &str) -> bool {
    target.starts_with("/dev/hailo")
        || target.starts_with("/dev/h1x-")
        || target == "/dev/rknpu"
        || target.starts_with("/dev/dri/renderD")
        || target.starts_with("/dev/accel/")
}

/// What the walk over `/proc` found.
#[derive(Debug, Default)]
pub struct NpuUsers {
    /// Processes with an NPU node open, by pid.
    pub users: Vec<NpuUser>,
    /// Processes whose `fd` directory could not be listed.
    pub unreadable: usize,
    /// `hailort_service`'s pid, when it runs.
    pub hailort_service_pid: Option<u32>,
}

/// Walks `/proc/<pid>/fd` of every process (a missing `/proc` gives nothing).
pub fn probe_npu_users(root: &SysRoot) -> NpuUsers {
    let mut out = NpuUsers::default();
    let Ok(entries) = root.list_dir("/proc") else {
        return out;
    };
    for pid in entries
        .iter()
        .filter_map(|e| e.parse::<u32>().ok())
        .take(MAX_PROCESSES)
    {
        let comm = root
            .read_string(&format!("/proc/{pid}/comm"))
            .map(|c| c.trim().to_string())
            .unwrap_or_default();
        if comm == HAILORT_SERVICE {
            out.hailort_service_pid = Some(pid);
        }
        let dir = format!("/proc/{pid}/fd");
        let fds = match root.list_dir(&dir) {
            Ok(f) => f,
            // Without root another user's open files are closed to the agent.
            Err(e) if e.kind == ReadErrorKind::PermissionDenied => {
                out.unreadable += 1;
                continue;
            }
            Err(_) => continue,
        };
        for fd in fds {
            let source = format!("{dir}/{fd}");
            let Ok(Some(device)) = root.link_target_if(&source, is_npu_device) else {
                continue;
            };
            if out.users.iter().any(|u| u.pid == pid && u.device == device) {
                continue;
            }
            out.users.push(NpuUser {
                pid,
                comm: comm.clone(),
                cmdline: cmdline_head(root, pid),
                device,
                source,
            });
        }
    }
    out
}

/// The first [`CMDLINE_ARGS`] arguments of a process, secrets redacted.
fn cmdline_head(root: &SysRoot, pid: u32) -> String {
    let argv = root
        .read(&format!("/proc/{pid}/cmdline"))
        .map(|b| crate::parse::devicetree::string_list(&b))
        .unwrap_or_default();
    let mut argv = crate::sys::redact::redact_argv(&argv);
    argv.truncate(CMDLINE_ARGS);
    argv.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_from_links_and_plain_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        for (pid, comm) in [
            ("412", "frigate.detecto"),
            ("977", "python3"),
            ("5", "hailort_service"),
        ] {
            std::fs::create_dir_all(p.join(format!("proc/{pid}/fd"))).unwrap();
            std::fs::write(p.join(format!("proc/{pid}/comm")), format!("{comm}\n")).unwrap();
        }
        std::os::unix::fs::symlink("/dev/hailo0", p.join("proc/412/fd/23")).unwrap();
        std::os::unix::fs::symlink("socket:[4711]", p.join("proc/412/fd/3")).unwrap();
        std::fs::write(p.join("proc/977/fd/9"), "/dev/hailo0\n").unwrap();
        std::fs::write(
            p.join("proc/977/cmdline"),
            "python3\0-m\0whisper\0--token\0s3cret\0",
        )
        .unwrap();
        std::fs::write(p.join("proc/977/fd/10"), "/home/<user>/notes.txt\n").unwrap();
        std::fs::create_dir_all(p.join("proc/self")).unwrap();
        let got = probe_npu_users(&SysRoot::new(p));
        let pids: Vec<(u32, &str)> = got
            .users
            .iter()
            .map(|u| (u.pid, u.device.as_str()))
            .collect();
        assert_eq!(pids, vec![(412, "/dev/hailo0"), (977, "/dev/hailo0")]);
        assert_eq!(got.users[0].comm, "frigate.detecto");
        assert_eq!(got.users[1].source, "/proc/977/fd/9");
        assert_eq!(got.users[1].cmdline, "python3 -m whisper");
        assert_eq!(got.users[0].cmdline, "");
        assert_eq!(got.hailort_service_pid, Some(5));
        assert_eq!(got.unreadable, 0);
        let none = probe_npu_users(&SysRoot::new(p.join("nothing-here")));
        assert!(none.users.is_empty() && none.hailort_service_pid.is_none());
    }

    #[test]
    fn npu_nodes() {
        for t in [
            "/dev/hailo0",
            "/dev/rknpu",
            "/dev/dri/renderD129",
            "/dev/accel/accel0",
            "/dev/h1x-0",
        ] {
            assert!(is_npu_device(t), "{t}");
        }
        for t in [
            "/dev/null",
            "socket:[1]",
            "/dev/rknpu0x",
            "anon_inode:[eventfd]",
            "",
        ] {
            assert!(!is_npu_device(t), "{t}");
        }
    }
}
