#!/bin/sh
# deps.sh: install the Debian packages k3chat needs to build, test and run.
#
# Idempotent: asks dpkg which packages are missing and installs only those.
# As root it runs apt-get itself; otherwise it prints the exact command to run.
# Usage: scripts/deps.sh [--check] [nano]
#   --check  report only, exit 1 if missing
#   nano     also what `make nano` (retraining k3-nano) needs: OpenBLAS (Debian's torch on the
#            reference BLAS is ~15x slower) and matplotlib for the plots
set -eu

PKGS="build-essential pkg-config
libncurses-dev libedit-dev libutf8proc-dev libjansson-dev libmd4c-dev
libcurl4-openssl-dev curl
libvulkan-dev glslc mesa-vulkan-drivers
python3 python3-numpy python3-torch tmux locales
clang clang-format libclang-rt-dev valgrind"

# nodejs/npm are needed only by the tokenizer cross-check; a node already on
# PATH (from any source) is good enough.
command -v node >/dev/null 2>&1 || PKGS="$PKGS nodejs"
command -v npm  >/dev/null 2>&1 || PKGS="$PKGS npm"

check=""
for a in "$@"; do
    case "$a" in
        --check) check=1 ;;
        nano) PKGS="$PKGS libopenblas0-pthread python3-matplotlib" ;;
        *) echo "deps.sh: unknown argument '$a' (expected --check or nano)" >&2; exit 2 ;;
    esac
done

missing=""
for p in $PKGS; do
    st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    case "$st" in
        *"install ok installed"*) ;;
        *) missing="$missing $p" ;;
    esac
done

[ -z "$missing" ] && exit 0

if [ -n "$check" ]; then
    echo "deps.sh: missing Debian packages:$missing" >&2
    exit 1
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "deps.sh: missing Debian packages:$missing" >&2
    echo "deps.sh: run as root:  apt-get update && apt-get install -y --no-install-recommends$missing" >&2
    exit 1
fi

echo "deps.sh: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends $missing >/dev/null
