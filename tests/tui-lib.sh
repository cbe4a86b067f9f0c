# tui-lib.sh: helpers for the tmux-driven TUI tests (tests/t-tui-*.sh source this file).
# A private tmux server (-L name, sockets under $K3_TMP) runs one window of a fixed size with
# TERM=xterm-256color; tests type with send-keys and read the screen with capture-pane,
# polling with a timeout rather than sleeping.
. "$K3_SRC/tests/count.sh"
set -u
TMUX_TMPDIR="$K3_TMP"
export TMUX_TMPDIR
unset TMUX
nserv=0
T="tmux -L k3tui0 -f /dev/null"
fails=0
# ASan builds are slower
case "$K3_BUILD" in *asan*) slow=3 ;; *) slow=1 ;; esac

pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
check() { # check DESC CMD... (library variables start with _: tests own the other names)
    _desc=$1; shift
    if "$@"; then pass "$_desc"; else fail "$_desc"; screen | sed 's/^/    | /'; fi
}
finish() { # exit status 1 when a FAIL was printed through fail/check
    $T kill-server 2>/dev/null
    [ "$fails" -eq 0 ]
    exit
}
trap '$T kill-server 2>/dev/null' EXIT

# tui_start COLS ROWS ENV... -- SHELL-COMMAND : a fresh server with one window
tui_start() {
    _cols=$1 _rows=$2; shift 2
    $T kill-server 2>/dev/null
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
# wait_for TEXT [SECONDS]: poll the screen until TEXT (fixed string) shows up
wait_for() {
    _lim=$(( ${2:-10} * 20 * slow )); _i=0
    while [ $_i -lt $_lim ]; do
        screen | grep -qF -- "$1" && return 0
        sleep 0.05; _i=$((_i + 1))
    done
    echo "tui-lib: wait_for '$1': not on the screen after ${2:-10} s (x$slow)" >&2
    return 1
}
# wait_gone TEXT [SECONDS]
wait_gone() {
    _lim=$(( ${2:-10} * 20 * slow )); _i=0
    while [ $_i -lt $_lim ]; do
        screen | grep -qF -- "$1" || return 0
        sleep 0.05; _i=$((_i + 1))
    done
    echo "tui-lib: wait_gone '$1': still on the screen after ${2:-10} s (x$slow)" >&2
    return 1
}
# wait_input_empty [SECONDS]: the last row is the bare prompt
wait_input_empty() {
    _lim=$(( ${1:-10} * 20 * slow )); _i=0
    while [ $_i -lt $_lim ]; do
        [ "$(screen | tail -n 1)" = "›" ] && return 0
        sleep 0.05; _i=$((_i + 1))
    done
    echo "tui-lib: wait_input_empty: the input line is not empty after ${1:-10} s (x$slow)" >&2
    return 1
}
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
