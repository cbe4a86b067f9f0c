#!/bin/sh
# demo.sh BUILD: open k3chat on the demo model (a generated tiny checkpoint until k3-nano lands).
set -eu
b=${1:-build}
m="$b/models/demo-tiny"
if [ ! -f "$m/config.json" ]; then
    "$b/k3-mkmodel" --preset tiny --seed 1 "$m"
fi
exec "$b/k3chat" "$m"
