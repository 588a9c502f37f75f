//! `board.thermal`: SoC and NPU temperatures from every `/sys/class/thermal/thermal_zone*` with
//! its trip points. A zone at or past a `passive` (or `hot`) trip is being throttled: `warn`.
//! A zone within [`CRITICAL_MARGIN_MC`] of its `critical` trip is about to be shut down by the
//! kernel: `fail`. `active` trips only switch fans and are no fault. Zones are named by what
//! they measure (RK3588 `npu-thermal` is the NPU, Pi `cpu-thermal` the SoC).

use super::{Ctx, Finding, Status};
use crate::model::sensors::{celsius, ThermalZone};
use serde_json::{Map, Value};

/// How close to a `critical` trip counts as "near critical", millidegrees C (5 °C).
pub const CRITICAL_MARGIN_MC: i64 = 5_000;

/// What a zone measures, for people: `NPU (npu-thermal)`.
pub fn zone_label(kind: &str) -> String {
    let what = match kind {
        "npu-thermal" => "NPU",
        "cpu-thermal" | "cpu_thermal" => "CPU/SoC",
        "soc-thermal" => "SoC",
        "gpu-thermal" => "GPU",
        "center-thermal" => "SoC centre",
        "littlecore-thermal" => "little cores",
        k if k.starts_with("bigcore") => "big cores",
        _ => return kind.to_string(),
    };
    format!("{what} ({kind})")
}

/// One zone's verdict: status and the trip it reached.
fn judge(z: &ThermalZone, temp: i64) -> (Status, Option<&crate::model::sensors::TripPoint>) {
    if let Some(t) = z
        .trips
        .iter()
        .filter(|t| t.kind == "critical")
        .find(|t| temp >= t.temp_mc.saturating_sub(CRITICAL_MARGIN_MC))
    {
        return (Status::Fail, Some(t));
    }
    // The lowest passive/hot trip reached.
    let reached = z
        .trips
        .iter()
        .filter(|t| (t.kind == "passive" || t.kind == "hot") && temp >= t.temp_mc)
        .min_by_key(|t| t.temp_mc);
    match reached {
        Some(t) => (Status::Warn, Some(t)),
        None => (Status::Pass, None),
    }
}

pub(super) fn thermal(ctx: &Ctx<'_>) -> Finding {
    const ID: &str = "board.thermal";
    let sensors = &ctx.snap.sensors;
    let zones = match &sensors.thermal {
        Ok(z) if !z.is_empty() => z,
        Ok(_) => return Finding::skip(ID, "no thermal zones under /sys/class/thermal"),
        Err(e) => return Finding::skip(ID, format!("no thermal zones: {e}")),
    };
    let mut temps = Map::new();
    let mut unreadable = Vec::new();
    let mut worst: Vec<(Status, String)> = Vec::new();
    let mut evidence = Vec::new();
    let mut hottest: Option<(&ThermalZone, i64)> = None;
    for z in zones {
        let temp = match &z.temp_mc {
            Ok(t) => *t,
            Err(e) => {
                unreadable.push(format!("{} ({}): {}", z.kind, z.zone, e.detail));
                continue;
            }
        };
        let key = if temps.contains_key(&z.kind) {
            format!("{} ({})", z.kind, z.zone)
        } else {
            z.kind.clone()
        };
        temps.insert(key, celsius(temp).into());
        if hottest.is_none_or(|(_, h)| temp > h) {
            hottest = Some((z, temp));
        }
        let (status, trip) = judge(z, temp);
        if let Some(trip) = trip {
            let what = trip_sentence(z, temp, status, trip);
            worst.push((status, what));
            evidence.push((z.temp_path(), z.kind.clone(), temp, trip.clone()));
        }
    }
    let Some((hz, ht)) = hottest else {
        return Finding::skip(
            ID,
            format!(
                "no thermal zone has a readable temperature: {}",
                unreadable.join("; ")
            ),
        )
        .observed("unreadable_zones", unreadable);
    };
    worst.sort_by_key(|w| std::cmp::Reverse(w.0.severity()));
    let status = worst.first().map_or(Status::Pass, |w| w.0);
    let summary = if worst.is_empty() {
        format!(
            "hottest zone {} at {:.1} °C; {} zone(s) below their passive and critical trips",
            zone_label(&hz.kind),
            celsius(ht),
            temps.len()
        )
    } else {
        worst
            .iter()
            .map(|w| w.1.clone())
            .collect::<Vec<_>>()
            .join("; ")
    };
    let mut f = Finding::new(ID, status, summary)
        .observed("soc_temp_c", celsius(ht))
        .observed("hottest_zone", hz.kind.clone())
        .observed("zone_temp_c", Value::Object(temps));
    for (path, kind, temp, trip) in &evidence {
        f = f.evidence(path, None, &temp.to_string()).expected(
            &format!("{kind}_{}_trip_c", trip.kind),
            celsius(trip.temp_mc),
        );
    }
    if !unreadable.is_empty() {
        f = f.observed("unreadable_zones", unreadable);
    }
    f = hailo_temp(f, sensors);
    if status != Status::Pass {
        let npu = worst.iter().any(|w| w.1.starts_with("NPU"));
        f = f.remedy(thermal_remedy(ctx, status, npu));
    }
    f
}

/// The sentence for a zone that reached `trip`: near critical (`fail`) or throttled.
fn trip_sentence(
    z: &ThermalZone,
    temp: i64,
    status: Status,
    trip: &crate::model::sensors::TripPoint,
) -> String {
    if status == Status::Fail {
        format!(
            "{} at {:.1} °C, within {} °C of its critical trip {:.1} °C: the kernel \
             shuts the board down there",
            zone_label(&z.kind),
            celsius(temp),
            CRITICAL_MARGIN_MC / 1000,
            celsius(trip.temp_mc)
        )
    } else {
        format!(
            "{} at {:.1} °C, past its {} trip {:.1} °C: throttled",
            zone_label(&z.kind),
            celsius(temp),
            trip.kind,
            celsius(trip.temp_mc)
        )
    }
}

/// Adds the Hailo chip's own temperature, when the board has one.
fn hailo_temp(mut f: Finding, sensors: &crate::model::sensors::Sensors) -> Finding {
    if let Some(h) = &sensors.hailo_temp_mc {
        match &h.value {
            Ok(t) => {
                f = f
                    .observed("hailo_temp_c", celsius(*t))
                    .evidence(&h.path, None, &t.to_string())
            }
            Err(e) => f = f.observed("hailo_temp_error", e.to_string()),
        }
    }
    f
}

/// The remedy for a hot board: stop first when near critical; cooling advice for the board
/// (the Pi Active Cooler on a Pi); the NPU's devfreq note when an NPU zone is hot.
fn thermal_remedy(ctx: &Ctx<'_>, status: Status, npu: bool) -> String {
    let mut r = if status == Status::Fail {
        "Stop the NPU workload now and let the board cool; then fix the cooling before \
         restarting it: "
            .to_string()
    } else {
        "The kernel is throttling to stay below its limits: ".to_string()
    };
    let pi = ctx
        .snap
        .identity
        .model
        .as_deref()
        .is_ok_and(|m| m.contains("Raspberry Pi"));
    r.push_str(if pi {
        "fit a heatsink with a fan on the SoC (the Raspberry Pi Active Cooler on a Pi 5), "
    } else {
        "fit a heatsink with a fan on the SoC and the NPU, "
    });
    r.push_str(
        "give the case airflow, and check that the fan spins (`cat \
         /sys/class/thermal/cooling_device*/cur_state`).",
    );
    if npu {
        r.push_str(
            " The NPU's devfreq lowers its clock at this trip, so inference slows down \
             until it cools.",
        );
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::sensors::TripPoint;

    fn zone(temp: i64, trips: &[(&str, i64)]) -> ThermalZone {
        ThermalZone {
            zone: "thermal_zone6".into(),
            kind: "npu-thermal".into(),
            temp_mc: Ok(temp),
            trips: trips
                .iter()
                .enumerate()
                .map(|(i, (k, t))| TripPoint {
                    index: i as u32,
                    kind: k.to_string(),
                    temp_mc: *t,
                })
                .collect(),
        }
    }

    #[test]
    fn trips_decide() {
        let trips = [
            ("active", 60_000),
            ("passive", 85_000),
            ("critical", 115_000),
        ];
        assert_eq!(judge(&zone(70_000, &trips), 70_000).0, Status::Pass);
        assert_eq!(judge(&zone(85_000, &trips), 85_000).0, Status::Warn);
        assert_eq!(judge(&zone(109_999, &trips), 109_999).0, Status::Warn);
        assert_eq!(judge(&zone(110_000, &trips), 110_000).0, Status::Fail);
        // No trips at all: nothing to judge against.
        assert_eq!(judge(&zone(99_000, &[]), 99_000).0, Status::Pass);
    }

    #[test]
    fn labels_and_units() {
        assert_eq!(zone_label("npu-thermal"), "NPU (npu-thermal)");
        assert_eq!(zone_label("acpitz"), "acpitz");
        assert_eq!(celsius(91_547), 91.5);
        assert_eq!(celsius(-5_000), -5.0);
    }

    #[test]
    fn thermal_verdicts_on_a_board() {
        use crate::check::testkit::{one, Board};
        let trips = [("passive", 85_000), ("critical", 115_000)];
        let table = [
            (
                50_000,
                Status::Pass,
                "hottest zone NPU (npu-thermal) at 50.0 °C",
                "",
            ),
            (
                96_000,
                Status::Warn,
                "past its passive trip 85.0 °C: throttled",
                "The kernel is throttling",
            ),
            (
                112_000,
                Status::Fail,
                "within 5 °C of its critical trip 115.0 °C",
                "Stop the NPU workload now",
            ),
        ];
        for (temp, status, summary, remedy) in table {
            let b = Board::new().thermal_zone("npu-thermal", temp, &trips);
            let f = one("rk3588-rknpu", &b.build(), "board.thermal");
            assert_eq!(f.status, status, "{}", f.summary);
            assert!(f.summary.contains(summary), "{}", f.summary);
            assert!(f.remedy.contains(remedy), "{}", f.remedy);
        }
        let f = one("rk3588-rknpu", &Board::new().build(), "board.thermal");
        assert_eq!(f.status, Status::Skip);
        assert!(f.summary.contains("no thermal zones"), "{}", f.summary);
    }
}
