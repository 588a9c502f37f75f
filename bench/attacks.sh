#!/usr/bin/env bash
# Counts the command-path attacks the regression tests try and how many hold. Each test below is
# one kind of attack (a replay after a flood, a never-expiring command, planted symlinks,
# concurrent edits, secrets in every input, a button flood, hostile payloads, ...); the tests
# against a real mosquitto also print how many hostile messages they sent
# (`attacks: ... tried=N held=M`). Prints the figures docs/development.md quotes.
#
#   bash bench/attacks.sh
#
# Needs mosquitto (as `cargo test` does). A kind "holds" when its test passes; an ignored test (a
# known failure) is printed as skipped and counted apart, never as held.
set -uo pipefail
cd "$(dirname "$0")/.."
tests=(
  "system mqtt::attacks::command_path_attacks_hold_against_a_real_broker"
  "system mqtt::commands::retained_commands_waiting_at_start_all_get_a_final_state"
  "system mqtt::attacks::the_agent_link_holds_a_flood_back_on_the_broker_until_each_message_is_handled"
  "system mqtt::attacks::no_planted_secret_leaves_the_board"
  "system mqtt::home_assistant::home_assistant_discovery_and_buttons"
  "system mqtt::attacks::hostile_commands_are_rejected_and_the_agent_keeps_serving"
  "system mqtt::commands::br26_burst_of_commands_does_not_freeze_the_loop"
  "system mqtt::commands::a_qos2_flood_with_session_takeovers_leaves_no_command_without_a_final_state"
  "system identity::"
  "system mqtt::commands::a_final_answer_the_ledger_could_not_record_is_kept_after_a_restart"
  "system operator::a_fix_button_where_the_config_allows_unsigned_fixes_and_its_press_fixes"
  "system capture::a_forged_old_capture_answer_costs_one_clear"
  "system capture::a_signed_fleet_capture_fetches_a_bundle_that_checks_as_the_board"
  "lib fleet::capture::tests::"
  "system attacks_fleet::invented_boards_are_bounded_in_known_boards"
  "system attacks_fleet::hostile_ids_and_huge_statuses_draw_no_fake_rows"
  "system attacks_fleet::a_never_seen_key_is_named_and_its_bundle_refused"
  "system attacks_fleet::a_junk_flood_leaves_no_answer_or_chunk_retained_past_its_window"
  "system attacks_fleet::a_replayed_older_status_is_not_shown_as_current"
  "system attacks_fleet::a_flood_of_spoofed_offline_is_answered_once_a_second"
  "lib fleet::known::tests::a_flood_of_new_boards_is_bounded_and_written_once"
  "lib fleet::rows::tests::"
  "lib fleet::watch::tests::"
  "lib daemon::sweep::tests::a_capture_s_chunks_are_cleared_once"
  "lib fleet::show::tests::"
  "lib fleet::send::tests::"
  "lib daemon::sweep::tests::a_flood_of_answers_lets_nothing_the_board_published_stay_retained"
  "lib daemon::availability::tests::"
  "lib action::fix::run::tests::a_boot_edit_waiting_for_its_reboot_refuses_and_writes_nothing"
  "fast actions::hardening::"
  "fast fuzz_gate::gate_holds_under_hostile_sequences"
  "fast fuzz_gate::config_loader_holds_under_hostile_text"
  "lib gate::tests::"
  "lib config::tests::"
  "lib secret::"
  "lib mqtt::ed25519::tests::"
  "lib action::atomic::tests::"
  "fast config_bytes::"
  "lib fleet::known::tests::a_known_boards_file_that_is_not_utf8_is_refused_and_never_written_over"
  "system attacks_config::a_sighup_while_agent_toml_is_renamed_away_keeps_the_running_config"
  "system attacks_config::a_broker_list_mixing_tls_and_plain_with_credentials_is_refused_by_the_agent"
  "system attacks_config::a_broker_list_mixing_tls_and_plain_with_credentials_is_refused_by_the_fleet_tools"
  "lib mqtt::tests::a_mixed_list_with_credentials_is_refused"
  "lib mqtt::link::tests::credentials_never_go_to_a_plain_node_of_a_list_with_tls"
  "lib provision::tests::a_mixed_broker_list_with_an_inline_password_is_refused"
  "lib sys::redact::tests::the_redaction_corpus"
  "fast capture_encodings::"
  "lib capture::encoding::tests::"
)
kinds=0 held=0 skipped=0 msgs_tried=0 msgs_held=0
log=$(mktemp)
for t in "${tests[@]}"; do
  set -- $t
  if [ "$1" = lib ]; then sel=(--lib); else sel=(--test "$1"); fi
  cargo test --quiet "${sel[@]}" "$2" -- --nocapture >"$log" 2>&1
  rc=$?
  passed=$(grep -Eo '[0-9]+ passed' "$log" | awk '{s+=$1} END {print s+0}')
  failed=$(grep -Eo '[0-9]+ failed' "$log" | awk '{s+=$1} END {print s+0}')
  ignored=$(grep -Eo '[0-9]+ ignored' "$log" | awk '{s+=$1} END {print s+0}')
  kinds=$((kinds + passed + failed))
  held=$((held + passed))
  skipped=$((skipped + ignored))
  while read -r tried h; do
    msgs_tried=$((msgs_tried + tried)); msgs_held=$((msgs_held + h))
  done < <(grep -Eo 'attacks: [a-z0-9-]+ tried=[0-9]+ held=[0-9]+' "$log" | sed -E 's/.*tried=([0-9]+) held=([0-9]+)/\1 \2/')
  # An #[ignore]d test (a known failure) ran nothing: it is skipped, not held; a selection that
  # matched no test at all is reported as such.
  if [ $rc != 0 ]; then verdict=BROKEN
  elif [ $((passed + failed)) = 0 ] && [ "$ignored" -gt 0 ]; then verdict=skipped
  elif [ $((passed + failed)) = 0 ]; then verdict="NO TEST"
  else verdict=held; fi
  printf '%-70s %s (%s passed, %s failed, %s ignored)\n' "$t" "$verdict" "$passed" "$failed" "$ignored"
done
rm -f "$log"
echo "attack tests: tried=$kinds held=$held skipped=$skipped (ignored, not tried)"
echo "hostile MQTT messages in them: tried=$msgs_tried held=$msgs_held"
