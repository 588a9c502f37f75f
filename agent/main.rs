//! The `npu-agent` binary: parses the command line and runs it (see `npu_agent::cli`).

fn main() {
    // args_os: a non-UTF-8 argument is a usage error from the parser, not a panic here.
    let code = npu_agent::cli::run(
        std::env::args_os(),
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    std::process::exit(code);
}
