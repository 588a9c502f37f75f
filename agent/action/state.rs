//! The agent's persisted state: small JSON files in the state directory
//! (`/var/lib/npu-agent/` under the root, docs/reference.md "Config keys" `state_dir`), each written atomically with
//! [`super::atomic::write_atomic`] so a power cut leaves the old or the new file.
//!
//! Files: [`COMPACT_FILE`] (last compaction, attempt counter), [`BOOT_EDIT_FILE`] (the last
//! boot-file edit, whether it was verified, `reboot_required`), [`super::reboot::REBOOT_FILE`]
//! (reboot intent and history).

use super::atomic::{existing_mode, write_atomic, RealStorage, Storage, WriteError};
use crate::parse::bootfile::BootFileKind;
use crate::root::{ReadError, SysRoot};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Default state directory on the board (`state_dir`, docs/reference.md "Config keys").
pub const DEFAULT_STATE_DIR: &str = "/var/lib/npu-agent";
/// Compaction state file name.
pub const COMPACT_FILE: &str = "compact.json";
/// Boot-file edit state file name.
pub const BOOT_EDIT_FILE: &str = "boot_edit.json";
/// Mode of state files (they may name command ids; not secret, not world-writable).
pub const STATE_FILE_MODE: u32 = 0o640;

/// A state file that could not be read, decoded or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Reading the file failed (other than "not there", which is `Ok(None)`).
    #[error("cannot read state: {0}")]
    Read(#[from] ReadError),
    /// The file is not the JSON this agent writes.
    #[error("state file {path} is corrupt: {detail}")]
    Corrupt {
        /// Board path of the file.
        path: String,
        /// The decoder's message.
        detail: String,
    },
    /// Encoding failed (should not happen for these types).
    #[error("cannot encode state {path}: {detail}")]
    Encode {
        /// Board path of the file.
        path: String,
        /// The encoder's message.
        detail: String,
    },
    /// Writing failed at one step.
    #[error("cannot write state: {0}")]
    Write(#[from] WriteError),
}

/// The state directory under a root.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: SysRoot,
    dir: String,
}

impl StateDir {
    /// The state directory `dir` (a board path such as `/var/lib/npu-agent`) under `root`.
    pub fn new(root: &SysRoot, dir: &str) -> Self {
        StateDir {
            root: root.clone(),
            dir: dir.trim_end_matches('/').to_string(),
        }
    }

    /// [`DEFAULT_STATE_DIR`] under `root`.
    pub fn default_for(root: &SysRoot) -> Self {
        StateDir::new(root, DEFAULT_STATE_DIR)
    }

    /// Board path of a state file (`/var/lib/npu-agent/compact.json`).
    pub fn board_path(&self, name: &str) -> String {
        format!("{}/{name}", self.dir)
    }

    /// The root the directory lives under.
    pub fn root(&self) -> &SysRoot {
        &self.root
    }

    /// Reads and decodes state file `name`; `Ok(None)` when it does not exist.
    ///
    /// Errors: [`StateError::Read`] when it cannot be read, [`StateError::Corrupt`] when it is
    /// not the expected JSON.
    pub fn load<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, StateError> {
        let Some((path, bytes)) = self.read_file(name)? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| corrupt(path, e))
    }

    /// The board path and bytes of state file `name`, `None` when it does not exist (the part
    /// of [`load`](Self::load) that is the same for every state type).
    fn read_file(&self, name: &str) -> Result<Option<(String, Vec<u8>)>, StateError> {
        let path = self.board_path(name);
        // A state file is the agent's own: a symlink planted in its place is never followed
        // (it could point at the config or a key); it reads as corrupt and the next save
        // replaces the link itself.
        if let Ok(entry) = self.root.entry_path(&path) {
            if entry
                .symlink_metadata()
                .is_ok_and(|m| m.file_type().is_symlink())
            {
                return Err(StateError::Corrupt {
                    path,
                    detail: "it is a symbolic link, which a state file never is".into(),
                });
            }
        }
        match self.root.read(&path) {
            Ok(b) => Ok(Some((path, b))),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Encodes `value` as pretty JSON and writes state file `name` atomically (creating the
    /// directory), on the real filesystem.
    ///
    /// Errors: [`StateError::Read`] when the directory cannot be created or escapes the root,
    /// [`StateError::Write`] for the failing write step.
    pub fn save<T: Serialize>(&self, name: &str, value: &T) -> Result<(), StateError> {
        self.save_with(&mut RealStorage, name, value)
    }

    /// [`save`](Self::save) through a given [`Storage`] (tests inject faults here).
    ///
    /// Errors: as [`save`](Self::save).
    pub fn save_with<T: Serialize>(
        &self,
        storage: &mut dyn Storage,
        name: &str,
        value: &T,
    ) -> Result<(), StateError> {
        match serde_json::to_string_pretty(value) {
            Ok(text) => self.write_file(storage, name, text),
            Err(e) => Err(StateError::Encode {
                path: self.board_path(name),
                detail: e.to_string(),
            }),
        }
    }

    /// Writes the encoded state `text` (a newline added) as file `name` atomically (the part of
    /// [`save_with`](Self::save_with) that is the same for every state type).
    fn write_file(
        &self,
        storage: &mut dyn Storage,
        name: &str,
        mut text: String,
    ) -> Result<(), StateError> {
        let path = self.board_path(name);
        text.push('\n');
        self.root.create_dir_all(&self.dir)?;
        // The entry itself: a symlink at a state file is replaced by the rename, never followed;
        // every step goes through the directory opened once (a swapped directory cannot move it).
        let target = self.root.entry_target(&path)?;
        let host = target.path();
        let is_link = host
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink());
        let mode = match is_link {
            true => STATE_FILE_MODE,
            false => existing_mode(&host).unwrap_or(STATE_FILE_MODE),
        };
        write_atomic(storage, &host, text.as_bytes(), None, mode)
            .map_err(|e| e.unpinned(&target))?;
        Ok(())
    }
}

/// A state file that is not the expected JSON.
fn corrupt(path: String, e: serde_json::Error) -> StateError {
    StateError::Corrupt {
        path,
        detail: e.to_string(),
    }
}

fn schema_1() -> u32 {
    1
}

/// Compaction history for the planner's cooldown and attempt limit (`compact.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactState {
    /// Format version (1).
    #[serde(default = "schema_1")]
    pub schema: u32,
    /// When the last compaction ran (seconds since the epoch, UTC).
    #[serde(default)]
    pub last_run_unix_s: Option<i64>,
    /// Runs since the trigger last cleared; the planner stops at the attempt limit.
    #[serde(default)]
    pub consecutive_attempts: u32,
    /// How long the last run took (milliseconds).
    #[serde(default)]
    pub last_duration_ms: Option<u64>,
    /// What started the last run (`cli`, `planner`, `command`).
    #[serde(default)]
    pub last_trigger: String,
}

/// What a boot edit does to one file (so the edit can be verified again later).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EditOp {
    /// Set the kernel `cma=` size in a kernel-arguments file.
    SetCma,
    /// Remove `cma=` from a kernel-arguments file (Raspberry Pi 5 `cmdline.txt`).
    RemoveCma,
    /// Size the device-tree pool in a Raspberry Pi `config.txt` (`dtoverlay=cma,cma-N`).
    SetOverlay,
}

/// One file changed by a boot edit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditedFile {
    /// Board path (`/boot/armbianEnv.txt`).
    pub path: String,
    /// Its kind.
    pub kind: BootFileKind,
    /// The edit.
    pub op: EditOp,
    /// What the edit did there (`line 4: cma=256M -> cma=512M`).
    pub summary: String,
    /// Board path of the backup beside it, once written.
    #[serde(default)]
    pub backup: Option<String>,
}

/// The last boot-file edit (`boot_edit.json`): written `verified: false` before the files are
/// touched and `verified: true, reboot_required: true` after they were re-read and re-parsed.
/// A reboot is refused while `verified` is false.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootEditState {
    /// Format version (1).
    #[serde(default = "schema_1")]
    pub schema: u32,
    /// The size asked for (`256M`).
    pub requested: String,
    /// The size in bytes.
    pub requested_bytes: u64,
    /// Files in the order they are written.
    pub files: Vec<EditedFile>,
    /// When the edit started (seconds since the epoch, UTC).
    pub edited_unix_s: i64,
    /// `/proc/sys/kernel/random/boot_id` when the edit was made (empty when unreadable).
    pub boot_id: String,
    /// True once every file was re-read and says what was asked.
    pub verified: bool,
    /// True from a verified edit until a boot with another `boot_id`.
    pub reboot_required: bool,
    /// The `boot_id` of the first boot after the edit (the edit is in the running kernel's
    /// boot configuration from then on).
    #[serde(default)]
    pub applied_boot_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_at_a_state_file_is_replaced_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::new(dir.path());
        let st = StateDir::default_for(&root);
        let etc = dir.path().join("etc/npu-agent");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(etc.join("agent.toml"), "board_id = \"b1\"\n").unwrap();
        let state = dir.path().join("var/lib/npu-agent");
        std::fs::create_dir_all(&state).unwrap();
        let link = state.join(COMPACT_FILE);
        std::os::unix::fs::symlink("/etc/npu-agent/agent.toml", &link).unwrap();
        let e = st.load::<CompactState>(COMPACT_FILE).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        st.save(COMPACT_FILE, &CompactState::default()).unwrap();
        assert_eq!(
            std::fs::read_to_string(etc.join("agent.toml")).unwrap(),
            "board_id = \"b1\"\n"
        );
        assert!(!link.symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(
            st.load::<CompactState>(COMPACT_FILE).unwrap(),
            Some(CompactState::default())
        );
    }

    #[test]
    fn round_trip_and_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::new(dir.path());
        let st = StateDir::default_for(&root);
        assert_eq!(st.load::<CompactState>(COMPACT_FILE).unwrap(), None);
        let c = CompactState {
            last_run_unix_s: Some(1_700_000_000),
            consecutive_attempts: 2,
            ..Default::default()
        };
        st.save(COMPACT_FILE, &c).unwrap();
        assert!(dir.path().join("var/lib/npu-agent/compact.json").is_file());
        assert_eq!(st.load::<CompactState>(COMPACT_FILE).unwrap(), Some(c));
    }

    #[test]
    fn corrupt_file_is_an_error_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("var/lib/npu-agent")).unwrap();
        std::fs::write(
            dir.path().join("var/lib/npu-agent/compact.json"),
            "{not json",
        )
        .unwrap();
        let st = StateDir::default_for(&SysRoot::new(dir.path()));
        let e = st.load::<CompactState>(COMPACT_FILE).unwrap_err();
        assert!(
            e.to_string()
                .contains("/var/lib/npu-agent/compact.json is corrupt"),
            "{e}"
        );
    }
}
