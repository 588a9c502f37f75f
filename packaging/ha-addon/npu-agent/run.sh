#!/bin/sh
# The add-on's entry point: maps the add-on's options (/data/options.json, written by the
# Supervisor) to the agent's NPU_AGENT_* variables, one line per option, and runs the agent:
#   run.sh [npu-agent arguments]   (default: run)
# The password and the trusted keys become files under /data (mode 0600 and 0644): the agent
# takes secrets by reference only. ADDON_OPTIONS and ADDON_DATA replace /data/options.json and
# /data (tests/fast/ha_addon.rs). Needs jq.
set -eu
options=${ADDON_OPTIONS:-/data/options.json}
data=${ADDON_DATA:-/data}
[ -r "$options" ] || { echo "run.sh: $options is missing" >&2; exit 1; }

# One option as text (a list as a JSON array, which is also a TOML array); empty when unset.
opt() {
  jq -r --arg k "$1" '.[$k] | if . == null then "" elif type == "array" then tojson else tostring end' "$options"
}
# Exports NAME=value when the option has a value.
map() {
  value=$(opt "$2")
  if [ -n "$value" ]; then export "$1=$value"; fi
}

map NPU_AGENT_MQTT_URL mqtt_url
map NPU_AGENT_MQTT_USERNAME mqtt_username
map NPU_AGENT_MQTT_TOPIC_ROOT topic_root
map NPU_AGENT_BOARD_ID board_id
map NPU_AGENT_REPORT_INTERVAL_S report_interval_s
map NPU_AGENT_HOME_ASSISTANT_ENABLED home_assistant_discovery
map NPU_AGENT_HOME_ASSISTANT_DISCOVERY_PREFIX discovery_prefix
map NPU_AGENT_SECURITY_ALLOW_UNSIGNED allow_unsigned
map NPU_AGENT_LOG_LEVEL log_level

# mqtt_password: a file only the agent reads.
password=$(opt mqtt_password)
if [ -n "$password" ]; then
  (umask 077 && printf '%s' "$password" > "$data/mqtt_password.tmp")
  mv "$data/mqtt_password.tmp" "$data/mqtt_password"
  export NPU_AGENT_MQTT_PASSWORD_FILE="$data/mqtt_password"
fi
unset password

# trusted_keys: each public key line (the `keygen` .pub text) as its own file.
rm -rf "$data/trusted_keys" && mkdir -p "$data/trusted_keys"
paths="" i=0
count=$(jq -r '.trusted_keys // [] | length' "$options")
while [ "$i" -lt "$count" ]; do
  key="$data/trusted_keys/key-$i.pub"
  jq -r --argjson i "$i" '.trusted_keys[$i]' "$options" > "$key"
  paths="$paths${paths:+,}$(jq -n --arg p "$key" '$p')"
  i=$((i + 1))
done
if [ "$count" -gt 0 ]; then export NPU_AGENT_SECURITY_TRUSTED_KEYS="[$paths]"; fi

# The agent's state (identity key, command ledger) persists in the add-on's /data.
mkdir -p "$data/state"
export NPU_AGENT_STATE_DIR="$data/state"

[ $# -gt 0 ] || set -- run
exec npu-agent "$@"
