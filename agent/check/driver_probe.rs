//! A kernel driver's failed probe, in words: the cause the log line names and what fixes it,
//! shared by the Hailo and Rockchip checks.

use crate::parse::logline::ProbeCause;

/// A probe failure cause in words.
pub(super) fn cause_text(cause: ProbeCause) -> &'static str {
    match cause {
        ProbeCause::Interrupts => "it could not get interrupt vectors (MSI/IRQ)",
        ProbeCause::ModuleForOtherKernel => "the module was built for another kernel",
        ProbeCause::DkmsBuildFailed => "DKMS could not build the module for this kernel",
        ProbeCause::FirmwareMissing => "a firmware file is missing",
        ProbeCause::Timeout => "the device did not answer (timeout)",
        ProbeCause::Collision => "two drivers collide on the same name (EEXIST)",
        ProbeCause::LinkLost => "the device's PCI BARs could not be read (link down)",
        ProbeCause::Other => "see the probe line",
    }
}

/// The remedy for a probe failure cause (generic wording; the Hailo checks add their own).
pub(super) fn cause_remedy(cause: ProbeCause) -> String {
    match cause {
        ProbeCause::ModuleForOtherKernel => "the module on disk does not match the running kernel: install the headers for it (linux-headers-$(uname -r)) and rebuild (sudo dkms autoinstall), or boot the kernel the module was built for; then reboot".into(),
        ProbeCause::DkmsBuildFailed => "install the headers of the running kernel (linux-headers-$(uname -r)) and run sudo dkms autoinstall; if the driver source does not build on this kernel, boot the previous kernel or install a driver release that supports it".into(),
        ProbeCause::Interrupts => "the device cannot get interrupt vectors: connect it without a PCIe switch, or enable MSI routing for the port (firmware/overlay update), then reboot".into(),
        ProbeCause::FirmwareMissing => "reinstall the package that ships the firmware file named in the log, then reboot".into(),
        ProbeCause::Timeout => "power the board off for 10 s (a warm reboot does not reset the device), then boot again".into(),
        ProbeCause::Collision => "blacklist the second driver so only one claims the device, then reboot".into(),
        ProbeCause::LinkLost => "power off, reseat the device and its cable, then boot again".into(),
        ProbeCause::Other => "read the probe line in the kernel log: its error code names the cause".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cause_has_its_own_words_and_remedy() {
        let causes = [
            ProbeCause::Interrupts,
            ProbeCause::ModuleForOtherKernel,
            ProbeCause::DkmsBuildFailed,
            ProbeCause::FirmwareMissing,
            ProbeCause::Timeout,
            ProbeCause::Collision,
            ProbeCause::LinkLost,
            ProbeCause::Other,
        ];
        let texts: std::collections::BTreeSet<_> = causes.iter().map(|c| cause_text(*c)).collect();
        let remedies: std::collections::BTreeSet<_> =
            causes.iter().map(|c| cause_remedy(*c)).collect();
        assert_eq!(texts.len(), causes.len());
        assert_eq!(remedies.len(), causes.len());
        assert!(cause_text(ProbeCause::Collision).contains("EEXIST"));
        assert!(cause_remedy(ProbeCause::DkmsBuildFailed).contains("dkms autoinstall"));
        assert!(cause_remedy(ProbeCause::Timeout).contains("power the board off"));
    }
}
