//! The action vocabulary (what can be asked of a board, with its validated arguments) and the
//! typed outcome of running one. Pure data: the MQTT parser, the gate, the executor, the CLI and
//! Home Assistant all speak it.

use serde::Serialize;
use serde_json::Value;

/// Actions the agent executes.
pub const ACTIONS: &[&str] = &[
    "compact",
    "set_cma",
    "reboot",
    "rescan",
    "release_npu",
    "fix",
    "capture",
];

/// Arguments after validation, per action.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// `compact {drop_caches?: bool}`.
    Compact {
        /// Also drop the page cache first.
        drop_caches: bool,
    },
    /// `set_cma {size: "256M"}`.
    SetCma {
        /// Size as given (validated later against the profile and RAM).
        size: String,
    },
    /// `reboot {reason?: string}`.
    Reboot {
        /// Why (shown in state and status).
        reason: String,
    },
    /// `rescan {}`.
    Rescan,
    /// `release_npu {model?: string}`.
    ReleaseNpu {
        /// Model to unload; every loaded one when absent.
        model: Option<String>,
    },
    /// `fix {check?: "id[,id...]", dry_run?: bool}`: carry out the typed remedies of the fired
    /// findings (of the named checks, or all), then diagnose again.
    Fix {
        /// Check ids to fix; empty for every fired finding.
        checks: Vec<String>,
        /// Only plan; change nothing.
        dry_run: bool,
    },
    /// `capture {max_bytes?: integer}`: make the support bundle and publish it in chunks for
    /// `fleet capture`; refused when the bundle is larger than `max_bytes`.
    Capture {
        /// Largest bundle the requester takes (bytes of the `.tar.gz`).
        max_bytes: u64,
    },
}

impl Action {
    /// The action's name on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Compact { .. } => "compact",
            Action::SetCma { .. } => "set_cma",
            Action::Reboot { .. } => "reboot",
            Action::Rescan => "rescan",
            Action::ReleaseNpu { .. } => "release_npu",
            Action::Fix { .. } => "fix",
            Action::Capture { .. } => "capture",
        }
    }
}

/// How one action ended, whatever ran it (the daemon, the CLI, a Home Assistant button).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActionOutcome {
    /// It succeeded (for a reboot: the reboot was started).
    pub ok: bool,
    /// It acted at all (false: refused before touching anything, so a rate-limit slot is given
    /// back).
    pub ran: bool,
    /// The board is going down for a reboot: the final state is published after the boot.
    pub reboot_pending: bool,
    /// A one-line summary on success, the reason on failure.
    pub message: String,
    /// The action's result object (its report), published as the command's `result`.
    pub details: Value,
    /// Bytes the command publishes beside its answer (a `capture`'s bundle); empty otherwise.
    #[serde(skip)]
    pub attachment: Vec<u8>,
}

impl ActionOutcome {
    /// It ran and succeeded.
    pub fn succeeded(message: impl Into<String>, details: Value) -> ActionOutcome {
        ActionOutcome {
            ok: true,
            ran: true,
            reboot_pending: false,
            message: message.into(),
            details,
            attachment: Vec::new(),
        }
    }

    /// It ran and failed, with the reason.
    pub fn failed(message: impl Into<String>, details: Value) -> ActionOutcome {
        ActionOutcome {
            ok: false,
            ..ActionOutcome::succeeded(message, details)
        }
    }

    /// Refused before acting, with the reason.
    pub fn refused(message: impl Into<String>, details: Value) -> ActionOutcome {
        ActionOutcome {
            ran: false,
            ..ActionOutcome::failed(message, details)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_wire_vocabulary() {
        let all = [
            Action::Compact { drop_caches: false },
            Action::SetCma {
                size: "256M".into(),
            },
            Action::Reboot {
                reason: String::new(),
            },
            Action::Rescan,
            Action::ReleaseNpu { model: None },
            Action::Fix {
                checks: Vec::new(),
                dry_run: true,
            },
            Action::Capture { max_bytes: 1 },
        ];
        let names: Vec<&str> = all.iter().map(Action::name).collect();
        assert_eq!(names, ACTIONS);
    }

    #[test]
    fn outcomes_say_whether_it_acted() {
        let r = ActionOutcome::refused("too big", Value::Null);
        assert!(!r.ok && !r.ran && !r.reboot_pending);
        let f = ActionOutcome::failed("no compact_memory", Value::Null);
        assert!(!f.ok && f.ran);
        assert!(ActionOutcome::succeeded("done", Value::Null).ok);
    }
}
