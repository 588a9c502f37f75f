//! What a kernel release string and the kernel's own lines say about the running kernel: its
//! page size (a Pi 5's `-rpi-2712` and Debian's `-16k` kernels use 16 KiB pages).

use regex_lite::Regex;
use std::sync::OnceLock;

/// The page size a kernel release names, and why: Raspberry Pi's BCM2712 kernel
/// (`6.6.74+rpt-rpi-2712`) and Debian's and Ubuntu's `-16k` / `-64k` flavours, or an x86 kernel
/// (always 4 KiB). `None` when the release does not say (a generic arm64 kernel may be built
/// either way).
pub fn page_size_of_release(release: &str) -> Option<(u64, &'static str)> {
    let r = release.trim().to_ascii_lowercase();
    if r.contains("-16k") || r.ends_with("16k") {
        return Some((16384, "a 16k kernel flavour"));
    }
    if r.contains("-64k") || r.ends_with("64k") {
        return Some((65536, "a 64k kernel flavour"));
    }
    if r.contains("rpi-2712") || r.ends_with("_2712") || r.contains("-v8-16k") {
        return Some((16384, "the Raspberry Pi 5 kernel uses 16 KiB pages"));
    }
    if ["rockchip", "rk35", "rk3588", "-vendor-rk"]
        .iter()
        .any(|w| r.contains(w))
    {
        return Some((4096, "Rockchip vendor kernels use 4 KiB pages"));
    }
    if r.contains("rpi-v8") || r.contains("-v8+") || r.ends_with("-v8") {
        return Some((4096, "the Raspberry Pi v8 kernel uses 4 KiB pages"));
    }
    if ["amd64", "x86_64", "-pve", "generic"]
        .iter()
        .any(|w| r.contains(w))
        && !r.contains("arm64")
        && !r.contains("aarch64")
    {
        return Some((4096, "an x86 kernel"));
    }
    None
}

fn re_page_size() -> &'static Regex {
    static P: OnceLock<Regex> = OnceLock::new();
    P.get_or_init(|| Regex::new(r"\(page_size=(\d{4,7})\)").expect("static pattern"))
}

/// The page size a driver line gives (the Hailo driver's probe: `Setting max_desc_page_size to
/// 4096, (page_size=16384)`).
pub fn page_size_of_line(line: &str) -> Option<u64> {
    if !line.contains("page_size=") {
        return None;
    }
    re_page_size()
        .captures(line)
        .and_then(|c| c[1].parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_and_lines() {
        assert_eq!(
            page_size_of_release("6.6.74+rpt-rpi-2712").map(|p| p.0),
            Some(16384)
        );
        assert_eq!(
            page_size_of_release("6.12.38+deb13-arm64-16k").map(|p| p.0),
            Some(16384)
        );
        assert_eq!(
            page_size_of_release("6.6.74+rpt-rpi-v8").map(|p| p.0),
            Some(4096)
        );
        assert_eq!(
            page_size_of_release("6.1.0-28-amd64").map(|p| p.0),
            Some(4096)
        );
        assert_eq!(
            page_size_of_release("6.17.4-2-pve").map(|p| p.0),
            Some(4096)
        );
        assert_eq!(
            page_size_of_release("6.1.115-vendor-rk35xx").map(|p| p.0),
            Some(4096)
        );
        assert_eq!(
            page_size_of_release("5.10.160-rockchip-rk3588").map(|p| p.0),
            Some(4096)
        );
        assert_eq!(page_size_of_release("6.12.0-arm64"), None);
        assert_eq!(
            page_size_of_line("hailo 0000:01:00.0: Probing: Setting max_desc_page_size to 4096, (page_size=16384)"),
            Some(16384)
        );
        assert_eq!(page_size_of_line("page_size=abc"), None);
    }
}
