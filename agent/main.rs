//! The `npu-agent` binary: parses the command line and runs it (see `npu_agent::cli`).

fn main() {
    let code = npu_agent::cli::run(
        std::env::args(),
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    std::process::exit(code);
}
