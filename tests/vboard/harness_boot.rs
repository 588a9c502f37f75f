//! One boot of a virtual board: its console, marks, sections, memory figures and how it ended.

use super::*;

// ---------------------------------------------------------------------------------------------
// One boot: the running qemu and its serial console.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootEnd {
    /// The guest rebooted ("reboot: Restarting system"): call `Board::boot` again.
    Reboot,
    /// The guest powered off ("reboot: Power down"), as /init does after the test's commands.
    PowerOff,
}

/// The complete `vb_mem COMM` lines of a console, in order. A line another writer cut short on
/// the shared serial console (the agent's own output runs beside the sampler) is left out.
pub fn parse_mem(console: &str, comm: &str) -> Vec<Mem> {
    let prefix = format!("VBOARD-MEM comm={comm} ");
    console
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            let field = |k: &str| {
                rest.split_whitespace()
                    .find_map(|w| w.strip_prefix(&format!("{k}=")))
                    .and_then(|v| v.parse::<u64>().ok())
            };
            Some(Mem {
                pid: u32::try_from(field("pid")?).ok()?,
                rss_kb: field("rss_kb")?,
                hwm_kb: field("hwm_kb")?,
                anon_huge_kb: field("anon_huge_kb")?,
                threads: field("threads")?,
                cpu_ticks: field("cpu_ticks")?,
                ctxsw: field("ctxsw")?,
                rss_anon_kb: field("rss_anon_kb")?,
                rss_file_kb: field("rss_file_kb")?,
            })
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mem {
    pub pid: u32,
    pub rss_kb: u64,
    pub hwm_kb: u64,
    /// Transparent huge pages mapped (AnonHugePages summed over /proc/PID/smaps), kB.
    pub anon_huge_kb: u64,
    /// Live threads.
    pub threads: u64,
    /// utime + stime of the whole process, clock ticks (USER_HZ, 100 a second).
    pub cpu_ticks: u64,
    /// Voluntary context switches of the main thread (its wake-ups after sleeping).
    pub ctxsw: u64,
    /// The anonymous part of VmRSS (heap, stacks, writable data), kB.
    pub rss_anon_kb: u64,
    /// The file-backed part of VmRSS (the binary's code and read-only data), kB.
    pub rss_file_kb: u64,
}

pub struct Boot {
    pub name: String,
    pub number: u32,
    /// The kernel command line the harness-as-bootloader passed.
    pub cmdline: String,
    /// The device tree's CMA pool size passed, if any.
    pub dt_cma: Option<u64>,
    pub(super) child: Option<Child>,
    pub(super) console: PathBuf,
    pub(super) qemu_log: PathBuf,
    pub(super) started: Instant,
    pub(super) ended: Option<(BootEnd, Duration)>,
    pub(super) running: Arc<AtomicBool>,
}

impl Boot {
    /// The serial console so far (CR LF as LF).
    pub fn console(&self) -> String {
        let raw = fs::read(&self.console).unwrap_or_default();
        String::from_utf8_lossy(&raw)
            .replace("\r\n", "\n")
            .replace('\r', "")
    }

    /// The last 40 console lines and qemu's own log, for a failure message.
    pub fn tail(&self) -> String {
        let c = self.console();
        let lines: Vec<&str> = c.lines().collect();
        let from = lines.len().saturating_sub(40);
        format!(
            "--- {} boot {} console (last 40 lines) ---\n{}\n--- qemu ---\n{}",
            self.name,
            self.number,
            lines[from..].join("\n"),
            fs::read_to_string(&self.qemu_log).unwrap_or_default()
        )
    }

    /// True while qemu runs (the guest has neither rebooted nor powered off).
    pub fn alive(&mut self) -> bool {
        !self.exited()
    }

    fn exited(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => c.try_wait().expect("poll qemu").is_some(),
            None => true,
        }
    }

    /// Waits until the console satisfies `pred`; panics with the console's tail on timeout, or if
    /// qemu exits first. Returns the console.
    pub fn wait_until(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let c = self.console();
            if pred(&c) {
                return c;
            }
            if c.contains("VBOARD-FAIL") || c.contains("Kernel panic") {
                panic!(
                    "{} boot {}: guest failed while waiting for {what}\n{}",
                    self.name,
                    self.number,
                    self.tail()
                );
            }
            if self.exited() {
                // One last read: the line may have landed just before the exit.
                let c = self.console();
                if pred(&c) {
                    return c;
                }
                panic!(
                    "{} boot {}: qemu exited before {what}\n{}",
                    self.name,
                    self.number,
                    self.tail()
                );
            }
            if Instant::now() > deadline {
                panic!(
                    "{} boot {}: no {what} after {timeout:?}\n{}",
                    self.name,
                    self.number,
                    self.tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for a console line containing `needle` (a `vb_mark` text, a section's end, ...).
    pub fn wait_for(&mut self, needle: &str, timeout: Duration) -> String {
        self.wait_until(&format!("{needle:?}"), timeout, |c| c.contains(needle))
    }

    /// Waits for qemu to exit and tells why: a guest reboot or a power-off. Panics on a kernel
    /// panic, a /init failure, or the timeout (qemu is killed then).
    pub fn wait_end(&mut self, timeout: Duration) -> BootEnd {
        if let Some((end, _)) = self.ended {
            return end;
        }
        let deadline = Instant::now() + timeout;
        while !self.exited() {
            if Instant::now() > deadline {
                self.kill();
                panic!(
                    "{} boot {}: still running after {timeout:?}\n{}",
                    self.name,
                    self.number,
                    self.tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let took = self.started.elapsed();
        self.release();
        let c = self.console();
        let end = if c.contains("Kernel panic") || c.contains("VBOARD-FAIL") {
            panic!(
                "{} boot {}: the guest failed\n{}",
                self.name,
                self.number,
                self.tail()
            );
        } else if c.contains("reboot: Restarting system") {
            BootEnd::Reboot
        } else if c.contains("reboot: Power down") {
            BootEnd::PowerOff
        } else {
            panic!(
                "{} boot {}: qemu exited without a reboot or power-off\n{}",
                self.name,
                self.number,
                self.tail()
            );
        };
        eprintln!(
            "vboard: {} boot {} ended ({end:?}) after {:.2} s",
            self.name,
            self.number,
            took.as_secs_f64()
        );
        self.ended = Some((end, took));
        end
    }

    /// Wall time from qemu's start to its exit (after `wait_end`).
    pub fn duration(&self) -> Option<Duration> {
        self.ended.map(|e| e.1)
    }

    /// The guest's `/proc/sys/kernel/random/boot_id`, from the line /init prints after mounting.
    pub fn boot_id(&self) -> String {
        self.up_field("boot_id")
    }

    /// CmaTotal in bytes as /init read it from /proc/meminfo.
    pub fn cma_total_bytes(&self) -> u64 {
        self.up_field("cma_total_kb")
            .parse::<u64>()
            .expect("cma_total_kb is a number")
            * 1024
    }

    fn up_field(&self, key: &str) -> String {
        let c = self.console();
        let line = c
            .lines()
            .find(|l| l.starts_with("VBOARD-UP "))
            .unwrap_or_else(|| panic!("no VBOARD-UP line\n{}", self.tail()));
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{key}=")).map(str::to_string))
            .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
    }

    /// The output of `vb_section NAME ...` (the last one of that name) and its exit code.
    pub fn section_rc(&self, name: &str) -> (String, i32) {
        let c = self.console();
        let begin = format!("VBOARD-BEGIN {name}\n");
        let end = format!("VBOARD-END {name} rc=");
        let start = c
            .rfind(&begin)
            .unwrap_or_else(|| panic!("no section {name}\n{}", self.tail()))
            + begin.len();
        let len = c[start..]
            .find(&end)
            .unwrap_or_else(|| panic!("section {name} not ended\n{}", self.tail()));
        let rc = c[start + len + end.len()..]
            .split_whitespace()
            .next()
            .and_then(|r| r.parse().ok())
            .expect("rc");
        (c[start..start + len].trim_end_matches('\n').to_string(), rc)
    }

    pub fn section(&self, name: &str) -> String {
        self.section_rc(name).0
    }

    /// A section parsed as JSON (e.g. `vb_section check npu-agent check --format json`).
    pub fn json(&self, name: &str) -> Value {
        let s = self.section(name);
        serde_json::from_str(s.trim())
            .unwrap_or_else(|e| panic!("section {name} is not JSON ({e}):\n{s}"))
    }

    /// `vb_mem COMM` lines: VmRSS / VmHWM of each process with that name.
    pub fn mem(&self, comm: &str) -> Vec<Mem> {
        parse_mem(&self.console(), comm)
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.release();
    }

    fn release(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
        if self.running.swap(false, Ordering::SeqCst) {
            // Keep the console for a look after the run.
            let logs = log_dir();
            if fs::create_dir_all(&logs).is_ok() {
                let _ = fs::copy(
                    &self.console,
                    logs.join(format!("{}-boot{}.console", self.name, self.number)),
                );
            }
        }
    }
}

impl Drop for Boot {
    fn drop(&mut self) {
        self.kill();
    }
}
