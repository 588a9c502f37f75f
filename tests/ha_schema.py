"""Validates the agent's Home Assistant discovery payload with Home Assistant's own code.

Usage: python ha_schema.py DISCOVERY.json CASES.json

DISCOVERY.json is the device-based discovery payload the agent publishes. It goes through the
steps Home Assistant's MQTT discovery applies to a `<prefix>/device/<id>/config` message
(abbreviations expanded, the device discovery schema, shared options merged into each component,
origin info) and each component through its platform's DISCOVERY_SCHEMA (sensor,
binary_sensor, button). CASES.json is a list of {"status": <status JSON>, "expect":
{<component id>: <rendered state>}}: every value_template is rendered by Home Assistant's
template engine on each status and compared ("None" is what Home Assistant reads as unknown).
Exits 1 with the reason on the first mismatch or schema error.
"""

import asyncio
import json
import sys
import tempfile

import voluptuous as vol
from homeassistant.components.mqtt import binary_sensor, button, sensor
from homeassistant.components.mqtt import discovery as d
from homeassistant.core import HomeAssistant
from homeassistant.helpers import frame
from homeassistant.helpers.template import Template

MQTTDiscoveryPayload = d.MQTTDiscoveryPayload

PLATFORMS = {
    "sensor": sensor.DISCOVERY_SCHEMA,
    "binary_sensor": binary_sensor.DISCOVERY_SCHEMA,
    "button": button.DISCOVERY_SCHEMA,
}


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def components(payload):
    """The per-component configs Home Assistant derives from a device discovery payload."""
    dp = MQTTDiscoveryPayload(json.loads(json.dumps(payload)))
    d._replace_all_abbreviations(dp)
    try:
        d.DEVICE_DISCOVERY_SCHEMA(dp)
    except vol.Invalid as e:
        fail(f"device discovery schema: {e}")
    if not d._valid_origin_info(dp):
        fail("origin info rejected")
    out = {}
    for cid, conf in dp[d.CONF_COMPONENTS].items():
        conf = dict(conf)
        platform = conf.pop(d.CONF_PLATFORM)
        c = MQTTDiscoveryPayload(conf)
        c[d.CONF_DEVICE] = dp[d.CONF_DEVICE]
        c[d.CONF_ORIGIN] = dp.get(d.CONF_ORIGIN)
        d._merge_common_device_options(c, dp)
        if platform not in PLATFORMS:
            fail(f"{cid}: platform {platform} not checked here")
        try:
            out[cid] = (platform, PLATFORMS[platform](dict(c)))
        except vol.Invalid as e:
            fail(f"{cid} ({platform}): {e}")
    return out


async def render_all(hass, comps, cases):
    if True:
        rendered = 0
        for case in cases:
            status = case["status"]
            for cid, want in case["expect"].items():
                platform, conf = comps[cid]
                tpl = conf.get("value_template")
                if tpl is None:
                    fail(f"{cid}: no value_template")
                t = Template(tpl.template if hasattr(tpl, "template") else str(tpl), hass)
                got = str(
                    t.async_render(
                        {"value_json": status, "value": json.dumps(status)},
                        parse_result=False,
                    )
                ).strip()
                if got != want:
                    fail(f"{cid} on {case.get('name', '?')}: rendered {got!r}, want {want!r}")
                rendered += 1
        return rendered


async def main():
    payload = json.load(open(sys.argv[1]))
    cases = json.load(open(sys.argv[2]))
    with tempfile.TemporaryDirectory() as cfg:
        # Schemas build Template objects, which need a running Home Assistant core.
        hass = HomeAssistant(cfg)
        frame.async_setup(hass)
        comps = components(payload)
        for cid, (platform, conf) in comps.items():
            if platform == "sensor" and conf.get("device_class") == "data_size":
                if not conf.get("state_class"):
                    fail(f"{cid}: a numeric sensor without state_class")
        n = await render_all(hass, comps, cases)
        await hass.async_stop(force=True)
    print(f"validated {len(comps)} components; {n} templates rendered as expected")


asyncio.run(main())
