//! The one way the agent runs a child process: [`run_with_timeout`]. Standard input is closed,
//! standard output is read line by line while the child runs (so a chatty child never blocks on
//! a full pipe), the first [`STDERR_KEEP_BYTES`] of standard error are kept for the error
//! message, and a child still running at the deadline is killed and reaped. The child leads a
//! process group of its own, so whatever it started is killed with it and no grandchild keeps
//! its pipes (and this call) open.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Bytes of standard error kept for messages.
pub const STDERR_KEEP_BYTES: u64 = 4096;
/// How often the child's state is polled while it runs.
const POLL: Duration = Duration::from_millis(10);

/// How a child that ran to its end finished.
#[derive(Debug)]
pub struct Finished {
    /// Its exit status.
    pub status: ExitStatus,
    /// The start of its standard error (at most [`STDERR_KEEP_BYTES`], lossily decoded).
    pub stderr: String,
}

/// Why a child did not run to its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// The program does not exist (`ENOENT` from exec).
    NotFound(String),
    /// It could not be started, or waiting for it failed: the program and the OS error.
    Failed(String),
    /// It was still running after the timeout and was killed (`timeout_s` as given).
    TimedOut {
        /// The program.
        program: String,
        /// The limit it ran into, in seconds.
        timeout_s: u64,
    },
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::NotFound(p) => write!(f, "{p} is not installed"),
            RunError::Failed(why) => f.write_str(why),
            RunError::TimedOut { program, timeout_s } => {
                write!(f, "{program} gave no answer within {timeout_s} s")
            }
        }
    }
}

/// Runs `cmd` for at most `timeout`, handing each line of its standard output (without the
/// newline, lossily decoded) to `on_line` as it arrives.
///
/// Errors: [`RunError::NotFound`] when the program is missing, [`RunError::Failed`] when it
/// cannot be started or waited for, [`RunError::TimedOut`] when it was killed at the deadline
/// (the lines read until then have been handed over).
pub fn run_with_timeout(
    cmd: &mut Command,
    timeout: Duration,
    mut on_line: impl FnMut(&str) + Send,
) -> Result<Finished, RunError> {
    run_lines(cmd, timeout, &mut on_line)
}

/// [`run_with_timeout`] compiled once, whatever the callback.
fn run_lines(
    cmd: &mut Command,
    timeout: Duration,
    on_line: &mut (dyn FnMut(&str) + Send),
) -> Result<Finished, RunError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => RunError::NotFound(program.clone()),
            _ => RunError::Failed(format!("cannot run {program}: {e}")),
        })?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    std::thread::scope(|scope| {
        if let Some(out) = stdout {
            scope.spawn(move || read_lines(out, on_line));
        }
        let err_reader = scope.spawn(move || stderr.map(keep_start).unwrap_or_default());
        // A timeout past the clock's range waits without a deadline rather than panicking.
        let deadline = Instant::now().checked_add(timeout);
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Ok(s),
                Ok(None) if deadline.is_none_or(|d| Instant::now() < d) => std::thread::sleep(POLL),
                Ok(None) => {
                    kill_group(&mut child);
                    break Err(RunError::TimedOut {
                        program: program.clone(),
                        timeout_s: timeout.as_secs(),
                    });
                }
                Err(e) => {
                    kill_group(&mut child);
                    break Err(RunError::Failed(format!("{program}: wait failed: {e}")));
                }
            }
        }?;
        let stderr = err_reader.join().unwrap_or_default();
        Ok(Finished { status, stderr })
    })
}

/// Runs `cmd` like [`run_with_timeout`] and returns its standard output, at most
/// `max_stdout_bytes` of it (the rest is read and dropped), with how it finished.
pub fn run_capture(
    cmd: &mut Command,
    timeout: Duration,
    max_stdout_bytes: usize,
) -> Result<(Finished, String), RunError> {
    let mut out = String::new();
    let finished = run_with_timeout(cmd, timeout, |line| {
        if out.len() + line.len() < max_stdout_bytes {
            out.push_str(line);
            out.push('\n');
        }
    })?;
    Ok((finished, out))
}

/// Kills the process group the child leads (only the group started here: its id is the
/// child's own pid) and reaps the child; the group's pipes close, which ends the reader threads.
fn kill_group(child: &mut Child) {
    if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Hands every line of `r` to `on_line` until end of file or a read error.
fn read_lines(r: impl Read, on_line: &mut dyn FnMut(&str)) {
    let mut reader = BufReader::new(r);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
                on_line(&String::from_utf8_lossy(line));
            }
        }
    }
}

/// The first [`STDERR_KEEP_BYTES`] of `r`, then reads the rest to its end so the child never
/// blocks on a full pipe.
fn keep_start(r: impl Read) -> String {
    let mut r = r;
    let mut kept = Vec::new();
    let _ = r.by_ref().take(STDERR_KEEP_BYTES).read_to_end(&mut kept);
    let _ = std::io::copy(&mut r, &mut std::io::sink());
    String::from_utf8_lossy(&kept).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn a_timeout_past_the_clock_range_does_not_panic() {
        let done = run_with_timeout(&mut sh("echo ok"), Duration::MAX, |_| {}).unwrap();
        assert!(done.status.success());
    }

    #[test]
    fn lines_status_and_stderr_are_returned() {
        let (f, out) = run_capture(
            &mut sh("printf 'a\\nb\\n'; echo oops >&2; exit 3"),
            Duration::from_secs(10),
            1024,
        )
        .unwrap();
        assert_eq!(out, "a\nb\n");
        assert_eq!(f.status.code(), Some(3));
        assert_eq!(f.stderr.trim(), "oops");
    }

    #[test]
    fn output_beyond_a_pipe_buffer_does_not_block_and_is_cut() {
        // 1 MiB of output: more than a pipe holds, so a reader that waits for the exit first
        // would time out.
        let (f, out) = run_capture(
            &mut sh("head -c 1048576 /dev/zero | tr '\\0' 'x' | fold -w 100"),
            Duration::from_secs(20),
            1000,
        )
        .unwrap();
        assert!(f.status.success());
        assert!(out.len() < 1000 && out.starts_with("xxxx"), "{}", out.len());
    }

    #[test]
    fn a_child_past_its_deadline_is_killed() {
        let t0 = Instant::now();
        let err = run_capture(
            &mut sh("echo started; sleep 30"),
            Duration::from_millis(300),
            64,
        )
        .unwrap_err();
        assert!(matches!(err, RunError::TimedOut { .. }), "{err:?}");
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    }

    #[test]
    fn a_missing_program_is_named() {
        let err = run_with_timeout(
            &mut Command::new("/nonexistent/npu-agent-test-program"),
            Duration::from_secs(1),
            |_| {},
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "/nonexistent/npu-agent-test-program is not installed"
        );
    }

    #[test]
    fn non_utf8_output_is_decoded_lossily() {
        let (_, out) =
            run_capture(&mut sh("printf 'a\\377b\\n'"), Duration::from_secs(10), 64).unwrap();
        assert_eq!(out, "a\u{fffd}b\n");
    }
}
