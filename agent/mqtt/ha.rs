//! Home Assistant on the link: subscribe to its birth message and the board's button topics,
//! publish the discovery message that `crate::report::ha` assembles, and tell what an incoming
//! Home Assistant message means.

use crate::mqtt::command::Action;
use crate::mqtt::link::MqttClient as AsyncClient;
use crate::report::ha::{button_topic, discovery_payload, discovery_topic, HaContext, PRESS};
use rumqttc::v5::mqttbytes::QoS;

/// The filters Home Assistant needs: its birth message and the board's buttons (the daemon
/// subscribes them with its command filters, in one SUBSCRIBE).
pub fn filters(ctx: HaContext<'_>) -> [String; 2] {
    [
        format!("{}/status", ctx.prefix),
        format!("{}/{}/ha/+", ctx.topic_root, ctx.board),
    ]
}

/// On every connect, once the board is diagnosed: publish discovery.
pub fn on_connect(ctx: HaContext<'_>, client: &AsyncClient) {
    publish_discovery(ctx, client);
}

/// Publishes the discovery message (retained). The daemon rate-limits re-sends.
pub fn publish_discovery(ctx: HaContext<'_>, client: &AsyncClient) {
    let payload = discovery_payload(&ctx).to_string();
    let _ = client.try_publish(
        discovery_topic(&ctx),
        QoS::AtLeastOnce,
        true,
        payload.into_bytes(),
    );
}

/// What an incoming message meant for the Home Assistant side.
#[derive(Debug, Clone, PartialEq)]
pub enum HaMessage {
    /// Not a Home Assistant topic.
    NotMine,
    /// Consumed (e.g. Home Assistant came online and discovery was re-sent).
    Handled,
    /// Home Assistant announced itself: discovery is due (the daemon rate-limits it).
    HomeAssistantOnline,
    /// A button press, for the gate to admit or refuse.
    Press(Action),
}

/// Handles a message on a Home Assistant topic.
pub fn on_message(ctx: HaContext<'_>, topic: &str, payload: &[u8]) -> HaMessage {
    if topic == format!("{}/status", ctx.prefix) {
        if payload == b"online" {
            return HaMessage::HomeAssistantOnline;
        }
        return HaMessage::Handled;
    }
    // Only the payload discovery announced (`payload_press`) is a press; anything else
    // published on a button topic is consumed and ignored.
    let press = payload == PRESS.as_bytes();
    let pressed = crate::model::action::ActionKind::ALL
        .into_iter()
        .find(|k| topic == button_topic(&ctx, *k));
    if let Some(action) = pressed.and_then(|k| k.button_press()) {
        return match press {
            true => HaMessage::Press(action),
            false => HaMessage::Handled,
        };
    }
    if topic.starts_with(&format!("{}/{}/ha/", ctx.topic_root, ctx.board)) {
        return HaMessage::Handled;
    }
    HaMessage::NotMine
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::ha::tests::ctx;

    #[test]
    fn messages() {
        assert_eq!(
            on_message(ctx(), "npu-fleet/b1/ha/compact", b"PRESS"),
            HaMessage::Press(Action::Compact { drop_caches: false })
        );
        for junk in [&b""[..], b"press", b"PRESS\n", b"{\"a\":1}", b"\xff"] {
            assert_eq!(
                on_message(ctx(), "npu-fleet/b1/ha/rescan", junk),
                HaMessage::Handled,
                "{junk:?}"
            );
        }
        assert_eq!(
            on_message(ctx(), "npu-fleet/b1/ha/rescan", b"PRESS"),
            HaMessage::Press(Action::Rescan)
        );
        // Every firing finding's planned fix.
        assert_eq!(
            on_message(ctx(), "npu-fleet/b1/ha/fix", b"PRESS"),
            HaMessage::Press(Action::Fix {
                checks: Vec::new(),
                dry_run: false
            })
        );
        assert_eq!(
            on_message(ctx(), "npu-fleet/b1/ha/fix", b"press"),
            HaMessage::Handled
        );
        assert_eq!(
            on_message(ctx(), "homeassistant/status", b"online"),
            HaMessage::HomeAssistantOnline
        );
        assert_eq!(
            on_message(ctx(), "npu-fleet/b1/ha/reboot", b"PRESS"),
            HaMessage::Handled
        );
        assert_eq!(
            on_message(ctx(), "npu-fleet/b1/cmd/x/y", b"{}"),
            HaMessage::NotMine
        );
    }
}
