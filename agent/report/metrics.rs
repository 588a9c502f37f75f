//! The status's `metrics` object: power, thermal, NPU-load and footprint readings taken from a
//! snapshot, keyed with their units (`soc_temp_c`, `uptime_s`, ...).

use crate::model::sensors::{celsius, undervoltage_log, UndervoltageLog};
use crate::model::Snapshot;
use serde_json::Value;
use std::collections::BTreeMap;

/// Dashboard figures from the sensors, added to the status `metrics` (units in the names; a
/// figure whose file is missing or unreadable is left out, never reported as 0):
///
/// - `soc_temp_c`: the hottest readable thermal zone; `zone_temp_c`: `{zone type: degrees C}`;
///   `hailo_temp_c` where a file gives it;
/// - `undervoltage_now` (bool: the `rpi_volt` alarm, else the last kernel line), and
///   `undervoltage_events` (`Undervoltage detected!` lines since boot, when a kernel log was read);
/// - `npu_load_percent` (mean over the cores), `npu_core_load_percent` (list), `npu_freq_hz`;
/// - `root_fs_free_bytes`, `boot_fs_free_bytes` (live system);
/// - `uptime_s`; `agent_rss_bytes`, `agent_cpu_s` (live system).
pub fn metrics(snap: &Snapshot, m: &mut BTreeMap<String, Value>) {
    let s = &snap.sensors;
    if let Ok(zones) = &s.thermal {
        let mut per = serde_json::Map::new();
        let mut hottest: Option<i64> = None;
        for z in zones {
            let Ok(t) = z.temp_mc else { continue };
            let key = if per.contains_key(&z.kind) {
                format!("{} ({})", z.kind, z.zone)
            } else {
                z.kind.clone()
            };
            per.insert(key, celsius(t).into());
            hottest = Some(hottest.map_or(t, |h| h.max(t)));
        }
        if let Some(h) = hottest {
            m.insert("soc_temp_c".into(), celsius(h).into());
            m.insert("zone_temp_c".into(), Value::Object(per));
        }
    }
    if let Some(Ok(t)) = s.hailo_temp_mc.as_ref().map(|h| &h.value) {
        m.insert("hailo_temp_c".into(), celsius(*t).into());
    }
    let log = undervoltage_log(&snap.logs);
    let alarm = s
        .rpi_volt
        .as_ref()
        .and_then(|v| v.lcrit_alarm.as_ref().ok().copied());
    let now = alarm.or_else(|| {
        log.as_ref()
            .filter(|l| l.last.is_some())
            .map(UndervoltageLog::under_now)
    });
    if let Some(n) = now {
        m.insert("undervoltage_now".into(), n.into());
    }
    if let Some(l) = &log {
        m.insert("undervoltage_events".into(), l.detected.into());
    }
    if let Some(Ok(cores)) = s.npu_load.as_ref().map(|l| &l.value) {
        let sum: u32 = cores.iter().sum();
        let mean = (f64::from(sum) / cores.len().max(1) as f64 * 10.0).round() / 10.0;
        m.insert("npu_load_percent".into(), mean.into());
        m.insert("npu_core_load_percent".into(), cores.clone().into());
    }
    if let Some(Ok(hz)) = s.npu_freq_hz.as_ref().map(|f| &f.value) {
        m.insert("npu_freq_hz".into(), (*hz).into());
    }
    for f in &s.fs {
        let key = if f.path == "/" {
            "root_fs_free_bytes"
        } else {
            "boot_fs_free_bytes"
        };
        m.insert(key.into(), f.free_bytes.into());
    }
    if let Ok(u) = &snap.uptime_s {
        m.insert("uptime_s".into(), (*u as u64).into());
    }
    if let Some(a) = &s.agent {
        if let Some(r) = a.rss_bytes {
            m.insert("agent_rss_bytes".into(), r.into());
        }
        if let Some(c) = a.cpu_s {
            m.insert("agent_cpu_s".into(), ((c * 100.0).round() / 100.0).into());
        }
    }
}
