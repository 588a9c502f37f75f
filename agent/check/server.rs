//! The x86 hybrid-MoE server checks (`kernel.numa_balancing`, `llm.override_tensor`,
//! `llm.vram_budget`) as every build reports them: run by [`super::llm`] where the build has the
//! `server` cargo feature and the profile names LLM servers, else one `skip` per id saying why
//! (the profile has no server checks, or this build leaves them out, as the static aarch64 one
//! does).

use super::{Ctx, Finding};

/// The check ids of the server checks, in report order.
pub const SERVER_CHECK_IDS: [&str; 3] = [
    "kernel.numa_balancing",
    "llm.override_tensor",
    "llm.vram_budget",
];

/// Why a build without the `server` feature skips the server checks.
pub const NOT_BUILT: &str = "this build has no server checks (built without the `server` feature, as the static aarch64 agent is): run the amd64 package or a host build for x86-hybrid-moe";

/// The server findings for `ctx`.
pub(super) fn all(ctx: &Ctx<'_>) -> Vec<Finding> {
    if !ctx.profile.llm.enabled() {
        return not_this_profile(ctx);
    }
    #[cfg(feature = "server")]
    return super::llm::all(ctx);
    #[cfg(not(feature = "server"))]
    SERVER_CHECK_IDS
        .iter()
        .map(|id| Finding::skip(id, NOT_BUILT))
        .collect()
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
