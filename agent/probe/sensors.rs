//! Power, heat and NPU-load probes: the files an operator's dashboards read first.
//!
//! - Thermal zones: `/sys/class/thermal/thermal_zone*/{type,temp,trip_point_N_type,trip_point_N_temp}`
//!   (kernel `Documentation/driver-api/thermal/sysfs-api.rst`; temperatures in millidegrees C).
//! - Under-voltage: the Raspberry Pi `rpi_volt` hwmon (`/sys/class/hwmon/hwmon*/name` =
//!   `rpi_volt`, `in0_lcrit_alarm` = 1 while the supply is under-voltage; raspberrypi/linux
//!   `drivers/hwmon/raspberrypi-hwmon.c`), and `usb_max_current_enable` in the Pi's `config.txt`.
//! - A Hailo chip temperature only where a file gives it: a hwmon whose `name` starts with
//!   `hailo` and has `temp1_input` (the Hailo PCIe drivers export none today, so this is usually
//!   absent; no vendor CLI is run).
//! - RK3588 NPU: the vendor driver's debugfs `/sys/kernel/debug/rknpu/load` (`NPU load:  Core0:
//!   12%, Core1:  0%, Core2:  0%,`; older drivers print one figure) and the NPU's devfreq
//!   `/sys/class/devfreq/<addr>.npu/cur_freq` (Hz).
//! - On the live system only (a captured tree has no meaning for these): free bytes of the file
//!   systems holding `/` and the boot partition (`statvfs`), and the agent's own RSS
//!   (`/proc/self/status` `VmRSS`) and CPU time (`/proc/self/stat` utime + stime in clock ticks).
//!
//! Nothing here decides anything: `board.power` and `board.thermal` judge these figures.

use super::Probed;
pub use crate::model::sensors::*;
use crate::root::{ReadError, SysRoot};

/// Hwmon class directory.
pub const HWMON_DIR: &str = "/sys/class/hwmon";
/// The RK3588 vendor driver's NPU load file (debugfs).
pub const RKNPU_LOAD: &str = "/sys/kernel/debug/rknpu/load";
/// Devfreq class directory (the NPU's governor lives here on RK3588).
pub const DEVFREQ_DIR: &str = "/sys/class/devfreq";
/// Raspberry Pi firmware configuration files, newest layout first.
pub const PI_CONFIG_TXT: &[&str] = &["/boot/firmware/config.txt", "/boot/config.txt"];

/// Reads every sensor file under `root`.
pub fn probe_sensors(root: &SysRoot) -> Sensors {
    let hwmon = probe_hwmon(root);
    let rpi_volt = hwmon
        .iter()
        .find(|(_, name)| name == "rpi_volt")
        .map(|(dir, _)| {
            let path = format!("{dir}/in0_lcrit_alarm");
            RpiVolt {
                dir: dir.clone(),
                lcrit_alarm: read_int(root, &path).map(|v| v != 0),
            }
        });
    let hailo_temp_mc = hwmon
        .iter()
        .filter(|(_, name)| name.starts_with("hailo"))
        .map(|(dir, _)| format!("{dir}/temp1_input"))
        .find(|p| root.exists(p))
        .map(|path| FileValue {
            value: read_int(root, &path).and_then(|v| plausible_mc(&path, v)),
            path,
        });
    let npu_load = root.exists(RKNPU_LOAD).then(|| FileValue {
        path: RKNPU_LOAD.to_string(),
        value: root
            .read_string(RKNPU_LOAD)
            .and_then(|t| parse_rknpu_load(&t).map_err(|e| ReadError::malformed(RKNPU_LOAD, e))),
    });
    let npu_freq_hz = root
        .list_dir(DEVFREQ_DIR)
        .unwrap_or_default()
        .into_iter()
        .find(|n| n.contains("npu"))
        .map(|n| {
            let path = format!("{DEVFREQ_DIR}/{n}/cur_freq");
            FileValue {
                value: read_int(root, &path).and_then(|v| {
                    u64::try_from(v).map_err(|_| ReadError::malformed(&path, "negative frequency"))
                }),
                path,
            }
        });
    let live = root.is_live();
    Sensors {
        thermal: probe_thermal(root),
        hwmon,
        rpi_volt,
        hailo_temp_mc,
        npu_load,
        npu_freq_hz,
        usb_max_current_enable: probe_usb_max_current(root),
        fs: if live { probe_fs(root) } else { Vec::new() },
        agent: live.then(|| probe_self(root)),
        pi: super::pi_firmware::probe_pi_firmware(root),
    }
}

/// Reads a file holding one integer.
fn read_int(root: &SysRoot, path: &str) -> Probed<i64> {
    let t = root.read_string(path)?;
    t.trim()
        .parse::<i64>()
        .map_err(|_| ReadError::malformed(path, format!("not an integer: {:?}", clip(&t))))
}

fn clip(s: &str) -> String {
    s.trim().chars().take(40).collect()
}

/// A temperature in millidegrees that a working sensor can report (-60..=250 degrees C).
fn plausible_mc(path: &str, v: i64) -> Probed<i64> {
    if (-60_000..=250_000).contains(&v) {
        Ok(v)
    } else {
        Err(ReadError::malformed(
            path,
            format!("{v} millidegrees C is no real temperature"),
        ))
    }
}

/// `(directory, name)` of every hwmon under `/sys/class/hwmon`.
pub fn probe_hwmon(root: &SysRoot) -> Vec<(String, String)> {
    root.list_dir(HWMON_DIR)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.starts_with("hwmon"))
        .filter_map(|n| {
            let dir = format!("{HWMON_DIR}/{n}");
            let name = root.read_string(&format!("{dir}/name")).ok()?;
            Some((
                dir,
                crate::parse::devicetree::printable(name.trim()).to_string(),
            ))
        })
        .collect()
}

/// Every thermal zone with its trip points.
pub fn probe_thermal(root: &SysRoot) -> Probed<Vec<ThermalZone>> {
    let mut out = Vec::new();
    let mut names: Vec<String> = root
        .list_dir(THERMAL_DIR)?
        .into_iter()
        .filter(|n| {
            n.strip_prefix("thermal_zone")
                .is_some_and(|i| i.parse::<u32>().is_ok())
        })
        .collect();
    // thermal_zone10 after thermal_zone9.
    names.sort_by_key(|n| n["thermal_zone".len()..].parse::<u32>().unwrap_or(u32::MAX));
    for zone in names {
        let dir = format!("{THERMAL_DIR}/{zone}");
        let kind = root
            .read_string(&format!("{dir}/type"))
            .ok()
            .map(|t| {
                crate::parse::devicetree::printable(t.trim())
                    .chars()
                    .take(64)
                    .collect::<String>()
            })
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| zone.clone());
        let temp_path = format!("{dir}/temp");
        let temp_mc = read_int(root, &temp_path).and_then(|v| plausible_mc(&temp_path, v));
        let mut trips = Vec::new();
        for f in root.list_dir(&dir).unwrap_or_default() {
            let Some(index) = f
                .strip_prefix("trip_point_")
                .and_then(|r| r.strip_suffix("_type"))
                .and_then(|i| i.parse::<u32>().ok())
            else {
                continue;
            };
            let kind = root
                .read_string(&format!("{dir}/{f}"))
                .map(|t| t.trim().to_string());
            let temp = read_int(root, &format!("{dir}/trip_point_{index}_temp"));
            if let (Ok(kind), Ok(temp_mc)) = (kind, temp) {
                trips.push(TripPoint {
                    index,
                    kind,
                    temp_mc,
                });
            }
        }
        trips.sort_by_key(|t| t.index);
        out.push(ThermalZone {
            zone,
            kind,
            temp_mc,
            trips,
        });
    }
    Ok(out)
}

/// Parses the rknpu debugfs `load` file: every `N%` figure, one per core (`NPU load:  Core0:
/// 12%, Core1:  0%, Core2:  0%,`) or one for the whole NPU (`NPU load:  35%`).
///
/// Errors: no percentage in the text, or a figure above 100.
pub fn parse_rknpu_load(text: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices('%') {
        let digits: String = text[..i]
            .chars()
            .rev()
            .skip_while(|c| *c == ' ')
            .take_while(char::is_ascii_digit)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        if let Ok(v) = digits.parse::<u32>() {
            if v > 100 {
                return Err(format!("load {v}% is above 100%"));
            }
            out.push(v);
        }
    }
    if out.is_empty() {
        return Err(format!("no load figure in {:?}", clip(text)));
    }
    Ok(out)
}

/// The last `usb_max_current_enable=` line of the Pi's config.txt (the first file that exists).
pub fn probe_usb_max_current(root: &SysRoot) -> Option<ConfigLine> {
    let file = PI_CONFIG_TXT.iter().find(|p| root.exists(p))?;
    let text = root.read_string(file).ok()?;
    text.lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let t = l.trim();
            let v = t.strip_prefix("usb_max_current_enable")?.trim_start();
            let v = v.strip_prefix('=')?.trim();
            Some(ConfigLine {
                file: file.to_string(),
                line: i + 1,
                text: t.to_string(),
                value: v.to_string(),
            })
        })
        .last()
}

/// Free space of the file systems holding `/` and the boot partition (`/boot/firmware`, else
/// `/boot`), by `statvfs`. Failures leave the entry out.
pub fn probe_fs(root: &SysRoot) -> Vec<FsFree> {
    let boot = ["/boot/firmware", "/boot"]
        .into_iter()
        .find(|p| root.is_dir(p));
    ["/"]
        .into_iter()
        .chain(boot)
        .filter_map(|p| {
            let host = root.join(p).ok()?;
            let s = rustix::fs::statvfs(&host).ok()?;
            Some(FsFree {
                path: p.to_string(),
                free_bytes: s.f_bavail.saturating_mul(s.f_frsize),
                size_bytes: s.f_blocks.saturating_mul(s.f_frsize),
            })
        })
        .collect()
}

/// The agent's own RSS and CPU seconds from `/proc/self`.
pub fn probe_self(root: &SysRoot) -> SelfUsage {
    let rss_bytes = root.read_string("/proc/self/status").ok().and_then(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb.saturating_mul(1024))
    });
    let cpu_s = root
        .read_string("/proc/self/stat")
        .ok()
        .and_then(|t| parse_stat_cpu_ticks(&t))
        .map(|ticks| ticks as f64 / rustix::param::clock_ticks_per_second() as f64);
    SelfUsage { rss_bytes, cpu_s }
}

/// utime + stime (fields 14 and 15, clock ticks) of a `/proc/<pid>/stat` line. The command name
/// in parentheses may hold spaces and `)`, so fields are counted after its last `)`.
pub fn parse_stat_cpu_ticks(line: &str) -> Option<u64> {
    let rest = &line[line.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the comm: state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime.saturating_add(stime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rknpu_load_lines() {
        assert_eq!(
            parse_rknpu_load("NPU load:  Core0: 12%, Core1:  0%, Core2: 100%,\n").unwrap(),
            vec![12, 0, 100]
        );
        assert_eq!(parse_rknpu_load("NPU load:  35%\n").unwrap(), vec![35]);
        assert!(parse_rknpu_load("").is_err());
        assert!(parse_rknpu_load("NPU load: Core0: 180%,").is_err());
    }

    #[test]
    fn stat_cpu_ticks() {
        let line =
            "4242 (npu agent) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 37 5 0 0 20 0 3 0 1234 0 0";
        assert_eq!(parse_stat_cpu_ticks(line), Some(42));
        assert_eq!(parse_stat_cpu_ticks("garbage"), None);
    }

    #[test]
    fn zones_trips_and_hwmon_from_a_tree() {
        let dir = tempfile::tempdir().unwrap();
        let w = |p: &str, s: &str| {
            let path = dir.path().join(p.trim_start_matches('/'));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, s).unwrap();
        };
        w("/sys/class/thermal/thermal_zone10/type", "npu-thermal\n");
        w("/sys/class/thermal/thermal_zone10/temp", "91500\n");
        w(
            "/sys/class/thermal/thermal_zone10/trip_point_1_type",
            "critical\n",
        );
        w(
            "/sys/class/thermal/thermal_zone10/trip_point_1_temp",
            "115000\n",
        );
        w(
            "/sys/class/thermal/thermal_zone10/trip_point_0_type",
            "passive\n",
        );
        w(
            "/sys/class/thermal/thermal_zone10/trip_point_0_temp",
            "85000\n",
        );
        w("/sys/class/thermal/thermal_zone2/type", "cpu-thermal\n");
        w("/sys/class/thermal/thermal_zone2/temp", "-999999\n");
        w("/sys/class/thermal/cooling_device0/type", "fan\n");
        w("/sys/class/hwmon/hwmon1/name", "rpi_volt\n");
        w("/sys/class/hwmon/hwmon1/in0_lcrit_alarm", "1\n");
        let s = probe_sensors(&SysRoot::new(dir.path()));
        let z = s.thermal.unwrap();
        assert_eq!(z.len(), 2);
        assert_eq!(z[0].zone, "thermal_zone2");
        assert!(z[0].temp_mc.is_err(), "an impossible reading is malformed");
        assert_eq!(z[1].kind, "npu-thermal");
        assert_eq!(z[1].temp_mc.as_ref().ok(), Some(&91_500));
        assert_eq!(
            z[1].trips
                .iter()
                .map(|t| (t.kind.as_str(), t.temp_mc))
                .collect::<Vec<_>>(),
            vec![("passive", 85_000), ("critical", 115_000)]
        );
        let v = s.rpi_volt.unwrap();
        assert_eq!(v.dir, "/sys/class/hwmon/hwmon1");
        assert_eq!(v.lcrit_alarm.ok(), Some(true));
        assert!(s.fs.is_empty() && s.agent.is_none(), "a tree is not live");
    }
}
