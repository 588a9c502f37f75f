//! The libunwind entry points of the static aarch64 build (`aarch64-unknown-linux-musl`), defined
//! here so that neither libunwind nor std's backtrace symbolizer is linked: 209,952 bytes of the
//! stripped binary (2,451,768 → 2,241,816 bytes on 2026-12-01, `bash bench/size.sh`).
//!
//! Why they are dead weight in this build:
//! - `panic = "abort"` (Cargo.toml): a panic prints its message and aborts; nothing unwinds, so the
//!   landing-pad entry points (`_Unwind_Resume`, and the `_Unwind_Get*`/`_Unwind_Set*` calls of
//!   the personality routine) are never reached: only `_Unwind_RaiseException`, which panic=abort
//!   does not link, starts an unwind.
//! - The DWARF unwind tables are discarded at link time (.cargo/aarch64-no-eh-frame.ld), so
//!   libunwind's `_Unwind_Backtrace` finds no frame to step to: the backtrace std prints under
//!   `RUST_BACKTRACE=1` was already empty, and its symbolizer (gimli, addr2line, an inflater for
//!   compressed debug sections, rustc-demangle) never had a frame to look up.
//!
//! std calls these through its `unwind` crate; libunwind.a (rustc's self-contained musl libraries)
//! supplies them to the linker only when nothing else does. Defined here, in the LTO unit, the
//! linker takes none of libunwind's objects, and `_Unwind_Backtrace` — which reports the end of
//! the stack at once, as libunwind did without tables — is inlined into std's backtrace printer:
//! the frame callback, and everything only it reaches (the symbolizer), is no longer referenced.
//!
//! Behaviour kept, and held by tests/aarch64.rs (`aarch64_panic_prints_its_message_and_aborts`,
//! which runs examples/panic_probe.rs, built with this file, under qemu-aarch64-static): a panic
//! prints `thread '…' panicked at FILE:LINE:COL:` and its message, under `RUST_BACKTRACE=1` or
//! `full` a `stack backtrace:` line with no frames, and the process ends by SIGABRT. A later std
//! that needs another libunwind symbol fails the link (two definitions) instead of silently
//! bringing libunwind back; the size limit test (`aarch64_binary_fits_the_size_limit`) and the
//! probe's own size, checked by the panic test, catch any other way back.
//!
//! Only this target, and only with `panic = "abort"` (`cfg(panic = "abort")` in agent/main.rs):
//! the glibc and x86_64 builds, and any unwinding build, keep their unwinders and tables.
#![allow(unsafe_code)]

use core::ffi::{c_int, c_void};

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
pub extern "C" fn _Unwind_GetIP(_context: *mut c_void) -> usize {
    std::process::abort()
}

/// A personality-routine query; unreachable (no unwind starts). Aborts.
#[no_mangle]
pub extern "C" fn _Unwind_GetIPInfo(_context: *mut c_void, _ip_before_insn: *mut c_int) -> usize {
    std::process::abort()
}

/// A personality-routine query; unreachable (no unwind starts). Aborts.
#[no_mangle]
pub extern "C" fn _Unwind_GetLanguageSpecificData(_context: *mut c_void) -> *mut c_void {
    std::process::abort()
}

/// A personality-routine query; unreachable (no unwind starts). Aborts.
#[no_mangle]
pub extern "C" fn _Unwind_GetRegionStart(_context: *mut c_void) -> usize {
    std::process::abort()
}

/// A personality-routine query; unreachable (no unwind starts). Aborts.
#[no_mangle]
pub extern "C" fn _Unwind_GetDataRelBase(_context: *mut c_void) -> usize {
    std::process::abort()
}

/// A personality-routine query; unreachable (no unwind starts). Aborts.
#[no_mangle]
pub extern "C" fn _Unwind_GetTextRelBase(_context: *mut c_void) -> usize {
    std::process::abort()
}

/// Sets a register before a landing pad is entered; unreachable (no unwind starts). Aborts.
#[no_mangle]
pub extern "C" fn _Unwind_SetGR(_context: *mut c_void, _register: c_int, _value: usize) {
    std::process::abort()
}

/// Sets the address a landing pad is entered at; unreachable (no unwind starts). Aborts.
#[no_mangle]
pub extern "C" fn _Unwind_SetIP(_context: *mut c_void, _ip: usize) {
    std::process::abort()
}
