#!/usr/bin/env bash
# install.sh — installs lctd as a system service: binaries and liblct (cmake --install), the systemd
# units (lctd.service, and lctd@.service for one lctd per GPU), /etc/lct/lctd.conf, the lct user and
# group, and the state directory.
#
# usage: deploy/install.sh [--build DIR] [--prefix DIR] [--no-user] [--no-systemctl] [--enable [--gpus N]]
#   --build DIR      a configured and built tree (default: build)
#   --prefix DIR     installation prefix of the binaries (default: /usr/local)
#   --no-user        do not create the lct system user and group
#   --no-systemctl   do not run systemctl (daemon-reload, and starting what --enable enables)
#   --enable         enable (and start) one lctd@N per GPU found (nvidia-smi -L, else
#                    /proc/driver/nvidia/gpus), or lctd.service where none is
#   --gpus N         with --enable: N instances, lctd@0 to lctd@N-1, whatever is found (0: lctd.service)
#   DESTDIR=ROOT     stage everything under ROOT (packaging, tests): implies --no-user and
#                    --no-systemctl; the user is still declared in ROOT/usr/lib/sysusers.d/lctd.conf
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build prefix=/usr/local make_user=1 reload=1 enable=0 gpus=
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=${2:?install.sh: --build needs a directory}; shift 2 ;;
    --build=*) build=${1#*=}; shift ;;
    --prefix) prefix=${2:?install.sh: --prefix needs a directory}; shift 2 ;;
    --prefix=*) prefix=${1#*=}; shift ;;
    --no-user) make_user=0; shift ;;
    --no-systemctl) reload=0; shift ;;
    --enable) enable=1; shift ;;
    --gpus) gpus=${2:?install.sh: --gpus needs a number}; shift 2 ;;
    --gpus=*) gpus=${1#*=}; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
# It goes into the unit file by sed: a plain absolute path only.
[[ $prefix =~ ^/[A-Za-z0-9._/-]*$ ]] || { echo "install.sh: --prefix must be an absolute path of letters, digits, . _ - /" >&2; exit 2; }
[ -z "$gpus" ] || [[ $gpus =~ ^[0-9]+$ && $gpus -le 256 ]] || { echo "install.sh: --gpus needs a number from 0 to 256" >&2; exit 2; }
dest=${DESTDIR:-}
if [ -n "$dest" ]; then make_user=0 reload=0; fi
[ -x "$build/bin/lctd" ] || { echo "install.sh: $build/bin/lctd not found: build first" >&2; exit 1; }

DESTDIR=$dest cmake --install "$build" --prefix "$prefix" >/dev/null
docdir=$prefix/share/doc/lct
install -d -m 0755 "$dest$docdir" "$dest/etc/systemd/system" "$dest/usr/lib/sysusers.d"
install -m 0644 "$top/deploy/README.md" "$dest$docdir/README.md"
for unit in lctd.service lctd@.service; do
  sed -e "s|@BINDIR@|$prefix/bin|g" -e "s|@DOCDIR@|$docdir|g" "$top/deploy/$unit" >"$dest/etc/systemd/system/$unit"
  chmod 0644 "$dest/etc/systemd/system/$unit"
done
printf 'g lct -\nu lct -:lct "LCT tensor store daemon" /var/lib/lct /usr/sbin/nologin\n' \
  >"$dest/usr/lib/sysusers.d/lctd.conf"

if [ "$make_user" = 1 ]; then
  getent group lct >/dev/null || groupadd --system lct
  getent passwd lct >/dev/null ||
    useradd --system --gid lct --home-dir /var/lib/lct --no-create-home --shell /usr/sbin/nologin lct
fi
owner=root:root
[ "$make_user" = 1 ] && owner=lct:lct
install -d -m 0755 "$dest/etc/lct"
install -d -m 0750 "$dest/var/lib/lct"
[ "$make_user" = 1 ] && chown "$owner" "$dest/var/lib/lct"
# An edited configuration is never overwritten: the new example goes next to it.
conf=$dest/etc/lct/lctd.conf
if [ -e "$conf" ] && ! cmp -s "$top/deploy/lctd.conf" "$conf"; then
  install -m 0644 "$top/deploy/lctd.conf" "$conf.new"
  echo "install.sh: kept the edited $conf; the shipped one is $conf.new"
else
  install -m 0644 "$top/deploy/lctd.conf" "$conf"
fi

# The GPUs of this host, as nvidia-smi numbers them (lctd@N.service's N).
count_gpus() {
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    nvidia-smi -L | grep -c '^GPU '
  elif [ -d /proc/driver/nvidia/gpus ]; then
    find /proc/driver/nvidia/gpus -mindepth 1 -maxdepth 1 | wc -l
  else
    echo 0
  fi
}

units=()
if [ "$enable" = 1 ]; then
  [ -n "$gpus" ] || gpus=$(count_gpus)
  if [ "$gpus" -gt 0 ]; then
    for ((i = 0; i < gpus; i++)); do units+=("lctd@$i.service"); done
  else
    units=(lctd.service)
  fi
  # What systemctl enable does for units wanted by multi-user.target; it works on a staged root too.
  wants=$dest/etc/systemd/system/multi-user.target.wants
  install -d -m 0755 "$wants"
  rm -f "$wants"/lctd.service "$wants"/lctd@*.service
  for u in "${units[@]}"; do ln -s "/etc/systemd/system/${u/@[0-9]*./@.}" "$wants/$u"; done
fi

if [ "$reload" = 1 ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  [ ${#units[@]} -eq 0 ] || systemctl restart "${units[@]}"
fi
echo "installed lctd in $dest$prefix/bin, its units in $dest/etc/systemd/system/lctd.service and lctd@.service"
if [ ${#units[@]} -gt 0 ]; then
  echo "enabled: ${units[*]}"
elif [ -z "$dest" ]; then
  echo "start it with: systemctl enable --now lctd (one lctd per GPU: systemctl enable --now lctd@0 lctd@1 ...)"
fi
exit 0
