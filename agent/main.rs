//! The `npu-agent` binary: parses the command line and runs it (see `npu_agent::cli`).

fn main() {
    // args_os: a non-UTF-8 argument is a usage error from the parser, not a panic here.
    // The handles are not locked for the whole run: `npu-agent run` logs from its helper threads
    // (a diagnosis, an action) through agent/logging.rs, which locks stderr for each line; a lock
    // held here by the main thread would block them, and the daemon with them, for ever.
    let code = npu_agent::cli::run(
        std::env::args_os(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    );
    std::process::exit(code);
}
