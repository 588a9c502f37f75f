# Shell helpers for a virtual board's commands (sourced by /init before /etc/vboard/run.sh).
# Everything the harness reads is a line starting with VBOARD- on the serial console.

# vb_section NAME CMD...: runs CMD with its output between "VBOARD-BEGIN NAME" and
# "VBOARD-END NAME rc=N" (stderr goes to the console outside the section).
vb_section() {
  _n=$1; shift
  echo "VBOARD-BEGIN $_n"
  "$@"
  _rc=$?
  echo
  echo "VBOARD-END $_n rc=$_rc"
  return $_rc
}

# vb_mark TEXT: a line the harness can wait for.
vb_mark() { echo "VBOARD-MARK $*"; }

# vb_mem COMM: "VBOARD-MEM comm=COMM pid=P rss_kb=N hwm_kb=N anon_huge_kb=N threads=N
# cpu_ticks=N ctxsw=N rss_anon_kb=N rss_file_kb=N" for every process named COMM: VmRSS, VmHWM,
# transparent huge pages mapped
# (AnonHugePages summed over smaps), live threads, utime+stime in clock ticks (all threads, the
# exited ones included), and the voluntary context switches of the main thread (for the agent:
# the runtime thread, so each one is a wake-up after it went to sleep; preemptions by the
# scheduler, the involuntary ones, are not counted), and VmRSS's anonymous and file-backed parts
# (RssAnon, RssFile).
vb_mem() {
  for _s in /proc/[0-9]*/status; do
    _c=$(awk '/^Name:/ {print $2; exit}' "$_s" 2>/dev/null)
    [ "$_c" = "$1" ] || continue
    _p=${_s#/proc/}; _p=${_p%/status}
    _ah=$(awk '/^AnonHugePages:/ {s += $2} END {print s + 0}' "/proc/$_p/smaps" 2>/dev/null)
    _th=0; for _t in /proc/"$_p"/task/*; do [ -e "$_t" ] && _th=$((_th + 1)); done
    _cpu=$(awk '{print $14 + $15}' "/proc/$_p/stat" 2>/dev/null)
    _cs=$(awk '/^voluntary_ctxt_switches:/ {print $2; exit}' "/proc/$_p/task/$_p/status" 2>/dev/null)
    echo "VBOARD-MEM comm=$1 pid=$_p rss_kb=$(awk '/^VmRSS:/ {print $2}' "$_s") hwm_kb=$(awk '/^VmHWM:/ {print $2}' "$_s") anon_huge_kb=${_ah:-0} threads=${_th:-0} cpu_ticks=${_cpu:-0} ctxsw=${_cs:-0} rss_anon_kb=$(awk '/^RssAnon:/ {print $2}' "$_s") rss_file_kb=$(awk '/^RssFile:/ {print $2}' "$_s")"
  done
}

# vb_mem_every SECS COMM: vb_mem COMM every SECS seconds, until the boot ends (the harness ends a
# boot that runs this by a reboot from inside, or by stopping qemu).
vb_mem_every() { while :; do vb_mem "$2"; sleep "$1"; done; }

# vb_agent [ARGS...]: `npu-agent run ARGS` in the background (config from /etc/npu-agent/), its
# output on the console as "AGENT: ..." lines, and "AGENT: VBOARD-MARK agent-exit rc=N" if it
# ever stops. Prints "VBOARD-MARK agent-started".
vb_agent() {
  { npu-agent run "$@" 2>&1; echo "VBOARD-MARK agent-exit rc=$?"; } | while IFS= read -r _l; do echo "AGENT: $_l"; done &
  vb_mark agent-started
}

# vb_net_up: eth0 on qemu's user network; the host broker is at 10.0.2.100:1883 (a guestfwd to
# 127.0.0.1 on the host; restrict=on, so nothing else is reachable).
vb_net_up() {
  ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 || vb_fail "network setup"
}

# vb_reboot: what a board's `reboot` does; the kernel says "reboot: Restarting system", qemu
# (-no-reboot) exits, and the harness boots the board again from its boot files.
vb_reboot() { echo "VBOARD-REBOOT"; sync; reboot -f; sleep 60; }

vb_poweroff() { sync; poweroff -f; sleep 60; }

vb_fail() { echo "VBOARD-FAIL $*"; vb_poweroff; }
