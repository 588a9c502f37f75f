#!/usr/bin/env python3
"""Signs an npu-agent command with an Ed25519 key and publishes it: an independent signer that
uses only python-cryptography and paho-mqtt (pip install cryptography paho-mqtt).

Prints the command's lifecycle, one line per state, and clears the retained command at the end.
Exit status: 0 successful, 1 failed, rejected or no final state within --wait, 2 usage error.
"""
import argparse
import base64
import json
import os
import sys
import threading
import time

import paho.mqtt.client as mqtt
from cryptography.hazmat.primitives.serialization import load_pem_private_key

SIGNED_FIELDS = ("cmd_id", "args", "issued_at", "expires_at")


def signed_bytes(topic_root, board, action, cmd_id, args, issued_at, expires_at):
    """The bytes the signature covers (v2): eight fields, each followed by a newline."""
    args_json = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    fields = ["npu-agent-command-v2", topic_root, board, action, cmd_id, args_json,
              str(issued_at), str(expires_at)]
    return "".join(f + "\n" for f in fields).encode("utf-8")


def one_byte_changed(text):
    """The same string with its last character changed (test aid for --tamper)."""
    return text[:-1] + ("1" if text[-1] == "0" else "0")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("action", help="compact, set_cma, reboot, rescan or release_npu")
    p.add_argument("args", nargs="*", metavar="KEY=VALUE")
    p.add_argument("--board", required=True, help="board id, or all")
    p.add_argument("--key", required=True, help="Ed25519 private key, PKCS#8 PEM")
    p.add_argument("--broker", default="127.0.0.1:1883", help="host:port")
    p.add_argument("--topic-root", default="npu-fleet")
    p.add_argument("--lifetime", type=int, default=120, help="seconds the command stays valid")
    p.add_argument("--wait", type=float, default=30, help="seconds to wait for the final state")
    p.add_argument("--cafile", help="CA of the broker (TLS)")
    p.add_argument("--certfile", help="client certificate (mTLS)")
    p.add_argument("--keyfile", help="client key (mTLS)")
    p.add_argument("--tamper", choices=SIGNED_FIELDS, help="test only: change one byte of this field after signing")
    a = p.parse_args()
    args = {}
    for kv in a.args:
        k, sep, v = kv.partition("=")
        if not sep or not k:
            p.error(f"{kv!r}: expected KEY=VALUE")
        args[k] = {"true": True, "false": False}.get(v, v)
    with open(a.key, "rb") as f:
        key = load_pem_private_key(f.read(), password=None)

    cmd_id = f"py-{int(time.time())}-{os.urandom(3).hex()}"
    issued_at = int(time.time())
    msg = {"status": "init", "board": a.board, "args": args,
           "issued_at": issued_at, "expires_at": issued_at + a.lifetime}
    signature = key.sign(signed_bytes(a.topic_root, a.board, a.action, cmd_id, args, issued_at,
                                      msg["expires_at"]))
    msg["signature"] = base64.b64encode(signature).decode("ascii")
    if a.tamper == "cmd_id":
        cmd_id = one_byte_changed(cmd_id)
    elif a.tamper == "args":
        first = sorted(args)[0]
        args[first] = one_byte_changed(str(args[first]))
    elif a.tamper in ("issued_at", "expires_at"):
        msg[a.tamper] = int(one_byte_changed(str(msg[a.tamper])))

    topic = f"{a.topic_root}/{a.board}/cmd/{a.action}/{cmd_id}"
    reply = f"{a.topic_root}/+/cmd/{a.action}/{cmd_id}" if a.board == "all" else topic
    done = threading.Event()
    outcome = {"code": 1}

    def on_connect(client, userdata, flags, reason_code, properties):
        client.subscribe(reply, qos=1)
        client.publish(topic, json.dumps(msg), qos=1, retain=True)
        print(f"{a.board} {cmd_id} init", flush=True)

    def on_message(client, userdata, m):
        if not m.payload:
            return
        state = json.loads(m.payload)
        if state.get("status") == "init":
            return
        board = m.topic.split("/")[-4]
        line = f"{board} {cmd_id} {state['status']}"
        if "reason" in state:
            line += f": {state['reason']}"
        print(line, flush=True)
        if state["status"] in ("successful", "failed", "rejected"):
            outcome["code"] = 0 if state["status"] == "successful" else 1
            done.set()

    host, _, port = a.broker.rpartition(":")
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"npu-py-{os.urandom(4).hex()}")
    if a.cafile or a.certfile:
        client.tls_set(ca_certs=a.cafile, certfile=a.certfile, keyfile=a.keyfile)
    client.on_connect = on_connect
    client.on_message = on_message
    client.connect(host, int(port))
    client.loop_start()
    if not done.wait(a.wait):
        print(f"no final state within {a.wait:g} s", file=sys.stderr)
    client.publish(topic, b"", qos=1, retain=True).wait_for_publish(5)
    client.disconnect()
    client.loop_stop()
    return outcome["code"]


if __name__ == "__main__":
    sys.exit(main())
