# count.sh: sourced first by every tests/t-*.sh: the script runs again with its output (stdout
# and stderr, in order) passed through, and the exit status is 1 when any line starts with
# "FAIL:" or the script itself failed, so a FAIL counts as a failure however the script is run
# (tests/run.sh also counts the lines).
if [ -z "${K3_COUNTED:-}" ]; then
    export K3_COUNTED=1
    { sh "$0" "$@" 2>&1; echo "K3_COUNTED_RC=$?"; } |
        awk '/^K3_COUNTED_RC=/ { rc = substr($0, 15) + 0; next }
             { print; fflush() }
             /^FAIL:/ { f = 1 }
             END { exit (f || rc) ? 1 : 0 }'
    exit
fi
