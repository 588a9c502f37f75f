//! Shared by tests/system/aarch64.rs and tests/system/vboard.rs: the project's rule for tests that need a tool
//! (fail when CI is set, skip with a printed reason otherwise), where the target directory is, and
//! the static aarch64 agent (located or built, and checked to be a static aarch64 ELF).
#![allow(dead_code)]

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const AARCH64_TARGET: &str = "aarch64-unknown-linux-musl";

/// True when the tests run under CI (`CI` set and non-empty): a missing tool is then a failure.
pub fn in_ci() -> bool {
    env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// A needed thing is unavailable: panics under CI, else prints why the test is skipped.
/// Use as `let Some(x) = ... else { return skip("...") };`.
pub fn skip(reason: &str) {
    if in_ci() {
        panic!("CI is set and {reason} (.ci/run installs what these tests need)");
    }
    // Straight to stderr, past the test harness's output capture, so the skip is seen.
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED (CI unset): {reason}");
}

/// Prints a line that shows in `cargo test`'s output without `--nocapture` (straight to stderr,
/// past libtest's capture of `eprintln!`): scenario times, `bench:` figures.
pub fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

pub fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The cargo target directory this test was built into (honours CARGO_TARGET_DIR and
/// --target-dir): the host binary lives at `<target>/<profile>/npu-agent`.
pub fn target_dir() -> PathBuf {
    let host = Path::new(env!("CARGO_BIN_EXE_npu-agent"));
    host.parent()
        .and_then(Path::parent)
        .expect("host binary is <target>/<profile>/npu-agent")
        .to_path_buf()
}

pub fn host_agent() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_npu-agent"))
}

/// Finds an executable on PATH (and in the sbin directories, where e2fsprogs lives).
pub fn which(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH").unwrap_or_default();
    env::split_paths(&path)
        .chain(
            ["/usr/local/sbin", "/usr/sbin", "/sbin"]
                .iter()
                .map(PathBuf::from),
        )
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Every tool in `names`, or None after `skip` (which panics under CI) naming the missing ones.
pub fn tools<const N: usize>(names: [&str; N], why: &str) -> Option<[PathBuf; N]> {
    let found: Vec<Option<PathBuf>> = names.iter().map(|n| which(n)).collect();
    let missing: Vec<&str> = names
        .iter()
        .zip(&found)
        .filter(|(_, f)| f.is_none())
        .map(|(n, _)| *n)
        .collect();
    if !missing.is_empty() {
        skip(&format!("{} not found on PATH ({why})", missing.join(", ")));
        return None;
    }
    Some(
        found
            .into_iter()
            .map(|f| f.expect("checked"))
            .collect::<Vec<_>>()
            .try_into()
            .expect("N entries"),
    )
}

/// The static aarch64 agent.
///
/// `NPUAGENT_TEST_AARCH64_BIN` names a prebuilt file (used as is). Otherwise the binary is
/// `<target>/aarch64-unknown-linux-musl/release/npu-agent` in this test's own target directory, and
/// this runs `cargo build --release --locked --no-default-features --target aarch64-unknown-linux-musl` there first: a
/// no-op of about a second when it is up to date (`.ci/run` builds it before `cargo test`, through
/// tests/vboard/build-aarch64.sh), a full build (~1 min on 2 cores) after a source change, so the
/// binary under test is never older than the sources. Cargo's locks are per profile directory, so
/// this nested release build does not wait on the outer `cargo test`.
/// None (after `skip`, which panics under CI) when the target or its linker setup is missing.
pub fn aarch64_agent() -> Option<PathBuf> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = BIN.get_or_init(|| {
        if let Some(p) = env::var_os("NPUAGENT_TEST_AARCH64_BIN") {
            let p = PathBuf::from(p);
            return if p.is_file() {
                Ok(p)
            } else {
                Err(format!(
                    "NPUAGENT_TEST_AARCH64_BIN={} does not exist",
                    p.display()
                ))
            };
        }
        build_aarch64(&[], "release/npu-agent")
    });
    match r {
        Ok(p) => Some(p.clone()),
        Err(e) => {
            skip(&format!("no static aarch64 agent: {e}"));
            None
        }
    }
}

/// examples/panic_probe.rs built like the static aarch64 agent (release profile, the target's link
/// flags): `NPUAGENT_TEST_AARCH64_PANIC_PROBE` names a prebuilt file (used as is; `.ci/run` sets it
/// and [`aarch64_agent`]'s variable to the builds it made or took from its build cache), else
/// `cargo build --release --locked --target aarch64-unknown-linux-musl --example panic_probe` in
/// this test's own target directory, as [`aarch64_agent`] builds.
/// None (after `skip`, which panics under CI) when the target or its linker setup is missing.
pub fn aarch64_panic_probe() -> Option<PathBuf> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BIN.get_or_init(|| {
        if let Some(p) = env::var_os("NPUAGENT_TEST_AARCH64_PANIC_PROBE") {
            let p = PathBuf::from(p);
            return if p.is_file() {
                Ok(p)
            } else {
                Err(format!(
                    "NPUAGENT_TEST_AARCH64_PANIC_PROBE={} does not exist",
                    p.display()
                ))
            };
        }
        build_aarch64(
            &["--example", "panic_probe"],
            "release/examples/panic_probe",
        )
    }) {
        Ok(p) => Some(p.clone()),
        Err(e) => {
            skip(&format!("no static aarch64 panic probe: {e}"));
            None
        }
    }
}

/// Runs `cargo build --release --locked --no-default-features --target aarch64-unknown-linux-musl EXTRA...` in this
/// test's own target directory and returns `<target>/aarch64-unknown-linux-musl/ARTIFACT`, or why
/// not (the build's last lines of output; 15 minutes at most).
fn build_aarch64(extra: &[&str], artifact: &str) -> Result<PathBuf, String> {
    let target = target_dir();
    let bin = target.join(AARCH64_TARGET).join(artifact);
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let t0 = Instant::now();
    let mut cmd = Command::new(cargo);
    // Drop what cargo sets for a running test (CARGO_MANIFEST_DIR, CARGO_PKG_*, ...): build
    // scripts track some of them (ring reruns on CARGO_MANIFEST_DIR), and a difference from a
    // plain shell's environment would rebuild everything after tests/vboard/build-aarch64.sh.
    for (k, _) in env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("CARGO_PKG_")
            || k.starts_with("CARGO_BIN_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_CRATE_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "CARGO_RUSTC_CURRENT_DIR",
                "OUT_DIR",
            ]
            .contains(&k.as_ref())
        {
            cmd.env_remove(k.as_ref());
        }
    }
    let mut child = cmd
        .args(["build", "--release", "--locked", "--no-default-features"])
        .args(["--target", AARCH64_TARGET])
        .args(extra)
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(manifest_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    // Bounded: a cargo waiting on a lock forever must not hang the suite.
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut err);
            }
            if !st.success() {
                let tail: Vec<&str> = err
                    .lines()
                    .rev()
                    .take(15)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                return Err(format!(
                    "the aarch64 build failed (rustup target add {AARCH64_TARGET}; apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross):\n{}",
                    tail.join("\n")
                ));
            }
            eprintln!(
                "aarch64 {artifact} up to date in {:.1} s: {}",
                t0.elapsed().as_secs_f64(),
                bin.display()
            );
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err("the aarch64 build did not finish in 15 minutes".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!("{} missing after the build", bin.display()))
    }
}

/// What makes an ELF file a static aarch64 executable, read with the `object` crate.
#[derive(Debug)]
pub struct ElfFacts {
    pub aarch64: bool,
    pub interpreter: Option<String>,
    pub needed: usize,
    pub size: u64,
    /// A `.symtab` is present (the file is not stripped).
    pub symbols: bool,
}

/// Whether two ELF files load the same bytes: every allocated section that has contents
/// (`.text`, `.rodata`, `.data`, ...) is equal by name and data. Stripping (which drops
/// `.symtab`, `.comment` and the like, as `cargo deb --strip` does) leaves the answer unchanged.
pub fn same_loaded_bytes(a: &Path, b: &Path) -> bool {
    use object::{Object as _, ObjectSection as _, SectionFlags, SectionKind};
    fn loaded(path: &Path) -> Vec<(String, Vec<u8>)> {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let file = object::File::parse(&*data)
            .unwrap_or_else(|e| panic!("{} is not an ELF: {e}", path.display()));
        let mut sections: Vec<(String, Vec<u8>)> = file
            .sections()
            .filter(|s| {
                let alloc = matches!(s.flags(), SectionFlags::Elf { sh_flags } if sh_flags & u64::from(object::elf::SHF_ALLOC) != 0);
                alloc && s.kind() != SectionKind::UninitializedData && s.kind() != SectionKind::UninitializedTls
            })
            .map(|s| {
                let name = s.name().unwrap_or("?").to_string();
                let bytes = s.data().unwrap_or_else(|e| panic!("{} section {name}: {e}", path.display())).to_vec();
                (name, bytes)
            })
            .collect();
        sections.sort();
        sections
    }
    loaded(a) == loaded(b)
}

pub fn elf_facts(path: &Path) -> ElfFacts {
    use object::elf;
    use object::read::elf::{Dyn, ElfFile64, FileHeader, ProgramHeader};
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let file = ElfFile64::<object::Endianness>::parse(&*data)
        .unwrap_or_else(|e| panic!("{} is not a 64-bit ELF: {e}", path.display()));
    let endian = file.endian();
    let hdr = file.elf_header();
    let mut interpreter = None;
    let mut needed = 0;
    for ph in file.elf_program_headers() {
        if let Some(i) = ph.interpreter(endian, &*data).expect("PT_INTERP readable") {
            interpreter = Some(String::from_utf8_lossy(i).into_owned());
        }
        if let Some(dyns) = ph.dynamic(endian, &*data).expect("PT_DYNAMIC readable") {
            needed += dyns
                .iter()
                .filter(|d| d.d_tag(endian) == u64::from(elf::DT_NEEDED))
                .count();
        }
    }
    ElfFacts {
        aarch64: hdr.e_machine(endian) == elf::EM_AARCH64,
        interpreter,
        needed,
        size: data.len() as u64,
        symbols: object::Object::symbol_table(&file).is_some(),
    }
}
