//! Property tests of the pure edits on arbitrary text: no panic, the result reads back as the
//! size asked for, a second run changes nothing, and every line but the edited or added ones
//! is kept byte for byte.

use npu_agent::action::bootedit::{
    edit_cmdline_cma, edit_pi_config_cma, parse_cma_size, remove_cmdline_cma,
};
use npu_agent::parse::bootfile::{find_boot_cma, pi_config_cma, BootFileKind};
use proptest::prelude::*;

const KINDS: [BootFileKind; 5] = [
    BootFileKind::ArmbianEnv,
    BootFileKind::OrangepiEnv,
    BootFileKind::PiCmdline,
    BootFileKind::Extlinux,
    BootFileKind::KernelCmdline,
];

/// Boot-file-like text: keys, `cma=` tokens, quotes, sections, CR, LF, tabs, non-ASCII.
fn boot_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("extraargs=".to_string()),
        Just("extraboardargs=".to_string()),
        Just("cma=".to_string()),
        Just("cma=256M".to_string()),
        Just("cma=64M@0-1G".to_string()),
        Just("\"".to_string()),
        Just("label l0\n".to_string()),
        Just("default l0\n".to_string()),
        Just("  append ".to_string()),
        Just("menu default\n".to_string()),
        Just("dtoverlay=cma".to_string()),
        Just(",cma-128".to_string()),
        Just("dtoverlay=vc4-kms-v3d".to_string()),
        Just("[all]\n".to_string()),
        Just("[cm4]\n".to_string()),
        Just("# comment\n".to_string()),
        Just("\r\n".to_string()),
        Just("\n".to_string()),
        Just(" ".to_string()),
        Just("\t".to_string()),
        Just("é".to_string()),
        "[a-z=,.0-9]{0,8}",
    ];
    prop::collection::vec(piece, 0..24).prop_map(|v| v.concat())
}

fn lines(s: &str) -> Vec<&str> {
    s.split_inclusive('\n').collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn cmdline_edits_are_total_idempotent_and_local(text in boot_text(), k in 0usize..5, mb in 1u64..2048) {
        let kind = KINDS[k];
        let size = parse_cma_size(&format!("{mb}M")).unwrap();
        if let Ok(e) = edit_cmdline_cma(kind, &text, &size) {
            if e.changed {
                let again = edit_cmdline_cma(kind, &e.new_text, &size).unwrap();
                prop_assert!(!again.changed, "not idempotent: {:?} -> {:?}", text, e.new_text);
                if kind != BootFileKind::Extlinux {
                    let got = find_boot_cma(kind, &e.new_text).cma.and_then(|c| c.size_bytes);
                    prop_assert_eq!(got, Some(size.bytes));
                }
                let (a, b) = (lines(&text), lines(&e.new_text));
                prop_assert!(b.len() == a.len() || b.len() == a.len() + 1, "{:?} -> {:?}", text, e.new_text);
                let differing = a.iter().zip(&b).filter(|(x, y)| x != y).count();
                // One line edited, or (a line added) at most the old last line gained its newline.
                prop_assert!(differing <= 1, "{} lines changed: {:?} -> {:?}", differing, text, e.new_text);
            } else {
                prop_assert_eq!(&e.new_text, &text);
            }
        }
        if let Ok(r) = remove_cmdline_cma(kind, &text) {
            if r.changed {
                prop_assert!(!remove_cmdline_cma(kind, &r.new_text).unwrap().changed);
            }
        }
    }

    #[test]
    fn pi_config_edits_are_total_and_idempotent(text in boot_text(), mb in prop::sample::select(vec![64u64, 96, 128, 200, 256, 448, 512, 1024])) {
        let size = parse_cma_size(&format!("{mb}M")).unwrap();
        if let Ok(e) = edit_pi_config_cma(&text, &size) {
            prop_assert_eq!(pi_config_cma(&e.new_text).and_then(|(c, _)| c.size_bytes), Some(size.bytes));
            prop_assert!(!edit_pi_config_cma(&e.new_text, &size).unwrap().changed);
            prop_assert!(lines(&e.new_text).len() <= lines(&text).len() + 2);
        }
    }
}
