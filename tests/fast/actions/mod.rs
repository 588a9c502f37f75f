//! Integration tests of the guarded actions (`agent/action`): boot-file edits against golden
//! files made from real samples, `cma set`/`cma show` on temporary board trees, the power-cut
//! (fault injection) proof of the atomic writer, the planner against the board fixtures,
//! compaction, the reboot state machine, and the `compact` / `cma` subcommands.

mod bootedit_golden;
mod bootedit_props;
mod cli;
mod cma_set;
mod compact;
mod fix_apply;
mod hardening;
mod planner_fixtures;
mod powercut;
mod reboot;
mod update_apt;
mod util;
