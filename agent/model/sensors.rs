//! Power, thermal and NPU-load readings as probed, and the pure derivations the checks and the
//! metrics share (millidegrees to degrees, the undervoltage story of the kernel log).

use super::logs::LogFile;

/// Thermal-zone class directory.
pub const THERMAL_DIR: &str = "/sys/class/thermal";
use super::probed::Probed;

/// One trip point of a thermal zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TripPoint {
    /// `N` of `trip_point_N_*`.
    pub index: u32,
    /// `passive`, `active`, `hot` or `critical`.
    pub kind: String,
    /// Trip temperature, millidegrees Celsius.
    pub temp_mc: i64,
}

/// One `/sys/class/thermal/thermal_zone*` directory.
#[derive(Debug, Clone)]
pub struct ThermalZone {
    /// Directory name (`thermal_zone0`).
    pub zone: String,
    /// `type` (`cpu-thermal`, `npu-thermal`, `soc-thermal`); the directory name when unreadable.
    pub kind: String,
    /// `temp`, millidegrees Celsius (`Malformed` for a value that is no integer or lies outside
    /// -60..=250 degrees, which no working sensor reports).
    pub temp_mc: Probed<i64>,
    /// Trip points with a readable type and temperature, in index order.
    pub trips: Vec<TripPoint>,
}

impl ThermalZone {
    /// Board path of the zone's `temp` file.
    pub fn temp_path(&self) -> String {
        format!("{THERMAL_DIR}/{}/temp", self.zone)
    }
}

/// The Raspberry Pi under-voltage sensor.
#[derive(Debug, Clone)]
pub struct RpiVolt {
    /// Hwmon directory (`/sys/class/hwmon/hwmon1`).
    pub dir: String,
    /// `in0_lcrit_alarm`: true while the supply is under-voltage.
    pub lcrit_alarm: Probed<bool>,
}

/// A value read from one file.
#[derive(Debug, Clone)]
pub struct FileValue<T> {
    /// Board path.
    pub path: String,
    /// The value.
    pub value: Probed<T>,
}

/// A `key=value` line of a text configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigLine {
    /// Board path.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// The line as written (trimmed).
    pub text: String,
    /// The value after `=`.
    pub value: String,
}

/// Free space of the file system holding a board path (`statvfs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsFree {
    /// The path asked about (`/`, `/boot/firmware`).
    pub path: String,
    /// Bytes available to unprivileged users (`f_bavail * f_frsize`, what `df` shows as Avail).
    pub free_bytes: u64,
    /// Size of the file system (`f_blocks * f_frsize`).
    pub size_bytes: u64,
}

/// The agent's own footprint (live system only).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SelfUsage {
    /// `VmRSS` of `/proc/self/status`, bytes.
    pub rss_bytes: Option<u64>,
    /// utime + stime of `/proc/self/stat`, seconds.
    pub cpu_s: Option<f64>,
}

/// Everything the power and thermal checks and the dashboard metrics read.
#[derive(Debug, Clone)]
pub struct Sensors {
    /// Thermal zones (`Err` when `/sys/class/thermal` cannot be listed).
    pub thermal: Probed<Vec<ThermalZone>>,
    /// Every hwmon as (directory, `name`), for evidence and for boards with other sensors.
    pub hwmon: Vec<(String, String)>,
    /// The `rpi_volt` hwmon, when the board has one.
    pub rpi_volt: Option<RpiVolt>,
    /// A Hailo chip temperature from a `hailo*` hwmon's `temp1_input` (millidegrees C).
    pub hailo_temp_mc: Option<FileValue<i64>>,
    /// RK3588 NPU load per core, percent (`rknpu/load`), when the file exists.
    pub npu_load: Option<FileValue<Vec<u32>>>,
    /// The NPU's devfreq `cur_freq`, Hz, when a devfreq device named `*npu*` exists.
    pub npu_freq_hz: Option<FileValue<u64>>,
    /// `usb_max_current_enable=` in the Pi's config.txt (last one wins), when present.
    pub usb_max_current_enable: Option<ConfigLine>,
    /// File-system free space of `/` and of the boot partition (live system only).
    pub fs: Vec<FsFree>,
    /// The agent's own RSS and CPU time (live system only).
    pub agent: Option<SelfUsage>,
    /// What the Raspberry Pi firmware reports (other boards: all `None`).
    pub pi: PiFirmware,
}

/// What the Raspberry Pi firmware tells the kernel: throttling, the negotiated supply current,
/// the bootloader's build date.
#[derive(Debug, Clone, Default)]
pub struct PiFirmware {
    /// `get_throttled` of the firmware device (what `vcgencmd get_throttled` prints): bit 0
    /// under-voltage now, 1 ARM frequency capped now, 2 throttled now, 3 soft temperature limit
    /// now; bits 16..19 the same since boot.
    pub throttled: Option<FileValue<u32>>,
    /// `/proc/device-tree/chosen/power/max_current`: the current the supply negotiated, mA.
    pub supply_max_current_ma: Option<FileValue<u32>>,
    /// `/proc/device-tree/chosen/bootloader/build-timestamp`: the bootloader's build time,
    /// seconds since the epoch.
    pub bootloader_build_unix_s: Option<FileValue<u32>>,
}

/// `get_throttled` bit: under-voltage now.
pub const THROTTLED_UNDERVOLTAGE_NOW: u32 = 1 << 0;
/// `get_throttled` bit: ARM frequency capped now.
pub const THROTTLED_CAPPED_NOW: u32 = 1 << 1;
/// `get_throttled` bit: throttled now.
pub const THROTTLED_NOW: u32 = 1 << 2;
/// `get_throttled` bit: under-voltage has occurred since boot.
pub const THROTTLED_UNDERVOLTAGE_SINCE_BOOT: u32 = 1 << 16;
/// `get_throttled` bit: throttling has occurred since boot.
pub const THROTTLED_SINCE_BOOT: u32 = 1 << 18;

/// Kernel line the `rpi_volt` driver prints when the alarm rises.
pub const UNDERVOLTAGE_DETECTED: &str = "Undervoltage detected!";

/// Kernel line the `rpi_volt` driver prints when the alarm clears.
pub const VOLTAGE_NORMALISED: &str = "Voltage normalised";

/// Kernel line that starts a boot (`Booting Linux on physical CPU 0x0000000000 [0x414fd0b1]`).
pub const BOOT_MARKER: &str = "Booting Linux on physical CPU";

/// Under-voltage lines of one kernel log since the last boot in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndervoltageLog {
    /// Board path of the log (or the kernel log source's name).
    pub path: String,
    /// `Undervoltage detected!` lines since boot.
    pub detected: u64,
    /// `Voltage normalised` lines since boot.
    pub normalised: u64,
    /// The last of those lines: (1-based line in the part read, line known, text, detected?).
    pub last: Option<(usize, bool, String, bool)>,
}

impl UndervoltageLog {
    /// True when the last line says under-voltage (no `Voltage normalised` after it).
    pub fn under_now(&self) -> bool {
        self.last.as_ref().is_some_and(|l| l.3)
    }
}

/// Counts under-voltage lines in the kernel-class logs, since the last `Booting Linux` line of
/// each. The kernel ring buffer, the journal's kernel transport, `kern.log` and `syslog` carry
/// the same lines, so the log with the most `Undervoltage detected!` lines is taken (not the
/// sum). `None` when no kernel log was read.
pub fn undervoltage_log(logs: &[LogFile]) -> Option<UndervoltageLog> {
    let mut best: Option<UndervoltageLog> = None;
    for log in logs.iter().filter(|l| l.class == super::LogClass::Kernel) {
        let start = log
            .lines
            .iter()
            .rposition(|l| l.contains(BOOT_MARKER))
            .unwrap_or(0);
        let mut u = UndervoltageLog {
            path: log.path.clone(),
            detected: 0,
            normalised: 0,
            last: None,
        };
        for (i, line) in log.lines.iter().enumerate().skip(start) {
            let detected = line.contains(UNDERVOLTAGE_DETECTED);
            if !(detected || line.contains(VOLTAGE_NORMALISED)) {
                continue;
            }
            if detected {
                u.detected += 1;
            } else {
                u.normalised += 1;
            }
            u.last = Some((i + 1, !log.cut, line.clone(), detected));
        }
        if best.as_ref().is_none_or(|b| u.detected > b.detected) {
            best = Some(u);
        }
    }
    best
}

/// Degrees C with one decimal from millidegrees.
pub fn celsius(mc: i64) -> f64 {
    (mc as f64 / 100.0).round() / 10.0
}
