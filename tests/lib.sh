# lib.sh: sourced first by the shell tests that run a generated model (t-conv-cli, t-engine,
# t-repack): count.sh, then `ok STATUS DESC` (PASS when STATUS is 0, else FAIL) and
# `tiny_model DIR SEED [K3-MKMODEL OPTION...]` (a tiny model in DIR, or a FAIL line naming
# k3-mkmodel's error and exit 1).
. "$K3_SRC/tests/count.sh"
ok() { if [ "$1" = 0 ]; then echo "PASS: $2"; else echo "FAIL: $2"; fi; }
tiny_model() {
    _d=$1 _s=$2
    shift 2
    "$K3_BUILD/k3-mkmodel" --preset tiny --seed "$_s" --quiet "$@" "$_d" >/dev/null 2>"$K3_TMP/mkmodel.err" &&
        return 0
    echo "FAIL: k3-mkmodel --preset tiny --seed $_s $* ($(tail -c 200 "$K3_TMP/mkmodel.err"))"
    exit 1
}
