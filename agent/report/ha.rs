//! Home Assistant MQTT discovery (off by default): one device-based discovery message
//! (`<prefix>/device/<board>/config`, retained) with sensors for CMA total/free and health, a
//! binary sensor (`problem`) per check, and buttons for compaction and rescan. Re-sent when Home
//! Assistant announces itself (`<prefix>/status` = `online`). Button presses arrive on
//! `<root>/<board>/ha/<action>` (not retained) and run like unsigned commands.

use crate::check::CHECK_IDS;
use serde_json::{Map, Value};

/// The payload a Home Assistant button publishes (`payload_press` in its discovery).
pub const PRESS: &str = "PRESS";

/// A JSON object from `(key, value)` pairs: one out-of-line copy of the insert loop for every
/// object this module builds (the `json!` macro expands it at each key).
#[inline(never)]
fn obj(pairs: Vec<(&str, Value)>) -> Value {
    let mut m = Map::new();
    for (k, v) in pairs {
        m.insert(k.to_string(), v);
    }
    Value::Object(m)
}

/// What the discovery needs to know about the board.
#[derive(Debug, Clone)]
pub struct HaContext<'a> {
    /// Discovery prefix (`homeassistant`).
    pub prefix: &'a str,
    /// Topic root of the fleet.
    pub topic_root: &'a str,
    /// Board id.
    pub board: &'a str,
    /// Model string for the device card.
    pub model: &'a str,
    /// Profile id (shown as hardware version).
    pub profile: &'a str,
    /// Buttons to offer: only actions the gate would run for a press
    /// ([`crate::action::gate::Gate::button_actions`]).
    pub buttons: Vec<crate::model::action::ActionKind>,
}

/// `<prefix>/device/<board>/config`.
pub fn discovery_topic(ctx: &HaContext<'_>) -> String {
    format!("{}/device/{}/config", ctx.prefix, ctx.board)
}

/// `<root>/<board>/ha/<action>`: where the buttons publish.
pub fn button_topic(ctx: &HaContext<'_>, action: crate::model::action::ActionKind) -> String {
    format!("{}/{}/ha/{action}", ctx.topic_root, ctx.board)
}

/// The device-based discovery payload.
pub fn discovery_payload(ctx: &HaContext<'_>) -> Value {
    let status = crate::model::topics::status(ctx.topic_root, ctx.board);
    let avail = crate::model::topics::availability(ctx.topic_root, ctx.board);
    let b = ctx.board;
    let mut cmps = Map::new();
    // A metric the status lacks renders as `None`, which Home Assistant shows as unknown (not
    // as 0 B); a missing status goes unavailable after `expire_after`.
    let metric = |m: &str| {
        format!(
            "{{% set v = (value_json.metrics | default({{}})).get('{m}') %}}{{{{ v if v is number else 'None' }}}}"
        )
    };
    for (key, name, m) in [
        ("cma_total", "CMA total", "cma_total_bytes"),
        ("cma_free", "CMA free", "cma_free_bytes"),
    ] {
        cmps.insert(
            format!("{b}_{key}"),
            obj(vec![
                ("p", "sensor".into()),
                ("unique_id", format!("{b}_{key}").into()),
                ("name", name.into()),
                ("device_class", "data_size".into()),
                ("state_class", "measurement".into()),
                ("unit_of_measurement", "B".into()),
                ("state_topic", status.as_str().into()),
                ("value_template", metric(m).into()),
                ("expire_after", 600.into()),
            ]),
        );
    }
    cmps.insert(
        format!("{b}_health"),
        obj(vec![
            ("p", "sensor".into()),
            ("unique_id", format!("{b}_health").into()),
            ("name", "Health".into()),
            ("device_class", "enum".into()),
            ("options", vec!["ok", "warn", "fail"].into()),
            ("state_topic", status.as_str().into()),
            (
                "value_template",
                "{{ value_json.health if value_json.health in ['ok', 'warn', 'fail'] else 'None' }}"
                    .into(),
            ),
            ("expire_after", 600.into()),
        ]),
    );
    for (key, cfg) in sensor_components(b, &status) {
        cmps.insert(key, cfg);
    }
    for id in CHECK_IDS {
        let key = format!("{b}_check_{}", id.replace('.', "_"));
        // ON: a problem (warn, fail); OFF: none (pass, info); unknown: the check could not
        // judge (error, skip) or is absent — never "no problem" for those. Reads the compact
        // status form's `checks` map too.
        cmps.insert(
            key.clone(),
            obj(vec![
                ("p", "binary_sensor".into()),
                ("unique_id", key.into()),
                ("name", (*id).into()),
                ("device_class", "problem".into()),
                ("state_topic", status.as_str().into()),
                ("value_template", format!("{{% set f = (value_json.findings | default([])) | selectattr('id', 'equalto', '{id}') | map(attribute='status') | list %}}{{% set f = f + [(value_json.checks | default({{}})).get('{id}')] %}}{{{{ 'ON' if ('fail' in f or 'warn' in f) else ('OFF' if ('pass' in f or 'info' in f) else 'None') }}}}").into()),
                ("expire_after", 600.into()),
                ("entity_category", "diagnostic".into()),
            ]),
        );
    }
    for action in ctx.buttons.iter().copied() {
        cmps.insert(
            format!("{b}_{action}"),
            obj(vec![
                ("p", "button".into()),
                ("unique_id", format!("{b}_{action}").into()),
                ("name", action.as_str().into()),
                ("command_topic", button_topic(ctx, action).into()),
                ("payload_press", PRESS.into()),
                ("entity_category", "config".into()),
            ]),
        );
    }
    obj(vec![
        (
            "dev",
            obj(vec![
                ("ids", vec![format!("npu-agent-{b}")].into()),
                ("name", format!("{} ({b})", ctx.model).into()),
                ("mf", "npu-agent".into()),
                ("mdl", ctx.model.into()),
                ("hw", ctx.profile.into()),
            ]),
        ),
        (
            "o",
            obj(vec![
                ("name", "npu-agent".into()),
                ("sw", env!("CARGO_PKG_VERSION").into()),
            ]),
        ),
        ("availability_topic", avail.into()),
        ("payload_available", "online".into()),
        ("payload_not_available", "offline".into()),
        ("qos", 1.into()),
        ("cmps", Value::Object(cmps)),
    ])
}

/// A value template that renders the metric, or `None` when the status lacks it: Home Assistant
/// then shows the entity as unknown (not 0).
fn metric_template(key: &str) -> String {
    format!("{{{{ value_json.metrics.{key} if 'metrics' in value_json and '{key}' in value_json.metrics else None }}}}")
}

/// Power, heat and NPU-load entities: `(component key, config)`. Each is a measurement with its
/// device class and unit; under-voltage is a `problem` binary sensor.
pub fn sensor_components(b: &str, status: &str) -> Vec<(String, Value)> {
    let sensor = |id: &str, name: &str, key: &str, class: Option<&str>, unit: &str| {
        let mut c = obj(vec![
            ("p", "sensor".into()),
            ("unique_id", format!("{b}_{id}").into()),
            ("name", name.into()),
            ("unit_of_measurement", unit.into()),
            ("state_class", "measurement".into()),
            ("state_topic", status.into()),
            ("value_template", metric_template(key).into()),
            ("expire_after", 600.into()),
        ]);
        if let Some(class) = class {
            c["device_class"] = class.into();
        }
        (format!("{b}_{id}"), c)
    };
    vec![
        sensor(
            "soc_temp",
            "SoC temperature",
            "soc_temp_c",
            Some("temperature"),
            "°C",
        ),
        sensor("npu_load", "NPU load", "npu_load_percent", None, "%"),
        sensor(
            "root_fs_free",
            "Root file system free",
            "root_fs_free_bytes",
            Some("data_size"),
            "B",
        ),
        (
            format!("{b}_undervoltage"),
            obj(vec![
                ("p", "binary_sensor".into()),
                ("unique_id", format!("{b}_undervoltage").into()),
                ("name", "Under-voltage".into()),
                ("device_class", "problem".into()),
                ("state_topic", status.into()),
                ("expire_after", 600.into()),
                ("value_template", "{% if 'metrics' in value_json and 'undervoltage_now' in value_json.metrics %}{{ 'ON' if value_json.metrics.undervoltage_now else 'OFF' }}{% else %}None{% endif %}".into()),
            ]),
        ),
    ]
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A board `b1` under `npu-fleet` with the compact and rescan buttons (shared with the link's
    /// tests in `crate::mqtt::ha`).
    pub(crate) fn ctx() -> HaContext<'static> {
        HaContext {
            prefix: "homeassistant",
            topic_root: "npu-fleet",
            board: "b1",
            model: "Radxa ROCK 5B",
            profile: "rk3588-rknpu",
            buttons: vec![
                crate::model::action::ActionKind::Compact,
                crate::model::action::ActionKind::Rescan,
            ],
        }
    }

    #[test]
    fn discovery_names_the_right_topics() {
        let p = discovery_payload(&ctx());
        assert_eq!(discovery_topic(&ctx()), "homeassistant/device/b1/config");
        assert_eq!(p["availability_topic"], "npu-fleet/b1/availability");
        assert_eq!(
            p["cmps"]["b1_cma_free"]["state_topic"],
            "npu-fleet/b1/status"
        );
        assert_eq!(
            p["cmps"]["b1_compact"]["command_topic"],
            "npu-fleet/b1/ha/compact"
        );
        assert_eq!(p["cmps"]["b1_check_limits_nofile"]["p"], "binary_sensor");
        let n = p["cmps"].as_object().unwrap().len();
        assert_eq!(n, 3 + 4 + CHECK_IDS.len() + 2);
        let t = &p["cmps"]["b1_soc_temp"];
        assert_eq!(t["device_class"], "temperature");
        assert_eq!(t["unit_of_measurement"], "°C");
        assert_eq!(t["state_class"], "measurement");
        assert_eq!(p["cmps"]["b1_undervoltage"]["device_class"], "problem");
        // No button for an action the gate would refuse.
        let mut c = ctx();
        c.buttons = vec![crate::model::action::ActionKind::Rescan];
        let p = discovery_payload(&c);
        assert!(p["cmps"].get("b1_compact").is_none());
        assert_eq!(p["cmps"]["b1_rescan"]["p"], "button");
    }
}
