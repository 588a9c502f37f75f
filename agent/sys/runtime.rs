//! The process shape of the long-running modes (`npu-agent run`, its standby wait) and of the
//! operator commands that talk MQTT: one thread runs the tokio runtime; blocking work (a
//! diagnosis, an action, a DNS lookup) goes to at most [`MAX_BLOCKING_THREADS`] helper threads
//! with [`THREAD_STACK_BYTES`] stacks, which exit after [`IDLE_THREAD_KEEP_ALIVE_S`] idle.
//!
//! Why the stack size matters: a transparent huge page (2 MiB on arm64 and x86_64 with 4 KiB
//! pages) can only back a 2 MiB-aligned range that lies wholly inside one mapping. A thread stack
//! of Rust's default 2 MiB plus its guard page sometimes contains such a range, and on a kernel
//! with `transparent_hugepage=always` the first touch there faults in a whole 2 MiB page, adding
//! about 2 MiB to VmRSS. A stack mapping well under 2 MiB can never contain one. On top of that,
//! [`no_huge_pages`] turns transparent huge pages off for the whole process, so no mapping of
//! the agent (heap included) can grow into one whatever the kernel's setting.

/// Stack of each helper thread, bytes. The blocking jobs (a diagnosis: file reads, parsing,
/// JSON; an action: a few file writes or a child process) use a small fraction of it.
pub const THREAD_STACK_BYTES: usize = 512 * 1024;

/// Most helper threads alive at once. The daemon runs one job at a time; the others are for
/// DNS lookups of the broker's host name.
pub const MAX_BLOCKING_THREADS: usize = 4;

/// How long an idle helper thread waits for the next job before it exits, seconds (tokio's
/// default is 10). A helper that has run a diagnosis keeps about 70-110 KiB of its stack
/// resident until it exits; on the virtual ROCK 5B one or two lingering helpers were the
/// difference between a VmRSS under and over 3 MiB. Diagnoses run every `report.interval_s`
/// (60 s by default), so starting a thread for each one costs nothing measurable.
pub const IDLE_THREAD_KEEP_ALIVE_S: u64 = 1;

/// A current-thread tokio runtime with the shape above (timers and I/O enabled).
///
/// Errors: the runtime's own (creating its epoll instance or eventfd).
pub fn current_thread() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_stack_size(THREAD_STACK_BYTES)
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .thread_keep_alive(std::time::Duration::from_secs(IDLE_THREAD_KEEP_ALIVE_S))
        .build()
}

/// Keeps a write past `RLIMIT_FSIZE` (`ulimit -f`) from killing the process: `SIGXFSZ`'s
/// default action terminates it, so the agent died on the first state write over the limit.
/// With a handler installed (tokio's, which stays for the life of the process) the write fails
/// with `EFBIG` instead and is reported like any other write error.
///
/// Errors: the runtime's or the signal registration's own.
pub fn survive_file_size_limit() -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    rt.block_on(async {
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::from_raw(libc::SIGXFSZ))
            .map(drop)
    })
}

/// Sets `PR_SET_THP_DISABLE` (Linux 3.15+) so that the kernel never backs this process's memory
/// with transparent huge pages, whatever `/sys/kernel/mm/transparent_hugepage/enabled` says.
/// The flag is inherited by child processes (a reboot command, `nvidia-smi`), which do not need
/// huge pages either. Returns the kernel's error when it refuses (then nothing changed).
pub fn no_huge_pages() -> std::io::Result<()> {
    rustix::thread::disable_transparent_huge_pages(true).map_err(std::io::Error::from)
}
