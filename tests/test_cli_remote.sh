#!/usr/bin/env bash
# test_cli_remote.sh LCT LCTD DATA_DIR — lct put/get/rm/ls/stat/stats/ping/save against a private lctd: raw and .npy files, --timeout, clear failures.
set -u
lct=$1 lctd=$2 data=$3
tmp=$(mktemp -d)
ep="ipc://$tmp/lctd.sock"
"$lctd" --backend cpu --listen "$ep" --frame-size 64K --log-level warn 2>"$tmp/lctd.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp/lctd.log"; exit 1; }
. "$(dirname "$0")/cli_lib.sh"
export LCT_ENDPOINT=$ep
for _ in $(seq 100); do "$lct" ping >/dev/null 2>&1 && break; sleep 0.1; done
"$lct" ping | grep -q "backend cpu" || fail "ping"

# Raw files: dtype from the name, round trip over the global --endpoint flag too.
w=$data/A_s100_w.bf16.bin
out=$("$lct" put layer/w "$w") || fail "put raw"
printf '%s' "$out" | grep -q "layer/w: version [0-9]*, bf16 \[65536\], 131072 bytes stored as" || fail "put said: $out"
"$lct" --endpoint "$ep" get layer/w "$tmp/w.bin" >/dev/null || fail "get raw"
cmp -s "$w" "$tmp/w.bin" || fail "raw round trip differs"

# --shape, and stat.
"$lct" put layer/g "$data/A_s100_g.f32.bin" --shape 256x128 >/dev/null || fail "put --shape"
"$lct" stat layer/g >"$tmp/stat" || fail "stat"
grep -q "shape: *\[256,128\]" "$tmp/stat" && grep -q "dtype: *f32" "$tmp/stat" || fail "stat said: $(cat "$tmp/stat")"

# .npy out, .npy back in: same dtype, shape and bytes.
"$lct" get layer/g "$tmp/g.npy" >/dev/null || fail "get .npy"
head -c 6 "$tmp/g.npy" | od -c | grep -q "N   U   M   P   Y" || fail "no .npy magic"
grep -a -q "'descr': '<f4', 'fortran_order': False, 'shape': (256, 128), }" "$tmp/g.npy" || fail ".npy header: $(head -c 128 "$tmp/g.npy")"
hlen=$(od -An -tu2 -j8 -N2 "$tmp/g.npy" | tr -d ' ')
[ $(( (10 + hlen) % 64 )) -eq 0 ] || fail ".npy header of $hlen bytes is not padded to 64"
[ "$(stat -c %s "$tmp/g.npy")" -eq $((10 + hlen + 131072)) ] || fail ".npy size"
"$lct" put layer/g2 "$tmp/g.npy" >/dev/null || fail "put .npy"
"$lct" stat layer/g2 | grep -q "shape: *\[256,128\]" || fail ".npy shape lost"
"$lct" get layer/g2 "$tmp/g2.bin" >/dev/null && cmp -s "$data/A_s100_g.f32.bin" "$tmp/g2.bin" || fail ".npy round trip differs"
"$lct" get layer/w "$tmp/w.npy" >/dev/null || fail "get bf16 .npy"
grep -a -q "'descr': '|V2'" "$tmp/w.npy" || fail "bf16 .npy descr"
"$lct" put layer/w2 "$tmp/w.npy" >/dev/null && "$lct" stat layer/w2 | grep -q "dtype: *bf16" || fail "bf16 .npy read back"

# ls: prefix and columns; rm.
"$lct" ls layer/ >"$tmp/ls" || fail "ls"
[ "$(wc -l <"$tmp/ls")" -eq 4 ] || fail "ls listed: $(cat "$tmp/ls")"
grep -q "^f32 .*\[256,128\] .*layer/g$" "$tmp/ls" || fail "ls line: $(cat "$tmp/ls")"
"$lct" ls layer/ --limit 1 | grep -c . | grep -q "^1$" || fail "ls --limit"
"$lct" rm layer/w2 || fail "rm"
"$lct" stats --prometheus | grep -q "^lct_tensors 3$" || fail "stats: $("$lct" stats --prometheus | grep lct_tensors)"
# The summary: counts, ratios by dtype, the pool, requests, latency, the device path.
"$lct" stats >"$tmp/stats" || fail "stats"
for want in "^tensors: *3$" "^raw bytes: *[0-9.]* KiB ([0-9]* bytes)$" "^ratio: *[0-9.]* (.*bf16 [0-9.]*.*)$" \
            "^ratio: .*f32 [0-9.]*" "^pool: *.* used of .* ([0-9.]*%)$" "^held: *[0-9]" "^requests: *[1-9]" "^errors: *[0-9]" \
            "^latency: *mean .*, p50 <= .*, p99 <= " "^device: *0 puts, 0 gets, 0 fallbacks"; do
  grep -q "$want" "$tmp/stats" || fail "stats lacks '$want': $(cat "$tmp/stats")"
done
grep -q "^lct_\|^#" "$tmp/stats" && fail "stats printed Prometheus text: $(cat "$tmp/stats")"

expect_error "rm layer/w2: no such key" "$lct" rm layer/w2
expect_error "get nope: no such key" "$lct" get nope "$tmp/x"
expect_error "dtype" "$lct" put k "$tmp/w.bin"
expect_error "bad --shape" "$lct" put k "$w" --shape 3xq
expect_error "size does not match dtype and shape" "$lct" put k "$w" --shape 7
expect_error "key empty or too long" "$lct" put "" "$w"
expect_error "cannot reach lctd" "$lct" --endpoint "ipc://$tmp/nobody.sock" ping
expect_error "unknown option" "$lct" ls --bogus
expect_error "connections needs a number from 1 to" "$lct" ping --connections 4x
expect_error "limit needs a positive number" "$lct" ls --limit 10k
# --timeout, which save takes too.
expect_error "timeout needs a number of seconds" "$lct" ping --timeout soon
"$lct" stat layer/g --timeout 2.5 >/dev/null || fail "stat --timeout"
expect_error "save: invalid configuration" "$lct" save --timeout 5
"$lct" ping >/dev/null || fail "lctd stopped serving"

# --encode and --decode: coded here, blobs on the wire. With 256 KiB frames a 1 MiB tensor goes in blobs of
# 192 KiB raw (lct_segment_bytes: the largest whose blob fits a frame), though lctd's segment_size is 1 MiB.
ep2="ipc://$tmp/lctd2.sock"
"$lctd" --backend cpu --listen "$ep2" --frame-size 256K --log-level warn 2>>"$tmp/lctd.log" &
pid2=$!
trap 'kill $pid $pid2 2>/dev/null; wait $pid $pid2 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do "$lct" --endpoint "$ep2" ping >/dev/null 2>&1 && break; sleep 0.1; done
for _ in 1 2 3 4 5 6 7 8; do cat "$w"; done >"$tmp/big.bf16.bin"
"$lct" --endpoint "$ep2" put enc "$tmp/big.bf16.bin" --encode >/dev/null || fail "put --encode"
"$lct" --endpoint "$ep2" get enc "$tmp/big.out" --decode >/dev/null || fail "get --decode"
cmp -s "$tmp/big.bf16.bin" "$tmp/big.out" || fail "--encode / --decode round trip differs"
"$lct" --endpoint "$ep2" get enc "$tmp/big.plain" >/dev/null && cmp -s "$tmp/big.bf16.bin" "$tmp/big.plain" ||
  fail "an encoded put read back decoded by lctd differs"
echo "lct remote commands: ok"
