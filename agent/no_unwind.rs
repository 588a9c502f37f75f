//! The libunwind entry points of the static aarch64 build (`aarch64-unknown-linux-musl`), defined
//! here so that neither libunwind nor std's backtrace symbolizer is linked: 209,952 bytes of the
//! stripped binary (2,451,768 → 2,241,816 bytes on 2026-12-01, `bash bench/size.sh`).
//!
//! Why they are dead weight in this build:
//! - `panic = "abort"` (Cargo.toml): a panic prints its message and aborts; nothing unwinds, so the
//!   landing-pad entry points (`_Unwind_Resume`, and the `_Unwind_Get*`/`_Unwind_Set*` calls of
//!   the personality routine) are never reached: only `_Unwind_RaiseException` and
//!   `_Unwind_ForcedUnwind` start an unwind, and nothing in this build links either (std's
//!   unwinding panic runtime is not linked; musl's `pthread_exit` and cancellation do not unwind;
//!   ring's C and assembly call no `_Unwind_*`).
//! - The DWARF unwind tables are discarded at link time (.cargo/aarch64-no-eh-frame.ld), so
//!   libunwind's `_Unwind_Backtrace` finds no frame to step to: the backtrace std prints under
//!   `RUST_BACKTRACE=1` was already empty, and its symbolizer (gimli, addr2line, an inflater for
//!   compressed debug sections, rustc-demangle) never had a frame to look up.
//!
//! std calls these through its `unwind` crate; libunwind.a (rustc's self-contained musl libraries)
//! supplies them to the linker only when nothing else does. Defined here, the linker takes none of
//! libunwind's objects, and under the release profile's LTO `_Unwind_Backtrace` — which reports the
//! end of the stack at once, as libunwind did without tables — is inlined into std's backtrace
//! printer: the frame callback (which calls `_Unwind_GetIP`, `_Unwind_GetCFA` and
//! `_Unwind_FindEnclosingFunction`), and everything only it reaches (the symbolizer), is no longer
//! referenced. Without LTO the build still links (those two are defined here too) and runs the
//! same, but keeps the symbolizer.
//!
//! Behaviour kept, and held by tests/aarch64.rs (`aarch64_panic_prints_its_message_and_aborts`,
//! which runs examples/panic_probe.rs, built with this file, under qemu-aarch64-static): a panic
//! prints `thread '…' panicked at FILE:LINE:COL:` and its message, under `RUST_BACKTRACE=1` or
//! `full` a `stack backtrace:` line with no frames (and, for `1`, std's note that details are
//! omitted, printed only once the walk has returned), and the process ends by SIGABRT. A later
//! std that needs another `_Unwind_*` symbol fails the link (libunwind's two objects that define
//! them also define names defined here: two definitions) instead of silently bringing libunwind
//! back. A reference to libunwind's own `unw_*`/`__unw_*` interface would bring its unwinder back
//! (about 40 KB) without a link error; nothing in the dependency tree makes one today, and the
//! size limit test (`aarch64_binary_fits_the_size_limit`) and the probe's size, checked by the
//! panic test, bound what could come back unnoticed.
//!
//! Only this target, and only with `panic = "abort"` (`cfg(panic = "abort")` in agent/main.rs):
//! the glibc and x86_64 builds, and every unwinding build of this target (the dev and test
//! profiles), keep libunwind.
#![allow(unsafe_code)]

use core::ffi::{c_int, c_void};

/// A machine word as std's `unwind` crate declares `_Unwind_Word` and `_Unwind_Ptr` (unwind.h's
/// `uintptr_t`).
type Word = *const u8;

/// libunwind's `_Unwind_Reason_Code` for "no more frames" (`_URC_END_OF_STACK`, unwind.h).
const URC_END_OF_STACK: c_int = 5;

/// The per-frame callback `_Unwind_Backtrace` takes (`_Unwind_Trace_Fn`, unwind.h).
type TraceFn = extern "C" fn(*mut c_void, *mut c_void) -> c_int;

/// Walks no frame: the binary has no unwind tables to walk with. Returns `_URC_END_OF_STACK`.
#[no_mangle]
pub extern "C" fn _Unwind_Backtrace(_trace: TraceFn, _trace_argument: *mut c_void) -> c_int {
    URC_END_OF_STACK
}

/// Ends a landing pad's cleanup; unreachable with panic = "abort" (nothing raises). Aborts.
#[no_mangle]
pub extern "C" fn _Unwind_Resume(_exception: *mut c_void) -> ! {
    std::process::abort()
}

/// A personality-routine query; unreachable (no unwind starts). Aborts.
#[no_mangle]
pub extern "C" fn _Unwind_GetIP(_context: *mut c_void) -> Word {
    std::process::abort()
}

/// A personality-routine query; unreachable (no unwind starts). Aborts.
#[no_mangle]
pub extern "C" fn _Unwind_GetIPInfo(_context: *mut c_void, _ip_before_insn: *mut c_int) -> Word {
    std::process::abort()
}

/// A personality-routine query; unreachable (no unwind starts). Aborts.
#[no_mangle]
pub extern "C" fn _Unwind_GetLanguageSpecificData(_context: *mut c_void) -> *mut c_void {
    std::process::abort()
}

/// A personality-routine query; unreachable (no unwind starts). Aborts.
#[no_mangle]
pub extern "C" fn _Unwind_GetRegionStart(_context: *mut c_void) -> Word {
    std::process::abort()
}

/// A personality-routine query; unreachable (no unwind starts). Aborts.
#[no_mangle]
pub extern "C" fn _Unwind_GetDataRelBase(_context: *mut c_void) -> Word {
    std::process::abort()
}

/// A personality-routine query; unreachable (no unwind starts). Aborts.
#[no_mangle]
pub extern "C" fn _Unwind_GetTextRelBase(_context: *mut c_void) -> Word {
    std::process::abort()
}

/// Sets a register before a landing pad is entered; unreachable (no unwind starts). Aborts.
#[no_mangle]
pub extern "C" fn _Unwind_SetGR(_context: *mut c_void, _register: c_int, _value: Word) {
    std::process::abort()
}

/// Sets the address a landing pad is entered at; unreachable (no unwind starts). Aborts.
#[no_mangle]
pub extern "C" fn _Unwind_SetIP(_context: *mut c_void, _ip: Word) {
    std::process::abort()
}

/// The canonical frame address of a frame; called only by std's frame callback, which no walk
/// reaches (and which LTO removes). Aborts.
#[no_mangle]
pub extern "C" fn _Unwind_GetCFA(_context: *mut c_void) -> Word {
    std::process::abort()
}

/// The start of the function holding an address; called only by std's frame callback, which no
/// walk reaches (and which LTO removes). Aborts.
#[no_mangle]
pub extern "C" fn _Unwind_FindEnclosingFunction(_pc: *mut c_void) -> *mut c_void {
    std::process::abort()
}
