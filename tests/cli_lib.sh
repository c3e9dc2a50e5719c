# cli_lib.sh — what the CLI test scripts share; sourced after they define fail().

expect_error() { # expect_error PATTERN CMD...: non-zero exit and one line naming the problem
  local pattern=$1 out; shift
  out=$("$@" 2>&1) && fail "'$*' succeeded"
  [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "'$*' printed more than one line: $out"
  printf '%s' "$out" | grep -q -- "$pattern" || fail "'$*' said '$out', expected '$pattern'"
}
