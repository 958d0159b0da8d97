# shellcheck shell=sh
# hold_port.sh - sourced by test scripts (sh or bash) that start ranks on a port of their own.
# hold_ports N: sets HELD_PORTS to N free TCP ports, separated by spaces, held for this test
# until the shell exits (tests/hold_port.py says why a port found and released at once is
# not enough). Uses file descriptor 9; call it once per script. Returns 1 when it fails.
# The holder is a background job of the shell: wait for pids, never a bare `wait`.
hold_ports() {
    _hp_fifo=$(mktemp -u "${TMPDIR:-/tmp}/ddp-ports-XXXXXX") && mkfifo "$_hp_fifo" || return 1
    /usr/bin/python3 "${DDP_SRC:?}/tests/hold_port.py" "$1" >"$_hp_fifo" &
    exec 9<"$_hp_fifo"
    rm -f "$_hp_fifo"
    HELD_PORTS=
    _hp_n=0
    while [ "$_hp_n" -lt "$1" ] && read -r _hp_p <&9; do
        HELD_PORTS="${HELD_PORTS:+$HELD_PORTS }$_hp_p"
        _hp_n=$((_hp_n + 1))
    done
    [ "$_hp_n" = "$1" ]
}
