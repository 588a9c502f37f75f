//! Home Assistant discovery and buttons on the link.

use super::*;

#[test]
fn home_assistant_discovery_and_buttons() {
    let Some((broker, board)) = setup("b1", "[home_assistant]\nenabled = true\n") else {
        return;
    };
    board.write("/proc/sys/vm/compact_memory", "0\n");
    let c = Client::connect(
        broker.port,
        &[
            "homeassistant/device/b1/config",
            "npu-fleet/b1/status",
            "npu-fleet/b1/cmd/#",
        ],
    );
    let _agent = Agent::start(&board);
    let d = c
        .wait_for(T, "discovery", |m| {
            m.topic == "homeassistant/device/b1/config"
        })
        .json();
    assert_eq!(d["availability_topic"], "npu-fleet/b1/availability");
    assert_eq!(
        d["cmps"]["b1_cma_free"]["state_topic"],
        "npu-fleet/b1/status"
    );
    // A missing metric reads as unknown ('None'), never as 0 B.
    let tpl = d["cmps"]["b1_cma_free"]["value_template"].as_str().unwrap();
    assert!(
        tpl.contains("'cma_free_bytes'") && tpl.contains("'None'") && !tpl.contains("default(0)"),
        "{tpl}"
    );
    assert_eq!(d["cmps"]["b1_cma_free"]["state_class"], "measurement");
    assert_eq!(
        d["cmps"]["b1_compact"]["command_topic"],
        "npu-fleet/b1/ha/compact"
    );
    assert_eq!(d["dev"]["mdl"], "Xunlong Orange Pi 5 Plus");
    // Home Assistant restarts and announces itself: discovery is sent again (once the 5 s since
    // the first one have passed: announced every 250 ms until it is), but a flood of
    // announcements gets one re-send per 5 s, not one each.
    let announced_from = Instant::now();
    c.drain();
    loop {
        c.publish("homeassistant/status", b"online", false);
        let resent = collect_for(&c, Duration::from_millis(250), |ms| {
            ms.iter()
                .any(|m| m.topic == "homeassistant/device/b1/config")
        });
        if resent
            .iter()
            .any(|m| m.topic == "homeassistant/device/b1/config")
        {
            break;
        }
        assert!(
            announced_from.elapsed() < Duration::from_secs(5) + T,
            "discovery not re-sent after Home Assistant announced itself"
        );
    }
    for _ in 0..500 {
        c.publish("homeassistant/status", b"online", false);
    }
    // Any further re-send would be published before the marker's answer.
    let resent = until_marker(&c, "b1", "ha-flood-marker")
        .iter()
        .filter(|m| m.topic == "homeassistant/device/b1/config")
        .count();
    assert_eq!(resent, 0, "500 announcements in 2 s: one discovery only");
    // The compaction button runs compaction (the knob file of this tree gets 1)...
    board.write("/proc/sys/vm/compact_memory", "0\n");
    for _ in 0..300 {
        c.publish("npu-fleet/b1/ha/compact", b"PRESS", false);
    }
    let t0 = Instant::now();
    while board
        .read("/proc/sys/vm/compact_memory")
        .unwrap_or_default()
        .trim()
        != "1"
    {
        assert!(t0.elapsed() < T, "the compact button did nothing");
        std::thread::sleep(Duration::from_millis(50));
    }
    // ... once: the presses pass the same rate limit as unsigned commands (30 s). The marker is
    // an unsigned rescan (the first of this test, so admitted): it queues behind any compaction
    // a press got admitted, and the executor runs one job at a time in that order, so its
    // answer comes after such a compaction has landed.
    board.write("/proc/sys/vm/compact_memory", "0\n");
    let marker = "npu-fleet/b1/cmd/rescan/ha-press-marker";
    c.publish(
        marker,
        &init_payload(
            "b1",
            "rescan",
            "ha-press-marker",
            json!({}),
            now_s(),
            60,
            None,
        ),
        false,
    );
    lifecycle(&c, marker, "successful");
    assert_eq!(
        board.read("/proc/sys/vm/compact_memory").unwrap().trim(),
        "0",
        "300 presses ran more than one compaction"
    );
    // The board refuses reboot unsigned: no button is offered for it, and a press does nothing.
    assert!(d["cmps"].get("b1_reboot").is_none());
    eprintln!("attacks: home-assistant-flood tried=800 held=800");
}
