//! Golden-file tests of the pure boot-file edits, one per boot-file kind, on real samples
//! (tests/fixtures/bootedit/README.md), plus CRLF, duplicate keys, missing keys and sizes.

use super::util::{fixtures, sample};
use npu_agent::action::bootedit::{
    diff_with_header, edit_cmdline_cma, edit_pi_config_cma, parse_cma_size, remove_cmdline_cma,
    validate_cma_size, FileEdit, SizeError,
};
use npu_agent::parse::bootfile::{find_boot_cma, pi_config_cma, BootFileKind};

enum Op {
    Set(&'static str),
    Remove,
    Overlay(&'static str),
}

fn run(kind: BootFileKind, text: &str, op: &Op) -> FileEdit {
    let r = match op {
        Op::Set(s) => edit_cmdline_cma(kind, text, &parse_cma_size(s).unwrap()),
        Op::Remove => remove_cmdline_cma(kind, text),
        Op::Overlay(s) => edit_pi_config_cma(text, &parse_cma_size(s).unwrap()),
    };
    r.unwrap_or_else(|e| panic!("{e}"))
}

/// Compares with `expected/<case>.txt` and `.diff` (written when UPDATE_GOLDEN is set).
fn golden(case: &str, board_path: &str, edit: &FileEdit) {
    let dir = fixtures("bootedit/expected");
    let diff = diff_with_header(board_path, edit);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{case}.txt")), &edit.new_text).unwrap();
        std::fs::write(dir.join(format!("{case}.diff")), &diff).unwrap();
    }
    let want = std::fs::read_to_string(dir.join(format!("{case}.txt")))
        .unwrap_or_else(|e| panic!("{case}.txt: {e}"));
    let want_diff = std::fs::read_to_string(dir.join(format!("{case}.diff")))
        .unwrap_or_else(|e| panic!("{case}.diff: {e}"));
    assert_eq!(
        edit.new_text, want,
        "{case}: new text differs from the golden file"
    );
    assert_eq!(diff, want_diff, "{case}: diff differs from the golden file");
}

/// Lines that differ between input and output (by index, over the common length) plus the
/// number of added lines.
fn changed_lines(a: &str, b: &str) -> (Vec<usize>, isize) {
    let la: Vec<&str> = a.split_inclusive('\n').collect();
    let lb: Vec<&str> = b.split_inclusive('\n').collect();
    let changed = la
        .iter()
        .zip(&lb)
        .enumerate()
        .filter(|(_, (x, y))| x != y)
        .map(|(i, _)| i + 1)
        .collect();
    (changed, lb.len() as isize - la.len() as isize)
}

#[test]
fn armbian_template_replaces_the_one_token() {
    let input = sample("armbianEnv-default-template-rk35xx.txt");
    let e = run(BootFileKind::ArmbianEnv, &input, &Op::Set("512M"));
    assert!(e.changed);
    assert_eq!(changed_lines(&input, &e.new_text), (vec![4], 0));
    assert_eq!(e.summary, "line 4: cma=256M -> cma=512M");
    assert!(e.warnings.is_empty(), "{:?}", e.warnings);
    golden(
        "armbianEnv-default-template-rk35xx.512M",
        "/boot/armbianEnv.txt",
        &e,
    );
}

#[test]
fn armbian_vendor_keeps_the_other_arguments() {
    let input = sample("armbianEnv-orangepi5plus-vendor-cma256.txt");
    let e = run(BootFileKind::ArmbianEnv, &input, &Op::Set("128M"));
    assert_eq!(changed_lines(&input, &e.new_text), (vec![4], 0));
    assert!(e
        .new_text
        .contains("extraargs=cma=128M video=HDMI-A-1:1920x1080@50 usbcore.quirks=2ca3:0023:i\n"));
    golden(
        "armbianEnv-orangepi5plus-vendor-cma256.128M",
        "/boot/armbianEnv.txt",
        &e,
    );
}

#[test]
fn armbian_without_extraargs_gets_one_line_added() {
    let input = sample("armbianEnv-rock5-itx-armbian-24.11.txt");
    assert_eq!(find_boot_cma(BootFileKind::ArmbianEnv, &input).cma, None);
    let e = run(BootFileKind::ArmbianEnv, &input, &Op::Set("256M"));
    assert_eq!(changed_lines(&input, &e.new_text), (vec![], 1));
    assert!(
        e.new_text
            .ends_with("rootfstype=ext4\nextraargs=cma=256M\n"),
        "{}",
        e.new_text
    );
    assert!(
        e.warnings.iter().any(|w| w.contains("no extraargs=")),
        "{:?}",
        e.warnings
    );
    golden(
        "armbianEnv-rock5-itx-armbian-24.11.256M",
        "/boot/armbianEnv.txt",
        &e,
    );
}

#[test]
fn orangepi_env_replaces_128m() {
    let input = sample("orangepiEnv-orangepi5ultra.txt");
    let e = run(BootFileKind::OrangepiEnv, &input, &Op::Set("256M"));
    assert_eq!(changed_lines(&input, &e.new_text), (vec![3], 0));
    assert_eq!(
        find_boot_cma(BootFileKind::OrangepiEnv, &e.new_text)
            .cma
            .unwrap()
            .size_bytes,
        Some(256 << 20)
    );
    golden(
        "orangepiEnv-orangepi5ultra.256M",
        "/boot/orangepiEnv.txt",
        &e,
    );
}

#[test]
fn kernel_cmdline_keeps_double_spaces() {
    // The real /proc/cmdline has two spaces after `cma=128M`; they must survive.
    let input = sample("proc-cmdline-orangepi5ultra.txt");
    assert!(input.contains("cma=128M  cgroup_enable"));
    let e = run(BootFileKind::KernelCmdline, &input, &Op::Set("256M"));
    assert_eq!(
        e.new_text,
        input.replace("cma=128M  cgroup", "cma=256M  cgroup")
    );
    golden(
        "proc-cmdline-orangepi5ultra.256M",
        "/etc/kernel/cmdline",
        &e,
    );
}

#[test]
fn pi_cmdline_appends_at_the_end_of_the_one_line() {
    let input = sample("pi5-stock-cmdline-txt-template-pi-gen.txt");
    let e = run(BootFileKind::PiCmdline, &input, &Op::Set("256M"));
    assert_eq!(e.new_text, "console=serial0,115200 console=tty1 root=ROOTDEV rootfstype=ext4 fsck.repair=yes rootwait resize cma=256M\n");
    golden(
        "pi5-stock-cmdline-txt-template-pi-gen.256M",
        "/boot/firmware/cmdline.txt",
        &e,
    );
    // Removing from a file without cma= changes nothing; removing the one just added restores it.
    assert!(!run(BootFileKind::PiCmdline, &input, &Op::Remove).changed);
    assert_eq!(
        run(BootFileKind::PiCmdline, &e.new_text, &Op::Remove).new_text,
        input
    );
}

#[test]
fn pi_config_appends_the_overlay_under_the_final_all() {
    let input = sample("pi5-stock-config-txt-template-pi-gen.txt");
    assert_eq!(pi_config_cma(&input), None);
    let e = run(BootFileKind::PiConfig, &input, &Op::Overlay("256M"));
    assert_eq!(changed_lines(&input, &e.new_text), (vec![], 1));
    assert!(
        e.new_text
            .ends_with("[pi5]\ndtoverlay=nospi10\n\n[all]\ndtoverlay=cma,cma-256\n"),
        "{}",
        e.new_text
    );
    let (c, line) = pi_config_cma(&e.new_text).unwrap();
    assert_eq!(
        (c.size_bytes, line),
        (Some(256 << 20), e.new_text.lines().count())
    );
    golden(
        "pi5-stock-config-txt-template-pi-gen.256M",
        "/boot/firmware/config.txt",
        &e,
    );
    // Again with another size: the same line is edited, no second overlay line.
    let again = run(BootFileKind::PiConfig, &e.new_text, &Op::Overlay("512M"));
    assert_eq!(again.new_text, e.new_text.replace("cma-256", "cma-512"));
}

#[test]
fn extlinux_generated_default_label_gets_cma() {
    let input = sample("extlinux-generated-u-boot-menu.conf");
    assert!(find_boot_cma(BootFileKind::Extlinux, &input).generated);
    let e = run(BootFileKind::Extlinux, &input, &Op::Set("256M"));
    // Only the `l0` label's append line (line 19) changes; the rescue label stays.
    assert_eq!(changed_lines(&input, &e.new_text), (vec![19], 0));
    assert!(e
        .new_text
        .contains("cgroup_enable=memory cma=256M\n\nlabel l0r"));
    golden(
        "extlinux-generated-u-boot-menu.256M",
        "/boot/extlinux/extlinux.conf",
        &e,
    );
}

#[test]
fn extlinux_handwritten_edits_the_default_label_and_warns_about_the_other() {
    let input = sample("extlinux-handwritten-two-labels.conf");
    let e = run(BootFileKind::Extlinux, &input, &Op::Set("256M"));
    assert_eq!(changed_lines(&input, &e.new_text), (vec![8], 0));
    assert!(e
        .new_text
        .contains("coherent_pool=2M cma=256M cgroup_enable"));
    assert!(
        e.new_text.contains("rw cma=64M\n"),
        "the other label is left alone"
    );
    assert!(
        e.warnings.iter().any(|w| w.contains("Debian-old")),
        "{:?}",
        e.warnings
    );
    golden(
        "extlinux-handwritten-two-labels.256M",
        "/boot/extlinux/extlinux.conf",
        &e,
    );
}

fn crlf(s: &str) -> String {
    s.replace('\n', "\r\n")
}

#[test]
fn crlf_files_keep_crlf_on_every_line() {
    for (name, kind, op) in [
        (
            "armbianEnv-default-template-rk35xx.txt",
            BootFileKind::ArmbianEnv,
            Op::Set("512M"),
        ),
        (
            "armbianEnv-rock5-itx-armbian-24.11.txt",
            BootFileKind::ArmbianEnv,
            Op::Set("256M"),
        ),
        (
            "orangepiEnv-orangepi5ultra.txt",
            BootFileKind::OrangepiEnv,
            Op::Set("64M"),
        ),
        (
            "pi5-stock-cmdline-txt-template-pi-gen.txt",
            BootFileKind::PiCmdline,
            Op::Set("256M"),
        ),
        (
            "pi5-stock-config-txt-template-pi-gen.txt",
            BootFileKind::PiConfig,
            Op::Overlay("256M"),
        ),
        (
            "extlinux-handwritten-two-labels.conf",
            BootFileKind::Extlinux,
            Op::Set("256M"),
        ),
    ] {
        let lf = sample(name);
        let e_lf = run(kind, &lf, &op);
        let e_crlf = run(kind, &crlf(&lf), &op);
        assert_eq!(e_crlf.new_text, crlf(&e_lf.new_text), "{name}");
        assert!(
            !e_crlf.new_text.replace("\r\n", "").contains('\n'),
            "{name}: a bare LF slipped in"
        );
        assert!(
            e_crlf.warnings.iter().any(|w| w.contains("CRLF")),
            "{name}: {:?}",
            e_crlf.warnings
        );
    }
    // The env-file warning says why CRLF is bad there.
    let e = run(
        BootFileKind::ArmbianEnv,
        &crlf(&sample("armbianEnv-default-template-rk35xx.txt")),
        &Op::Set("512M"),
    );
    assert!(
        e.warnings
            .iter()
            .any(|w| w.contains("keeps the CR inside values")),
        "{:?}",
        e.warnings
    );
}

#[test]
fn duplicate_extraargs_edits_the_last_and_warns() {
    let input = format!(
        "{}extraargs=cma=64M net.ifnames=0\n",
        sample("armbianEnv-orangepi5plus-vendor-cma256.txt")
    );
    let e = run(BootFileKind::ArmbianEnv, &input, &Op::Set("512M"));
    assert_eq!(changed_lines(&input, &e.new_text), (vec![10], 0));
    assert!(
        e.new_text.contains("extraargs=cma=256M video="),
        "the dead definition is kept"
    );
    assert!(e.new_text.ends_with("extraargs=cma=512M net.ifnames=0\n"));
    assert!(
        e.warnings
            .iter()
            .any(|w| w.contains("defined 2 times") && w.contains("line 10")),
        "{:?}",
        e.warnings
    );
    assert_eq!(
        find_boot_cma(BootFileKind::ArmbianEnv, &e.new_text)
            .cma
            .unwrap()
            .size_bytes,
        Some(512 << 20)
    );
}

#[test]
fn duplicate_cma_tokens_edit_the_last_and_warn() {
    let input = "console=tty1 cma=64M root=/dev/mmcblk0p2 cma=128M rootwait\n";
    let e = run(BootFileKind::PiCmdline, input, &Op::Set("256M"));
    assert_eq!(
        e.new_text,
        "console=tty1 cma=64M root=/dev/mmcblk0p2 cma=256M rootwait\n"
    );
    assert!(
        e.warnings.iter().any(|w| w.contains("appears 2 times")),
        "{:?}",
        e.warnings
    );
    let r = run(BootFileKind::PiCmdline, input, &Op::Remove);
    assert_eq!(r.new_text, "console=tty1 root=/dev/mmcblk0p2 rootwait\n");
}

#[test]
fn setting_the_value_already_there_is_a_no_op() {
    for (name, kind, op) in [
        (
            "armbianEnv-default-template-rk35xx.txt",
            BootFileKind::ArmbianEnv,
            Op::Set("256M"),
        ),
        (
            "armbianEnv-default-template-rk35xx.txt",
            BootFileKind::ArmbianEnv,
            Op::Set("262144K"),
        ),
        (
            "orangepiEnv-orangepi5ultra.txt",
            BootFileKind::OrangepiEnv,
            Op::Set("128M"),
        ),
        (
            "extlinux-handwritten-two-labels.conf",
            BootFileKind::Extlinux,
            Op::Set("128M"),
        ),
    ] {
        let input = sample(name);
        let e = run(kind, &input, &op);
        assert!(!e.changed, "{name}");
        assert_eq!(e.new_text, input);
        assert!(e.diff.is_empty());
    }
}

#[test]
fn sizes_are_validated() {
    let ram = 4u64 << 30;
    assert_eq!(
        validate_cma_size(&parse_cma_size("1G").unwrap(), Some(64 << 20), Ok(ram)),
        Ok(1 << 30)
    );
    // Oversized: 25 % of 4 GiB is 1 GiB.
    let e = validate_cma_size(&parse_cma_size("1025M").unwrap(), None, Ok(ram)).unwrap_err();
    assert_eq!(
        e,
        SizeError::AboveSafeFraction {
            size_bytes: 1025 << 20,
            mem_total_bytes: ram,
            limit_bytes: 1 << 30
        }
    );
    assert!(
        e.to_string().contains("more than 25% of RAM (4 GiB)"),
        "{e}"
    );
    assert!(validate_cma_size(&parse_cma_size("16G").unwrap(), None, Ok(ram)).is_err());
    assert!(matches!(
        parse_cma_size("99999999999999999999G"),
        Err(SizeError::Syntax(_))
    ));
    assert!(matches!(
        parse_cma_size("256 MB"),
        Err(SizeError::Syntax(_))
    ));
    assert!(matches!(parse_cma_size("-1M"), Err(SizeError::Syntax(_))));
    assert_eq!(parse_cma_size(" 256m ").unwrap().token, "256M");
    let below =
        validate_cma_size(&parse_cma_size("32M").unwrap(), Some(64 << 20), Ok(ram)).unwrap_err();
    assert!(
        below
            .to_string()
            .contains("below the profile's minimum pool of 64 MiB"),
        "{below}"
    );
}
