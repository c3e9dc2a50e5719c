#!/usr/bin/env bash
# test_cli_set.sh LCT LCTD DATA_DIR — the lct CLI over an endpoint set of three lctd: keys placed, ls and stats over all, one dead, one removed.
set -u
lct=$1 lctd=$2 data=$3
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; cat "$tmp"/lctd*.log; exit 1; }
. "$(dirname "$0")/cli_lib.sh"

eps=()
for i in 0 1 2; do
  eps[i]="ipc://$tmp/lctd$i.sock"
  "$lctd" --backend cpu --listen "${eps[i]}" --memory 64M --log-level warn 2>"$tmp/lctd$i.log" &
  pids[i]=$!
done
all="${eps[0]},${eps[1]},${eps[2]}"
for i in 0 1 2; do
  for _ in $(seq 100); do "$lct" --endpoint "${eps[i]}" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
"$lct" --endpoints "$all" ping >"$tmp/ping" || fail "ping over the set"
[ "$(grep -c "backend cpu" "$tmp/ping")" -eq 3 ] || fail "ping over the set said: $(cat "$tmp/ping")"

# 24 keys through the set (the flag, then the environment): each lctd holds the ones placed on it.
w=$data/A_s100_w.bf16.bin
for k in $(seq -w 0 11); do "$lct" --endpoints "$all" put "set/k$k" "$w" >/dev/null || fail "put set/k$k"; done
export LCT_ENDPOINTS=$all
for k in $(seq -w 12 23); do "$lct" put "set/k$k" "$w" >/dev/null || fail "put set/k$k (LCT_ENDPOINTS)"; done
total=0
for i in 0 1 2; do
  "$lct" --endpoint "${eps[i]}" ls set/ | awk '{print $NF}' >"$tmp/on$i" || fail "ls on endpoint $i alone"
  n=$(wc -l <"$tmp/on$i")
  [ "$n" -gt 0 ] || fail "endpoint $i holds none of 24 keys"
  total=$((total + n))
done
[ "$total" -eq 24 ] || fail "the endpoints hold $total keys, not 24"
# The list's order does not change where a key lives.
"$lct" --endpoints "${eps[2]}, ${eps[0]} ,${eps[1]}" get "$(head -1 "$tmp/on1")" "$tmp/x.bin" >/dev/null ||
  fail "get through the set listed in another order"
cmp -s "$w" "$tmp/x.bin" || fail "round trip through the set differs"

# ls merges the endpoints in key order; --limit over the whole set; stats adds them up.
"$lct" ls set/ | awk '{print $NF}' >"$tmp/ls"
seq -w 0 23 | sed 's|^|set/k|' | cmp -s - "$tmp/ls" || fail "ls over the set: $(cat "$tmp/ls")"
[ "$("$lct" ls set/ --limit 5 | wc -l)" -eq 5 ] || fail "ls --limit over the set"
"$lct" stats >"$tmp/stats" || fail "stats over the set"
grep -q "^tensors: *24$" "$tmp/stats" || fail "stats total: $(cat "$tmp/stats")"
grep -q "^all 3 endpoints:$" "$tmp/stats" || fail "stats header: $(cat "$tmp/stats")"
for i in 0 1 2; do
  grep -q "^${eps[i]}: $(wc -l <"$tmp/on$i") tensors, " "$tmp/stats" || fail "stats line of endpoint $i: $(cat "$tmp/stats")"
done
"$lct" stats --prometheus >"$tmp/prom" || fail "stats --prometheus over the set"
[ "$(grep -c "^# lctd at ipc://" "$tmp/prom")" -eq 3 ] || fail "stats --prometheus names each lctd"
[ "$(grep "^lct_tensors " "$tmp/prom" | awk '{s += $2} END {print s}')" -eq 24 ] || fail "stats --prometheus tensors"

# One dead endpoint: its keys fail naming it; the others' keys, ls and stats go on (with exit status 1).
kill -9 "${pids[1]}"; wait "${pids[1]}" 2>/dev/null
dead_key=$(head -1 "$tmp/on1") live_key=$(head -1 "$tmp/on2")
expect_error "get: cannot reach lctd at ${eps[1]} (endpoint 2 of 3), which holds $dead_key" \
  "$lct" get "$dead_key" "$tmp/y.bin"
"$lct" get "$live_key" "$tmp/y.bin" >/dev/null || fail "a key of a live endpoint"
"$lct" ls set/ >"$tmp/ls2" 2>"$tmp/ls2.err" && fail "ls over a set with a dead endpoint succeeded"
[ "$(wc -l <"$tmp/ls2")" -eq $((24 - $(wc -l <"$tmp/on1"))) ] || fail "ls listed: $(cat "$tmp/ls2")"
grep -q "cannot reach lctd at ${eps[1]}" "$tmp/ls2.err" || fail "ls error: $(cat "$tmp/ls2.err")"
"$lct" stats >"$tmp/stats2" 2>/dev/null && fail "stats over a set with a dead endpoint succeeded"
grep -q "^all 2 endpoints that answered:$" "$tmp/stats2" || fail "stats with a dead endpoint: $(cat "$tmp/stats2")"

# That endpoint removed from the list: only its keys move (and are absent); every other key is found.
export LCT_ENDPOINTS="${eps[0]},${eps[2]}"
for i in 0 2; do
  while read -r k; do "$lct" stat "$k" >/dev/null || fail "$k lost after removing another endpoint"; done <"$tmp/on$i"
done
expect_error "stat $dead_key (lctd at .*): no such key" "$lct" stat "$dead_key"

expect_error "give --endpoint or --endpoints, not both" "$lct" --endpoint "${eps[0]}" --endpoints "$all" ping
expect_error "bad endpoint list" "$lct" --endpoints "${eps[0]},,${eps[2]}" ls
expect_error "bad endpoint list" "$lct" --endpoints "${eps[0]},${eps[0]}" ls
expect_error "bad endpoint list 'nowhere'" "$lct" --endpoint nowhere ls   # the list it was given, not \$LCT_ENDPOINTS
echo "lct over an endpoint set: ok"
