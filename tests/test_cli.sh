#!/usr/bin/env bash
# test_cli.sh LCT DATA_DIR — the offline lct pack/unpack tool: exact round trips and clear failures.
set -u
lct=$1 data=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
. "$(dirname "$0")/cli_lib.sh"

for f in "$data"/*.bin; do
  b=$(basename "$f")
  "$lct" pack "$f" "$tmp/$b.lct" >/dev/null || fail "pack $b"
  "$lct" unpack "$tmp/$b.lct" "$tmp/$b" || fail "unpack $b"
  cmp -s "$f" "$tmp/$b" || fail "round trip of $b differs"
done

# dtype override and raw storage of an unnamed file
cp "$data/A_s100_w.bf16.bin" "$tmp/weights.dat"
"$lct" pack --dtype bf16 "$tmp/weights.dat" "$tmp/w.lct" >/dev/null || fail "pack --dtype"
"$lct" unpack "$tmp/w.lct" "$tmp/w.out" && cmp -s "$tmp/weights.dat" "$tmp/w.out" || fail "--dtype round trip"

expect_error "No such file" "$lct" pack "$tmp/missing.f32.bin" "$tmp/x"
expect_error "dtype" "$lct" pack "$tmp/weights.dat" "$tmp/x"
expect_error "unknown dtype 'f64'" "$lct" pack --dtype f64 "$tmp/weights.dat" "$tmp/x"
head -c 7 "$data/A_s100_w.f32.bin" > "$tmp/odd.f32.bin"
expect_error "not a whole number" "$lct" pack "$tmp/odd.f32.bin" "$tmp/x"
head -c 1000 "$tmp/w.lct" > "$tmp/cut.lct"
expect_error "corrupt" "$lct" unpack "$tmp/cut.lct" "$tmp/x"
printf 'garbage' > "$tmp/garbage.lct"
expect_error "corrupt" "$lct" unpack "$tmp/garbage.lct" "$tmp/x"
[ -e "$tmp/x" ] && fail "a failed command left an output file"
echo "cli: ok"
