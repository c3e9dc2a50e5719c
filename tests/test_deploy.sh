#!/usr/bin/env bash
# test_deploy.sh BUILD_DIR — deploy/install.sh into a staging root, then the installed unit through
# `systemd-analyze verify` (exit 77, a skip, only when systemd-analyze cannot run here at all).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
fail() { echo "FAIL: $*"; exit 1; }

DESTDIR=$root "$top/deploy/install.sh" --build "$build" --prefix /usr/local >"$tmp/install.log" 2>&1 ||
  fail "install.sh: $(cat "$tmp/install.log")"
for f in usr/local/bin/lctd usr/local/bin/lct usr/local/include/lct.h usr/local/share/doc/lct/README.md \
         etc/systemd/system/lctd.service etc/lct/lctd.conf usr/lib/sysusers.d/lctd.conf; do
  [ -f "$root/$f" ] || fail "install.sh did not install /$f"
done
ls "$root"/usr/local/lib*/liblct.so* >/dev/null 2>&1 || fail "install.sh did not install liblct"
# The installed lct.h stands alone: what it includes is installed next to it.
printf '#include <lct.h>\nint main(void) { return lct_version_number() != LCT_VERSION_NUMBER; }\n' >"$tmp/use.c"
cc -std=c11 -Wall -Wextra -Werror -I"$root/usr/local/include" -c "$tmp/use.c" -o "$tmp/use.o" 2>"$tmp/cc.log" ||
  fail "a program including the installed lct.h: $(cat "$tmp/cc.log")"
[ -d "$root/var/lib/lct" ] || fail "no /var/lib/lct"
cmp -s "$top/deploy/lctd.conf" "$root/etc/lct/lctd.conf" || fail "installed config differs"
"$root/usr/local/bin/lctd" --config "$root/etc/lct/lctd.conf" --print-config >"$tmp/printed" 2>&1 ||
  fail "the installed lctd refuses the installed config: $(cat "$tmp/printed")"
grep -q "^metrics 127.0.0.1:9878$" "$tmp/printed" || fail "metrics endpoint not on loopback"
# A second run keeps an edited configuration.
echo "log_level debug" >>"$root/etc/lct/lctd.conf"
DESTDIR=$root "$top/deploy/install.sh" --build "$build" >/dev/null 2>&1 || fail "second install.sh"
grep -q "^log_level debug" "$root/etc/lct/lctd.conf" || fail "install.sh overwrote an edited config"
[ -f "$root/etc/lct/lctd.conf.new" ] || fail "no lctd.conf.new next to the edited config"

unit=$root/etc/systemd/system/lctd.service
grep -q "@[A-Z]*@" "$unit" && fail "unsubstituted placeholder in the unit"
grep -q "^ExecStart=/usr/local/bin/lctd --config /etc/lct/lctd.conf$" "$unit" || fail "ExecStart"
for want in "Type=notify" "User=lct" "RuntimeDirectory=lct" "NoNewPrivileges=yes" "ProtectSystem=strict" \
            "ProtectHome=yes" "DevicePolicy=closed" "DeviceAllow=char-nvidia-frontend rw" "ExecReload="; do
  grep -q "^$want" "$unit" || fail "unit lacks $want"
done
grep -q "^PrivateDevices=yes" "$unit" && fail "PrivateDevices would hide /dev/nvidia*"
# A lost device exits 3 without a final save (server/health.h): systemd restarts lctd from its last
# snapshot; only a configuration error (2) is final.
grep -q "^#define LCT__EXIT_DEVICE_LOST 3$" "$top/server/health.h" || fail "the device-lost exit status is not 3"
grep -q "^Restart=on-failure$" "$unit" || fail "the unit does not restart lctd when it fails"
grep -q "^RestartPreventExitStatus=2$" "$unit" || fail "RestartPreventExitStatus must be the configuration error (2) alone"

analyze=$(command -v systemd-analyze) || { echo "SKIP: systemd-analyze is not installed (deploy/setup.sh installs systemd)"; exit 77; }
# Can systemd-analyze verify anything here? A unit that is certainly valid tells.
mkdir "$tmp/units"
printf '[Unit]\nDescription=control\n[Service]\nType=oneshot\nExecStart=/bin/true\n' >"$tmp/units/control.service"
if ! out=$("$analyze" verify "$tmp/units/control.service" 2>&1) || [ -n "$out" ]; then
  echo "SKIP: systemd-analyze cannot verify units in this environment: $out"
  exit 77
fi
# The installed unit, with ExecStart pointed at the staged binary (verify checks it is executable).
sed "s|^ExecStart=/usr/local/bin/lctd|ExecStart=$root/usr/local/bin/lctd|" "$unit" >"$tmp/units/lctd.service"
out=$("$analyze" verify "$tmp/units/lctd.service" 2>&1)
rc=$?
[ $rc -eq 0 ] && [ -z "$out" ] || fail "systemd-analyze verify (status $rc): $out"
echo "install.sh staging and systemd-analyze verify: ok"
