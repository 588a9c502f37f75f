//! Saving the command ledger away from the caller's thread: the daemon's gate changes the
//! ledger in memory on the thread that keeps the MQTT link alive, and a copy of it is written
//! on the blocking pool ([`LedgerSave::write`]), so a slow or failing disk never stalls the
//! link. Copies are numbered in the order the gate made its changes and [`LedgerWriter`] keeps
//! an older copy from ever overwriting a newer one, whatever order the pool runs them in.
//!
//! What stays synchronous is the ordering that matters: a command's id is on disk before its
//! action acts (the daemon writes the copy in the job's own preflight step and refuses the job
//! when it cannot), so a restart never runs a command twice.

use super::{cli_slot_merge, Ledger, LEDGER_FILE};
use crate::action::state::StateDir;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Serialises the writes of [`LedgerSave`]s made by one gate: the number of the newest copy on
/// disk, held while a copy is written.
#[derive(Debug, Default)]
pub struct LedgerWriter {
    written_gen: Mutex<u64>,
}

/// A copy of the ledger to write, with its place in the order of the gate's changes.
#[derive(Debug)]
pub struct LedgerSave {
    pub(super) gen: u64,
    pub(super) ledger: Ledger,
    pub(super) state: StateDir,
    pub(super) writer: Arc<LedgerWriter>,
}

impl LedgerSave {
    /// Writes this copy to [`LEDGER_FILE`] unless a newer one (which holds every change of this
    /// one) is already there, first taking the command line's runs from the file so an admin's
    /// `npu-agent compact` recorded meanwhile is not lost. Blocks on the file system: call it on
    /// a blocking thread.
    ///
    /// Returns the command line's runs read from the file, for the gate to take
    /// ([`super::Gate::absorb_cli_runs`]).
    ///
    /// Errors: the file could not be written (the reason; the copy is not counted as written).
    pub fn write(mut self) -> Result<BTreeMap<String, i64>, String> {
        let mut written = self
            .writer
            .written_gen
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if *written >= self.gen {
            return Ok(BTreeMap::new());
        }
        let cli = match self.state.load::<Ledger>(LEDGER_FILE) {
            Ok(Some(disk)) => cli_slot_merge(&mut self.ledger, disk),
            _ => BTreeMap::new(),
        };
        self.state
            .save(LEDGER_FILE, &self.ledger)
            .map_err(|e| e.to_string())?;
        *written = self.gen;
        Ok(cli)
    }

    /// The place of this copy in the order of the gate's changes (1 is the first).
    pub fn generation(&self) -> u64 {
        self.gen
    }
}

impl super::Gate {
    /// From now on the ledger is saved behind: a change is only numbered, and the caller takes
    /// the copies to write ([`Gate::take_unsaved`], [`Gate::save_now`]) and writes them on a
    /// blocking thread. Without a state directory nothing is saved and this does nothing.
    ///
    /// [`Gate::take_unsaved`]: super::Gate::take_unsaved
    /// [`Gate::save_now`]: super::Gate::save_now
    pub fn save_behind(&mut self) {
        if self.state.is_some() {
            self.writer = Some(Arc::new(LedgerWriter::default()));
        }
    }

    /// The ledger's last changes to write, when some were not handed out yet (saved behind).
    pub fn take_unsaved(&mut self) -> Option<LedgerSave> {
        if !self.unsaved {
            return None;
        }
        self.save_now()
    }

    /// The ledger as it is now, to write before an admitted command acts (saved behind): its
    /// id must be on disk first. `None` when the ledger is saved in place.
    pub fn save_now(&mut self) -> Option<LedgerSave> {
        let (Some(writer), Some(state)) = (&self.writer, &self.state) else {
            return None;
        };
        self.unsaved = false;
        Some(LedgerSave {
            gen: self.gen,
            ledger: self.ledger.clone(),
            state: state.clone(),
            writer: writer.clone(),
        })
    }

    /// Takes the command line's runs ([`super::cli_slot`]) read from the ledger file on
    /// another thread (by [`LedgerSave::write`] or after a diagnosis), the later time of each.
    pub fn absorb_cli_runs(&mut self, runs: BTreeMap<String, i64>) {
        for (slot, at) in runs {
            if slot.ends_with("/cli") {
                let e = self.ledger.last_run.entry(slot).or_insert(at);
                *e = (*e).max(at);
            }
        }
    }
}

/// The command line's runs ([`super::cli_slot`]) in the ledger file of `state` (none when it
/// is missing or unreadable). Reads a file: call it on a blocking thread.
pub fn read_cli_runs(state: &StateDir) -> BTreeMap<String, i64> {
    match state.load::<Ledger>(LEDGER_FILE) {
        Ok(Some(disk)) => cli_slot_merge(&mut Ledger::default(), disk),
        _ => BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{admit, policy, signed, topic, NOW};
    use super::super::{cli_slot, Admission, Gate};
    use super::*;
    use crate::model::action::ActionKind;
    use crate::root::SysRoot;

    fn behind(dir: &std::path::Path) -> (Gate, StateDir) {
        let state = StateDir::new(&SysRoot::new(dir), "/var/lib/npu-agent");
        let mut g = Gate::new(policy(), Some(state.clone()), 600);
        g.save_behind();
        (g, state)
    }

    fn on_disk(state: &StateDir) -> Option<Ledger> {
        state.load::<Ledger>(LEDGER_FILE).unwrap()
    }

    #[test]
    fn an_admitted_command_is_written_only_by_its_copy_and_an_older_copy_never_wins() {
        let dir = tempfile::tempdir().unwrap();
        let (mut g, state) = behind(dir.path());
        let b = signed("rescan", "c1", serde_json::json!({}), NOW);
        let a = admit(&mut g, &topic("b1", "rescan", "c1"), &b, NOW);
        assert!(matches!(a, Admission::Queued(Some(_))), "{a:?}");
        // Nothing touched the disk on the caller's thread.
        assert_eq!(on_disk(&state), None);
        let first = g.take_unsaved().expect("the admission is a change");
        assert!(g.take_unsaved().is_none(), "handed out once");
        let b2 = signed("rescan", "c2", serde_json::json!({}), NOW);
        admit(&mut g, &topic("b1", "rescan", "c2"), &b2, NOW);
        let second = g.save_now().unwrap();
        assert!(second.generation() > first.generation());
        // The pool runs the newer copy first: the older one finds it there and writes nothing.
        second.write().unwrap();
        first.write().unwrap();
        let disk = on_disk(&state).unwrap();
        let ids: Vec<&String> = disk.commands.keys().collect();
        assert_eq!(ids.len(), 2, "{ids:?}");
        assert!(ids.iter().any(|k| k.contains("c2")), "{ids:?}");
    }

    #[test]
    fn a_failed_write_is_not_counted_and_the_next_copy_writes_again() {
        let dir = tempfile::tempdir().unwrap();
        let (mut g, state) = behind(dir.path());
        // The state directory's parent is a file: every write fails.
        std::fs::create_dir_all(dir.path().join("var")).unwrap();
        std::fs::write(dir.path().join("var/lib"), "not a directory").unwrap();
        let b = signed("rescan", "c1", serde_json::json!({}), NOW);
        admit(&mut g, &topic("b1", "rescan", "c1"), &b, NOW);
        let e = g.save_now().unwrap().write().unwrap_err();
        assert!(!e.is_empty());
        std::fs::remove_file(dir.path().join("var/lib")).unwrap();
        // No change since, and yet the same generation is written now: the failure did not count.
        g.save_now().unwrap().write().unwrap();
        assert_eq!(on_disk(&state).unwrap().commands.len(), 1);
    }

    #[test]
    fn the_command_lines_runs_in_the_file_are_kept_and_handed_back() {
        let dir = tempfile::tempdir().unwrap();
        let (mut g, state) = behind(dir.path());
        let slot = cli_slot(ActionKind::Compact);
        let mut admin = Ledger::default();
        admin.last_run.insert(slot.clone(), NOW - 5);
        state.save(LEDGER_FILE, &admin).unwrap();
        assert_eq!(read_cli_runs(&state).get(&slot), Some(&(NOW - 5)));
        let b = signed("rescan", "c1", serde_json::json!({}), NOW);
        admit(&mut g, &topic("b1", "rescan", "c1"), &b, NOW);
        let cli = g.take_unsaved().unwrap().write().unwrap();
        assert_eq!(cli.get(&slot), Some(&(NOW - 5)));
        assert_eq!(
            on_disk(&state).unwrap().last_run.get(&slot),
            Some(&(NOW - 5))
        );
        g.absorb_cli_runs(cli);
        assert_eq!(g.ledger().last_run.get(&slot), Some(&(NOW - 5)));
    }

    #[test]
    fn an_unreadable_ledger_still_refuses_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("var/lib/npu-agent");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(LEDGER_FILE), "{ not json").unwrap();
        let (mut g, _) = behind(dir.path());
        let b = signed("rescan", "c1", serde_json::json!({}), NOW);
        let a = admit(&mut g, &topic("b1", "rescan", "c1"), &b, NOW);
        assert!(matches!(a, Admission::Rejected { .. }), "{a:?}");
        assert!(g.take_unsaved().is_none());
    }
}
