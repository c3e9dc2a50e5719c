#!/usr/bin/env bash
# test_exports.sh LIB HEADER... — a shared library (liblct, liblct_codec) exports exactly the functions its public headers declare with LCT_API.
set -euo pipefail
lib=$1
shift
declared=$(grep -h '^LCT_API ' "$@" | sed -E 's/\(.*//; s/.*[^A-Za-z0-9_]//' | sort -u)
# Names with a dot are the compiler's (an ifunc's resolver), not the API.
exported=$(nm -D --defined-only "$lib" | awk '{print $NF}' | grep -v '\.' | sort -u)
extra=$(comm -13 <(printf '%s\n' "$declared") <(printf '%s\n' "$exported"))
missing=$(comm -23 <(printf '%s\n' "$declared") <(printf '%s\n' "$exported"))
[ -z "$extra" ] || { printf 'exported but not public:\n%s\n' "$extra"; exit 1; }
[ -z "$missing" ] || { printf 'public but not exported:\n%s\n' "$missing"; exit 1; }
echo "$(basename "$lib") exports its $(printf '%s\n' "$declared" | wc -l) public functions and nothing else"
