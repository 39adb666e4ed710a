#!/bin/sh
# Wire compatibility with stock hollywood v1.0.5: a stock process and one on
# the patched copy (holding the stock peer, keepalives every 100 ms) echo
# each other's messages, two rounds with a pause between. Needs the module
# proxy for github.com/anthdm/hollywood v1.0.5 the first time.
# Run from anywhere: third_party/hollywood/remote/testdata/stockcompat/run.sh
set -eu
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd stock && go build -o "$tmp/stock" .)
(cd ours && go build -o "$tmp/ours" .)
"$tmp/stock" 127.0.0.1:47101 127.0.0.1:47102 >"$tmp/stock.log" 2>&1 &
stock=$!
"$tmp/ours" 127.0.0.1:47102 127.0.0.1:47101 >"$tmp/ours.log" 2>&1 || { cat "$tmp/ours.log"; exit 1; }
wait $stock || { cat "$tmp/stock.log"; exit 1; }
grep -h OK "$tmp/stock.log" "$tmp/ours.log"
