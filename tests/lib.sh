# lib.sh: the one library of the shell tests (tests/t-*.sh source it, directly or through
# tui-lib.sh). It sources count.sh first (a FAIL line fails the script however it is run), then:
#   pass DESC / fail DESC      a PASS or FAIL line (fail also counts it in $fails)
#   ok STATUS DESC             PASS when STATUS is 0, else FAIL
#   check DESC CMD...          PASS when CMD succeeds, else FAIL and the hook on_fail (tui-lib.sh
#                              shows the screen there); `check STATUS DESC...` (STATUS a whole
#                              number) is the same as ok
#   finish                     exit 1 when a FAIL was printed through these functions
#   signum NAME                a signal's number (an exit status 128 + it)
#   wait_until DESC SECONDS CMD...  poll CMD (every 0.05 s for the first second, then every 0.1 s:
#                              a poll of a tmux screen costs ~4 ms of CPU that the program under
#                              test, on a busy machine, waits for) until it succeeds; on timeout a FAIL
#                              line says what was waited for and how long (inside check, only
#                              check's FAIL line is printed: the wait's reason goes to stderr)
#   settled SECONDS CMD...     print CMD's output once two reads 0.25 s apart agree and are not
#                              empty (a figure that is still changing is never read); on timeout
#                              a FAIL line (stderr, so that $(settled ...) keeps it visible)
#   tiny_model DIR SEED [K3-MKMODEL OPTION...]  a tiny model in DIR, or a FAIL line naming
#                              k3-mkmodel's error and exit 1
#   tmux_end TMUX              the tmux server TMUX (a command: "tmux -L NAME -f /dev/null") goes,
#                              once the programs in its panes have ended (SIGTERM, waited for),
#                              and its panes' processes are waited for
# Time limits are multiplied by $slow (3 in a sanitizer tree, else 1): a limit only catches a
# hang, so a slow tree must not turn into a failure. Library variables start with _ (tests own
# the other names).
. "$K3_SRC/tests/count.sh"
fails=0
_in_check=0
case "${K3_BUILD:-}" in *asan*) slow=3 ;; *) slow=1 ;; esac
on_fail() { :; }
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { if [ "$1" = 0 ]; then pass "$2"; else fail "$2"; fi; }
check() {
    case "$1" in
        '' | *[!0-9]*) ;;
        *) # check STATUS DESC...
            _st=$1; shift
            if [ "$_st" -eq 0 ]; then pass "$*"; else fail "$*"; fi
            return 0 ;;
    esac
    _desc=$1; shift
    _in_check=$((_in_check + 1))
    if "$@"; then
        _in_check=$((_in_check - 1)); pass "$_desc"
    else
        _in_check=$((_in_check - 1)); fail "$_desc"; on_fail
    fi
}
finish() { [ "$fails" -eq 0 ]; exit; }
signum() { # signum NAME: the signal's number (HUP INT QUIT ABRT KILL SEGV PIPE TERM; dash's kill -l has no names)
    case "$1" in HUP) echo 1 ;; INT) echo 2 ;; QUIT) echo 3 ;; ABRT) echo 6 ;; KILL) echo 9 ;; SEGV) echo 11 ;; PIPE) echo 13 ;; TERM) echo 15 ;;
        *) echo "lib: signum $1?" >&2; echo 0 ;; esac
}
# timed_out WHAT: a wait ran out of time: a FAIL line (or, inside check, the reason on stderr)
timed_out() {
    if [ "$_in_check" -gt 0 ]; then
        echo "lib: $*" >&2
    else
        fail "$*"; on_fail
    fi
    return 1
}
# wait_until WHAT SECONDS CMD...: CMD until it succeeds, for at least 15 s (x3 under ASan): a wait
# costs nothing when the condition holds, and a shorter limit failed on a loaded 2-core machine
wait_until() {
    _wd=$1 _ws=$2; shift 2
    [ "$_ws" -ge 15 ] || _ws=15
    _wl=$((_ws * 20 * slow)) _wi=0 # in steps of 0.05 s
    while [ $_wi -lt $_wl ]; do
        "$@" && return 0
        if [ $_wi -lt 20 ]; then sleep 0.05; _wi=$((_wi + 1)); else sleep 0.1; _wi=$((_wi + 2)); fi
    done
    timed_out "waited $_ws s (x$slow) for $_wd"
}
settled() {
    _ss=$1; shift
    _sl=$((_ss * 4 * slow)) _si=0 _sp=""
    while [ $_si -lt $_sl ]; do
        _sv=$("$@")
        [ -n "$_sv" ] && [ "$_sv" = "$_sp" ] && { printf '%s\n' "$_sv"; return 0; }
        _sp=$_sv
        sleep 0.25; _si=$((_si + 1))
    done
    echo "FAIL: waited $_ss s (x$slow) for a settled value of: $* (last read '$_sp')" >&2
    fails=$((fails + 1))
    return 1
}
tiny_model() {
    _d=$1 _s=$2
    shift 2
    "$K3_BUILD/k3-mkmodel" --preset tiny --seed "$_s" --quiet "$@" "$_d" >/dev/null 2>"$K3_TMP/mkmodel.err" &&
        return 0
    echo "FAIL: k3-mkmodel --preset tiny --seed $_s $* ($(tail -c 200 "$K3_TMP/mkmodel.err"))"
    exit 1
}
# tmux_end TMUX: the programs in the panes of the tmux server TMUX (each process in a pane's tree
# but its shells and its closing sleep) get SIGTERM and are waited for, 30 s (x$slow) at most;
# then kill-server, and the panes' processes (the shells and sleeps too, which the hang-up ends)
# are waited for. What does not end in time is a FAIL line naming it. Killing the server under
# a running k3chat hung it up in the middle of what it did: a turn or a load that takes seconds
# to stop outlived its test, and an ASan k3chat hung up inside LeakSanitizer's exit check spun
# at 100 % for good (the hang-up's SIGCONT to its orphaned process group cancelled the SIGSTOP
# its tracer waited for). k3chat takes SIGTERM as a quit (128 + 15 after the usual end).
tmux_end() {
    _ep=$($1 list-panes -a -F '#{pane_pid}' 2>/dev/null)
    if [ -n "$_ep" ]; then
        _el=$(_pane_procs 0 $_ep)
        for _p in $(echo "$_el" | awk '{ print $1 }'); do kill -TERM "$_p" 2>/dev/null; done
        # a stopped one (Ctrl-Z in a test) takes the signal once continued
        for _p in $(echo "$_el" | awk '$2 ~ /^T/ { print $1 }'); do kill -CONT "$_p" 2>/dev/null; done
        [ -n "$_el" ] && ! wait_until "the programs in the panes to end after SIGTERM" 30 _pane_none 0 $_ep &&
            echo "    still running: $(_pane_procs 0 $_ep | tr '\n' ' ')"
        _el=$(_pane_procs 1 $_ep | awk '{ print $1 }')
    fi
    $1 kill-server 2>/dev/null
    [ -n "$_ep" ] && [ -n "$_el" ] && ! wait_until "the panes' processes to end with the server" 10 _gone $_el &&
        echo "    still running: $(ps -o pid=,stat=,args= -p "$(echo $_el | tr ' ' ,)" | tr '\n' ' ')"
    return 0
}
# _pane_procs ALL PID...: "pid stat comm" of each live process in the trees under the PIDs (the
# PIDs included), with ALL 0 but the shells and sleep
_pane_procs() {
    _pa=$1; shift
    ps -e -o pid=,ppid=,stat=,comm= | awk -v roots="$*" -v all="$_pa" '
        BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) t[r[i]] = 1 }
        { pid[NR] = $1; pp[NR] = $2; st[NR] = $3; cm[NR] = $4 }
        END {
            do { more = 0; for (i = 1; i <= NR; i++) if (!(pid[i] in t) && (pp[i] in t)) { t[pid[i]] = 1; more = 1 } } while (more)
            for (i = 1; i <= NR; i++)
                if ((pid[i] in t) && st[i] !~ /^Z/ && (all || cm[i] !~ /^(sh|dash|bash|sleep)$/)) print pid[i], st[i], cm[i]
        }'
}
_pane_none() { [ -z "$(_pane_procs "$@")" ]; }
_gone() { # _gone PID...: none of them is alive (a zombie left to its parent counts as gone)
    for _p in "$@"; do
        ps -o stat= -p "$_p" 2>/dev/null | grep -qv '^Z' && return 1
    done
    return 0
}
