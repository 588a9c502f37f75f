//! The size argument of `cma set` and the `set_cma` command, read as the kernel's `memparse`
//! reads `cma=`: the typed size every layer passes on, and why a size is refused.

use super::size::{human_bytes, memparse};

/// Largest CMA pool `cma set` accepts, as a percentage of `MemTotal` (a safe fraction: the pool
/// is taken from low memory that unmovable allocations also need).
pub const MAX_RAM_PERCENT: u64 = 25;

/// Alignment `cma-size=` needs (bytes): the overlay README says "in bytes, 4MB aligned".
pub const OVERLAY_SIZE_ALIGN_BYTES: u64 = 4 << 20;

/// A requested CMA size: bytes and the token written after `cma=` (`256M`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CmaSize {
    /// Size in bytes.
    pub bytes: u64,
    /// Canonical `memparse` form: the largest of G/M/K that divides the size exactly, else
    /// plain bytes (`262144K` -> `256M`).
    pub token: String,
}

/// Why a requested size is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// Not a number with an optional K/M/G/T/P/E suffix (the kernel's `memparse`).
    #[error("{0:?} is not a size: use a number (decimal, or 0x hex) with an optional K, M, G, T, P or E suffix (e.g. 256M, 0x10000000)")]
    Syntax(String),
    /// A leading `0` that the kernel's `memparse` reads as octal (`0256M` is 174 MiB).
    #[error("{text:?} starts with 0, which the kernel reads as an octal number ({bytes} bytes); write it without the leading 0 or in hex (0x...)")]
    Octal {
        /// The size as given.
        text: String,
        /// What the kernel would read, in bytes.
        bytes: u64,
    },
    /// A `@start-end` placement was given; `cma set` only sets the size.
    #[error(
        "{0:?} has a placement (@...): cma set only sets the size; edit the placement by hand"
    )]
    Placement(String),
    /// Below the profile's `cma.min_total_bytes`.
    #[error("{size} is below the profile's minimum pool of {min} (cma.min_total_bytes)", size = human_bytes(*size_bytes), min = human_bytes(*min_bytes))]
    BelowMinimum {
        /// Requested size in bytes.
        size_bytes: u64,
        /// The profile minimum in bytes.
        min_bytes: u64,
    },
    /// A non-zero size below [`MIN_SENSIBLE_BYTES`] (4 MiB), whatever the profile says.
    #[error("{size} is below 4 MiB, the smallest pool cma set accepts (a size without a suffix is in bytes: write 256M, not 256); 0 turns the pool off", size = human_bytes(*size_bytes))]
    BelowFloor {
        /// Requested size in bytes.
        size_bytes: u64,
    },
    /// More than [`MAX_RAM_PERCENT`] of `MemTotal`.
    #[error("{size} is more than {MAX_RAM_PERCENT}% of RAM ({ram}): at most {limit} is accepted, because the pool is carved out of low memory that the kernel also needs", size = human_bytes(*size_bytes), ram = human_bytes(*mem_total_bytes), limit = human_bytes(*limit_bytes))]
    AboveSafeFraction {
        /// Requested size in bytes.
        size_bytes: u64,
        /// `MemTotal` in bytes.
        mem_total_bytes: u64,
        /// The accepted maximum in bytes.
        limit_bytes: u64,
    },
    /// `MemTotal` is unknown, so the size cannot be checked against RAM.
    #[error("cannot check the size against RAM: /proc/meminfo has no MemTotal ({0})")]
    UnknownRam(String),
    /// The Pi overlay's `cma-size=` needs a multiple of 4 MiB.
    #[error("{size} is not a multiple of 4 MiB, which the Raspberry Pi cma overlay needs (cma-size is 4MB aligned); try {lower} or {upper}", size = human_bytes(*size_bytes), lower = format_cma_token(*size_bytes / OVERLAY_SIZE_ALIGN_BYTES * OVERLAY_SIZE_ALIGN_BYTES), upper = format_cma_token((*size_bytes / OVERLAY_SIZE_ALIGN_BYTES + 1) * OVERLAY_SIZE_ALIGN_BYTES))]
    OverlayAlignment {
        /// Requested size in bytes.
        size_bytes: u64,
    },
}

/// The shortest exact `memparse` form of `bytes`: `1G`, `256M`, `65540K`, `0`, or plain bytes.
pub fn format_cma_token(bytes: u64) -> String {
    if bytes == 0 {
        return "0".into();
    }
    for (shift, suffix) in [(30, "G"), (20, "M"), (10, "K")] {
        if bytes % (1u64 << shift) == 0 {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Parses the SIZE argument of `cma set` the way the kernel's `memparse` reads `cma=`: decimal or
/// `0x` hex, one optional suffix `K M G T P E` (either case, binary units): `256M`, `1g`,
/// `262144K`, `0x10000000`, `0`. A `B`/`iB` after the suffix (`256MB`, `256MiB`) is accepted, as
/// the kernel ignores it too.
///
/// Errors: [`SizeError::Syntax`] for anything else (no number, other trailing text, overflow),
/// [`SizeError::Octal`] for a leading `0` the kernel would read as octal,
/// [`SizeError::Placement`] for `@start-end`.
pub fn parse_cma_size(text: &str) -> Result<CmaSize, SizeError> {
    let t = text.trim();
    if t.contains('@') {
        return Err(SizeError::Placement(t.to_string()));
    }
    let syntax = || SizeError::Syntax(t.to_string());
    let (bytes, rest) = memparse(t).ok_or_else(syntax)?;
    let consumed = &t[..t.len() - rest.len()];
    let hex = consumed.starts_with("0x") || consumed.starts_with("0X");
    let suffixed = consumed.ends_with(|c: char| "KMGTPkmgtp".contains(c))
        || (!hex && consumed.ends_with(['E', 'e']));
    let rest_ok = rest.is_empty() || (suffixed && matches!(rest, "B" | "b" | "iB" | "ib"));
    if rest.len() == t.len() || !rest_ok {
        return Err(syntax());
    }
    if !hex
        && consumed.len() > 1
        && consumed.starts_with('0')
        && consumed[1..].starts_with(|c: char| c.is_ascii_digit())
    {
        return Err(SizeError::Octal {
            text: t.to_string(),
            bytes,
        });
    }
    Ok(CmaSize {
        bytes,
        token: format_cma_token(bytes),
    })
}
