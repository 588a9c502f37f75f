//! The action vocabulary (what can be asked of a board, with its validated arguments) and the
//! typed outcome of running one. Pure data: the MQTT parser, the gate, the executor, the CLI and
//! Home Assistant all speak it.

use serde::Serialize;
use serde_json::Value;

/// The kinds of action the agent executes: the one place their wire names are written
/// ([`ActionKind::as_str`]). Every per-action property is an exhaustive `match` here, so a new
/// kind is a compile error wherever it must be handled.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "&'static str")]
pub enum ActionKind {
    /// Memory compaction (`compact`).
    Compact,
    /// The CMA size in the boot files (`set_cma`).
    SetCma,
    /// A reboot (`reboot`).
    Reboot,
    /// A fresh diagnosis (`rescan`).
    Rescan,
    /// Unload models from a local hailo-ollama (`release_npu`).
    ReleaseNpu,
    /// The planned fixes of the fired findings (`fix`).
    Fix,
    /// The support bundle, published in chunks (`capture`).
    Capture,
    /// Install another version of the agent's own package (`update`).
    Update,
}

impl ActionKind {
    /// Every kind, in the order the status and the docs list them.
    pub const ALL: [ActionKind; 8] = [
        ActionKind::Compact,
        ActionKind::SetCma,
        ActionKind::Reboot,
        ActionKind::Rescan,
        ActionKind::ReleaseNpu,
        ActionKind::Fix,
        ActionKind::Capture,
        ActionKind::Update,
    ];

    /// The name on the wire (topics, config, ledger, answers).
    pub fn as_str(self) -> &'static str {
        match self {
            ActionKind::Compact => "compact",
            ActionKind::SetCma => "set_cma",
            ActionKind::Reboot => "reboot",
            ActionKind::Rescan => "rescan",
            ActionKind::ReleaseNpu => "release_npu",
            ActionKind::Fix => "fix",
            ActionKind::Capture => "capture",
            ActionKind::Update => "update",
        }
    }

    /// The arguments a command of this kind may carry.
    pub fn arguments(self) -> &'static [&'static str] {
        match self {
            ActionKind::Compact => &["drop_caches"],
            ActionKind::SetCma => &["size"],
            ActionKind::Reboot => &["reason"],
            ActionKind::Rescan => &[],
            ActionKind::ReleaseNpu => &["model"],
            ActionKind::Fix => &["check", "dry_run"],
            ActionKind::Capture => &["max_bytes"],
            ActionKind::Update => &["version", "allow_downgrade"],
        }
    }

    /// Held while the board's clock is not synchronised: a destructive action an expiring
    /// command asks for (docs/reference.md, the clock hold).
    pub fn clock_gated(self) -> bool {
        match self {
            ActionKind::Reboot | ActionKind::SetCma => true,
            ActionKind::Compact
            | ActionKind::Rescan
            | ActionKind::ReleaseNpu
            | ActionKind::Fix
            | ActionKind::Capture
            | ActionKind::Update => false,
        }
    }

    /// Accepted unsigned by default (`security.allow_unsigned`'s default).
    pub fn unsigned_by_default(self) -> bool {
        match self {
            ActionKind::Compact | ActionKind::Rescan => true,
            ActionKind::SetCma
            | ActionKind::Reboot
            | ActionKind::ReleaseNpu
            | ActionKind::Fix
            | ActionKind::Capture
            | ActionKind::Update => false,
        }
    }

    /// Answered by the agent's next start, not when it returns: a reboot (the board comes back)
    /// and an update (the new binary answers, or the rolled-back old one).
    pub fn answered_after_restart(self) -> bool {
        match self {
            ActionKind::Reboot | ActionKind::Update => true,
            ActionKind::Compact
            | ActionKind::SetCma
            | ActionKind::Rescan
            | ActionKind::ReleaseNpu
            | ActionKind::Fix
            | ActionKind::Capture => false,
        }
    }

    /// Needs a local hailo-ollama, which only some boards have (the profile decides).
    pub fn needs_hailo_ollama(self) -> bool {
        match self {
            ActionKind::ReleaseNpu => true,
            ActionKind::Compact
            | ActionKind::SetCma
            | ActionKind::Reboot
            | ActionKind::Rescan
            | ActionKind::Fix
            | ActionKind::Capture
            | ActionKind::Update => false,
        }
    }

    /// What a Home Assistant button of this kind runs, for the kinds that have a button.
    pub fn button_press(self) -> Option<Action> {
        match self {
            ActionKind::Compact => Some(Action::Compact { drop_caches: false }),
            ActionKind::Rescan => Some(Action::Rescan),
            ActionKind::Fix => Some(Action::Fix {
                checks: Vec::new(),
                dry_run: false,
            }),
            ActionKind::SetCma
            | ActionKind::Reboot
            | ActionKind::ReleaseNpu
            | ActionKind::Capture
            | ActionKind::Update => None,
        }
    }

    /// The wire names of every kind, comma separated (for messages).
    pub fn names() -> String {
        ActionKind::ALL.map(ActionKind::as_str).join(", ")
    }
}

impl std::fmt::Display for ActionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ActionKind {
    type Err = String;

    /// Errors: the name is no action (the message lists the known ones).
    fn from_str(name: &str) -> Result<ActionKind, String> {
        ActionKind::ALL
            .into_iter()
            .find(|k| k.as_str() == name)
            .ok_or_else(|| format!("unknown action {name:?} (known: {})", ActionKind::names()))
    }
}

impl TryFrom<String> for ActionKind {
    type Error = String;

    fn try_from(name: String) -> Result<ActionKind, String> {
        name.parse()
    }
}

impl From<ActionKind> for &'static str {
    fn from(k: ActionKind) -> &'static str {
        k.as_str()
    }
}

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
    /// `update {version: "1.2.3-1", allow_downgrade?: bool}`: install that version of the
    /// `npu-agent` package from the board's apt sources; answered by the new agent (or after a
    /// rollback by the old one).
    Update {
        /// The Debian version to install.
        version: String,
        /// A version older than the installed one is accepted.
        allow_downgrade: bool,
    },
}

impl Action {
    /// The action's kind.
    pub fn kind(&self) -> ActionKind {
        match self {
            Action::Compact { .. } => ActionKind::Compact,
            Action::SetCma { .. } => ActionKind::SetCma,
            Action::Reboot { .. } => ActionKind::Reboot,
            Action::Rescan => ActionKind::Rescan,
            Action::ReleaseNpu { .. } => ActionKind::ReleaseNpu,
            Action::Fix { .. } => ActionKind::Fix,
            Action::Capture { .. } => ActionKind::Capture,
            Action::Update { .. } => ActionKind::Update,
        }
    }

    /// The action's name on the wire.
    pub fn name(&self) -> &'static str {
        self.kind().as_str()
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
            Action::Update {
                version: "1.0".into(),
                allow_downgrade: false,
            },
        ];
        let kinds: Vec<ActionKind> = all.iter().map(Action::kind).collect();
        assert_eq!(kinds, ActionKind::ALL);
        for k in ActionKind::ALL {
            assert_eq!(k.as_str().parse::<ActionKind>(), Ok(k));
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("{:?}", k.as_str()));
            assert_eq!(serde_json::from_str::<ActionKind>(&json).ok(), Some(k));
        }
        assert!("format_disk"
            .parse::<ActionKind>()
            .unwrap_err()
            .contains("known: compact"));
        let buttons: Vec<_> = ActionKind::ALL
            .into_iter()
            .filter(|k| k.button_press().is_some_and(|a| a.kind() == *k))
            .collect();
        assert_eq!(
            buttons,
            [ActionKind::Compact, ActionKind::Rescan, ActionKind::Fix]
        );
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
