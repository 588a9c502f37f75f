//! The x86 hybrid-MoE server checks (`kernel.numa_balancing`, `llm.override_tensor`,
//! `llm.vram_budget`): run by [`super::llm`] where the profile names LLM servers, else one
//! `skip` per id saying that the profile has no server checks.

use super::{Ctx, Finding};

/// The check ids of the server checks, in report order.
pub const SERVER_CHECK_IDS: [&str; 3] = [
    "kernel.numa_balancing",
    "llm.override_tensor",
    "llm.vram_budget",
];

/// The server findings for `ctx`.
pub(super) fn all(ctx: &Ctx<'_>) -> Vec<Finding> {
    if !ctx.profile.llm.enabled() {
        return not_this_profile(ctx);
    }
    super::llm::all(ctx)
}

/// The skips of a profile that names no LLM server.
fn not_this_profile(ctx: &Ctx<'_>) -> Vec<Finding> {
    let p = &ctx.profile.id;
    vec![
        Finding::skip(
            "kernel.numa_balancing",
            format!("profile {p} has no server checks (kernel.numa_balancing runs on x86-hybrid-moe)"),
        ),
        Finding::skip(
            "llm.override_tensor",
            format!("profile {p} has no server checks (they run on x86-hybrid-moe: choose it with --profile x86-hybrid-moe)"),
        ),
        Finding::skip(
            "llm.vram_budget",
            format!("profile {p} has no server checks (they run on x86-hybrid-moe: choose it with --profile x86-hybrid-moe)"),
        ),
    ]
}
