#!/bin/sh
# demo.sh BUILD: open k3chat on k3-nano (models/k3-nano, committed), the small trained model with
# the Kimi K3 architecture. Without it (a partial checkout), a generated random-weight tiny
# checkpoint shows the machinery instead, with a notice.
set -eu
b=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
m="$here/models/k3-nano"
if [ ! -f "$m/config.json" ]; then
    m="$b/models/demo-tiny"
    echo "demo.sh: models/k3-nano is missing; using a random-weight tiny checkpoint ($m)" >&2
    [ -f "$m/config.json" ] || "$b/k3-mkmodel" --preset tiny --seed 1 "$m"
fi
exec "$b/k3chat" "$m"
