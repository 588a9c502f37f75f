//! Whether this process runs in a container (the OCI image, a Home Assistant add-on, any Docker
//! or podman container), and how the agent knows. A `fix` run there does not write the host's
//! `/etc` or `/boot` unless the host's files are mounted writable (agent/action/fix/apply.rs),
//! and the refusal says what to do on the host instead.

/// This process runs in a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InContainer {
    /// How the agent knows (`container=podman`, `/.dockerenv`, `a Home Assistant add-on`).
    pub evidence: String,
    /// A Home Assistant add-on (the Supervisor gave it a token).
    pub addon: bool,
}

/// What marks a container, as gathered from the process: the `container` variable (systemd's
/// container interface; podman sets it, the npu-agent image sets `container=oci`), whether the
/// Supervisor's token is set, and the marker files that exist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Marks {
    /// `container`'s value, if set and not empty.
    pub container_var: Option<String>,
    /// `SUPERVISOR_TOKEN` is set (Home Assistant add-ons).
    pub supervisor: bool,
    /// `/run/.containerenv` (podman) exists.
    pub containerenv: bool,
    /// `/.dockerenv` (Docker) exists.
    pub dockerenv: bool,
}

impl Marks {
    /// The marks of this process.
    pub fn of_process() -> Marks {
        let exists = |p: &str| std::path::Path::new(p).exists();
        Marks {
            container_var: std::env::var("container").ok().filter(|v| !v.is_empty()),
            supervisor: std::env::var_os("SUPERVISOR_TOKEN").is_some_and(|v| !v.is_empty()),
            containerenv: exists("/run/.containerenv"),
            dockerenv: exists("/.dockerenv"),
        }
    }

    /// The container these marks name, if any (pure).
    pub fn judge(&self) -> Option<InContainer> {
        let evidence = if self.supervisor {
            "a Home Assistant add-on: SUPERVISOR_TOKEN is set".to_string()
        } else if let Some(v) = &self.container_var {
            format!("container={v}")
        } else if self.containerenv {
            "/run/.containerenv".into()
        } else if self.dockerenv {
            "/.dockerenv".into()
        } else {
            return None;
        };
        Some(InContainer {
            evidence,
            addon: self.supervisor,
        })
    }
}

/// The container this process runs in, if any.
pub fn detect() -> Option<InContainer> {
    Marks::of_process().judge()
}

/// What a refused host write says from a container: `place` (a board path such as
/// `/etc/modprobe.d/hailo_pci.conf`) cannot be written there.
pub fn host_write_refusal(c: &InContainer, place: &str, why: &str) -> String {
    let host_side = if c.addon {
        "in the Home Assistant host's shell (or through the OS's own settings on Home Assistant OS)"
    } else {
        "in a shell on the host"
    };
    format!(
        "{place} is the host's and cannot be written from this container ({why}; {}): \
         run `sudo npu-agent fix` {host_side}, or carry out the finding's remedy there; to let \
         the container write it, mount the host's {} read-write (docs/image-guide.md); nothing \
         was changed",
        c.evidence,
        top_dir(place)
    )
}

/// In a container, why the board file `place` (at `host` on this process's side) must not be
/// written from here: with a `live` root the container's own files are not the host's; else
/// when the host's file sits on a mount this process cannot write (a read-only bind). `None`
/// outside a container, or when the host layout allows the write.
pub fn refuse_host_write(live: bool, place: &str, host: &std::path::Path) -> Option<String> {
    let c = detect()?;
    if live {
        let why = "this container's own files are not the host's";
        return Some(host_write_refusal(&c, place, why));
    }
    let mut existing = host.to_path_buf();
    while !existing.exists() && existing.pop() {}
    rustix::fs::access(&existing, rustix::fs::Access::WRITE_OK)
        .err()
        .map(|e| host_write_refusal(&c, place, &e.to_string()))
}

/// `/etc` of `/etc/modprobe.d/x.conf`, `/boot` of `/boot/firmware/config.txt`.
fn top_dir(place: &str) -> &str {
    match place.get(1..).and_then(|r| r.find('/')) {
        Some(i) => &place[..i + 1],
        None => place,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_judged_in_order_and_none_is_no_container() {
        assert_eq!(Marks::default().judge(), None);
        let docker = Marks {
            dockerenv: true,
            ..Marks::default()
        };
        assert_eq!(docker.judge().unwrap().evidence, "/.dockerenv");
        let podman = Marks {
            container_var: Some("podman".into()),
            containerenv: true,
            ..Marks::default()
        };
        assert_eq!(podman.judge().unwrap().evidence, "container=podman");
        let addon = Marks {
            supervisor: true,
            dockerenv: true,
            ..Marks::default()
        };
        let c = addon.judge().unwrap();
        assert!(c.addon && c.evidence.contains("Home Assistant add-on"));
    }

    #[test]
    fn the_refusal_names_the_place_the_host_command_and_the_mount() {
        let c = InContainer {
            evidence: "container=oci".into(),
            addon: false,
        };
        let m = host_write_refusal(
            &c,
            "/etc/modprobe.d/hailo_pci.conf",
            "Read-only file system",
        );
        assert!(
            m.starts_with("/etc/modprobe.d/hailo_pci.conf is the host's"),
            "{m}"
        );
        assert!(
            m.contains("container=oci") && m.contains("Read-only file system"),
            "{m}"
        );
        assert!(
            m.contains("`sudo npu-agent fix` in a shell on the host"),
            "{m}"
        );
        assert!(m.contains("mount the host's /etc read-write"), "{m}");
        assert_eq!(top_dir("/boot/firmware/config.txt"), "/boot");
        assert_eq!(top_dir("/etc"), "/etc");
    }
}
