# tui-lib.sh: helpers for the tmux-driven TUI tests (tests/t-tui-*.sh source this file).
# A private tmux server (-L name, sockets under $K3_TMP) runs one window of a fixed size with
# TERM=xterm-256color; tests type with send-keys and read the screen with capture-pane,
# polling with a timeout rather than sleeping.
. "$K3_SRC/tests/lib.sh"
set -u
TMUX_TMPDIR="$K3_TMP"
export TMUX_TMPDIR
unset TMUX
nserv=0
T="tmux -L k3tui0 -f /dev/null"
# a failed check or wait shows the screen (up to its last row that is not blank)
on_fail() { screen | awk 'NF { for (; n > 0; n--) print "    |"; print "    | " $0; next } { n++ }'; }
finish() { # exit status 1 when a FAIL was printed through fail/check or a wait
    tmux_end "$T" # k3chat quit and waited for first (lib.sh)
    [ "$fails" -eq 0 ]
    exit
}
trap 'tmux_end "$T"' EXIT

# tui_start COLS ROWS ENV... -- SHELL-COMMAND : a fresh server with one window (the last one's
# programs quit and waited for, then it goes: tmux_end)
tui_start() {
    _cols=$1 _rows=$2; shift 2
    tmux_end "$T"
    # a fresh socket name: a server that is still shutting down cannot take the new session
    nserv=$((nserv + 1))
    T="tmux -L k3tui$nserv -f /dev/null"
    _envs=""
    while [ "$1" != "--" ]; do _envs="$_envs -e $1"; shift; done
    shift
    # shellcheck disable=SC2086
    $T new-session -d -x "$_cols" -y "$_rows" -e TERM=xterm-256color -e LANG=C.UTF-8 -e LC_ALL=C.UTF-8 \
        -e XDG_STATE_HOME="$K3_TMP/state" -e XDG_DATA_HOME="$K3_TMP/data" -e XDG_CONFIG_HOME="$K3_TMP/config" \
        -e HOME="$K3_TMP" $_envs "$*"
    $T set-option -g remain-on-exit on >/dev/null 2>&1
}
run_mock() { # run_mock COLS ROWS SCRIPT [ENV...]: k3chat on the mock in a fresh window
    _c=$1 _r=$2 _s=$3; shift 3
    tui_start "$_c" "$_r" K3_MOCK="$_s" "$@" -- "$K3CHAT /no/model 2>>$K3_TMP/stderr.txt; echo EXIT=\$?; sleep 60"
}
mock_chat() { # mock_chat COLS ROWS SCRIPT: SCRIPT (printf format) in $K3_TMP/mock.txt, run_mock on
    # it, then wait until the mock's status bar shows
    # shellcheck disable=SC2059
    printf "$3" >"$K3_TMP/mock.txt"
    run_mock "$1" "$2" "$K3_TMP/mock.txt"
    wait_for "mock · 3 layers" 10
}
screen() { $T capture-pane -p 2>/dev/null; }
keys() { $T send-keys "$@"; }
type_line() { $T send-keys -l "$1"; $T send-keys Enter; }
# The waits poll the screen every 0.05 s; on timeout each prints a FAIL line naming what it
# waited for and shows the screen (inside check only check's line: see lib.sh).
# wait_for TEXT [SECONDS]: until TEXT (fixed string) is on the screen
wait_for() { wait_until "'$1' on the screen" "${2:-10}" has "$1"; }
# wait_gone TEXT [SECONDS]: until TEXT is no longer on the screen
wait_gone() { wait_until "'$1' to leave the screen" "${2:-10}" hasnt "$1"; }
# wait_input_empty [SECONDS]: until the last row is the bare prompt
input_empty() { [ "$(screen | tail -n 1)" = "›" ]; }
wait_input_empty() { wait_until "an empty input line" "${1:-10}" input_empty; }
# wait_input TEXT [SECONDS]: until the last row is the prompt followed by TEXT (wait_for "› TEXT"
# also matches the message TEXT in the conversation above, which may already be on the screen)
input_is() { [ "$(screen | tail -n 1)" = "› $1" ]; }
wait_input() { wait_until "'› $1' on the input line" "${2:-10}" input_is "$1"; }
# mouse BUTTON COL ROW: an X10 mouse report (button 0 = left press, 3 = release, 64/65 = wheel
# up/down; COL and ROW 1-based), typed into the pane as the terminal would send it
mouse() {
    _mb=$(printf "\\$(printf %o $((32 + $1)))")
    _mc=$(printf "\\$(printf %o $((32 + $2)))")
    _mr=$(printf "\\$(printf %o $((32 + $3)))")
    $T send-keys -l "$(printf '\033[M')$_mb$_mc$_mr"
}
has() { screen | grep -qF -- "$1"; }
hasnt() { ! screen | grep -qF -- "$1"; }
K3CHAT="$K3_BUILD/k3chat"
