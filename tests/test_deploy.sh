#!/usr/bin/env bash
# test_deploy.sh BUILD_DIR — deploy/install.sh into a staging root, then the installed units (lctd.service,
# and the per-GPU template lctd@.service: what each instance derives from its index, what --enable
# enables) through `systemd-analyze verify` (exit 77, a skip, only when systemd-analyze cannot run here at all).
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
         etc/systemd/system/lctd.service etc/systemd/system/lctd@.service etc/lct/lctd.conf \
         usr/lib/sysusers.d/lctd.conf; do
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

# The per-GPU template: the single unit's service settings and hardening, with its own directories.
tmpl=$root/etc/systemd/system/lctd@.service
grep -q "@[A-Z]*@" "$tmpl" && fail "unsubstituted placeholder in the template"
# StateDirectory names lct too: systemd then gives /var/lib/lct itself to the lct user, whoever made it.
for want in "Environment=CUDA_DEVICE_ORDER=PCI_BUS_ID" "RuntimeDirectory=lct/gpu%i" "StateDirectory=lct lct/gpu%i" \
            "Conflicts=lctd.service"; do
  grep -q "^$want$" "$tmpl" || fail "template lacks $want"
done
grep -v -e "^#" -e "^Description=" -e "^ExecStart=" -e "^RuntimeDirectory=" -e "^StateDirectory=" "$unit" |
  while IFS= read -r line; do
    grep -qxF -- "$line" "$tmpl" || { echo "template lacks the unit's line: $line"; exit 1; }
  done || fail "the template differs from lctd.service beyond its instance's settings"
# Instance 2's lctd, as its ExecStart runs it: GPU 2, its own endpoints, metrics port and state.
exec_start=$(sed -n '/^ExecStart=/,/[^\\]$/p' "$tmpl" | sed -e 's/^ExecStart=//' -e 's/\\$//' | tr '\n' ' ')
exec_start=${exec_start//%i/2}
exec_start=${exec_start//\/usr\/local\/bin\/lctd/$root/usr/local/bin/lctd}
exec_start=${exec_start//\/etc\/lct\/lctd.conf/$root/etc/lct/lctd.conf}
# shellcheck disable=SC2086 # the unit's command line, split as systemd splits it
$exec_start --print-config >"$tmp/instance2" 2>&1 || fail "instance 2's command line: $(cat "$tmp/instance2")"
for want in "device 2" "backend cuda" "listen ipc:///run/lct/gpu2/lctd.sock" "listen tcp://127.0.0.1:7880" "metrics 127.0.0.1:9880" \
            "persist_dir /var/lib/lct/gpu2"; do
  grep -qx "$want" "$tmp/instance2" || fail "instance 2 lacks '$want': $(cat "$tmp/instance2")"
done
[ "$(grep -c "^listen " "$tmp/instance2")" -eq 2 ] || fail "instance 2 listens elsewhere too: $(cat "$tmp/instance2")"
# --enable: an instance per GPU, or the single unit where there is none.
wants=$root/etc/systemd/system/multi-user.target.wants
DESTDIR=$root "$top/deploy/install.sh" --build "$build" --enable --gpus 2 >/dev/null 2>&1 || fail "install.sh --enable --gpus 2"
[ "$(ls "$wants")" = "$(printf 'lctd@0.service\nlctd@1.service')" ] || fail "--gpus 2 enabled: $(ls "$wants")"
[ "$(readlink "$wants/lctd@1.service")" = /etc/systemd/system/lctd@.service ] || fail "lctd@1 is not the template"
DESTDIR=$root "$top/deploy/install.sh" --build "$build" --enable --gpus 0 >/dev/null 2>&1 || fail "install.sh --enable --gpus 0"
[ "$(ls "$wants")" = lctd.service ] || fail "no GPU enabled: $(ls "$wants")"
[ "$(readlink "$wants/lctd.service")" = /etc/systemd/system/lctd.service ] || fail "lctd.service link"
DESTDIR=$root "$top/deploy/install.sh" --build "$build" --enable --gpus two >/dev/null 2>&1 && fail "--gpus two accepted"

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
# The template, through its instances 0 and 7.
sed "s|/usr/local/bin/lctd|$root/usr/local/bin/lctd|" "$tmpl" >"$tmp/units/lctd@.service"
for n in 0 7; do
  out=$("$analyze" verify "$tmp/units/lctd@$n.service" 2>&1)
  rc=$?
  [ $rc -eq 0 ] && [ -z "$out" ] || fail "systemd-analyze verify lctd@$n.service (status $rc): $out"
done
echo "install.sh staging and systemd-analyze verify (lctd.service, lctd@.service): ok"
