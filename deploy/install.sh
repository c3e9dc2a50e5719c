#!/usr/bin/env bash
# install.sh — installs lctd as a system service: binaries and liblct (cmake --install), the systemd
# unit, /etc/lct/lctd.conf, the lct user and group, and the state directory.
#
# usage: deploy/install.sh [--build DIR] [--prefix DIR] [--no-user] [--no-systemctl]
#   --build DIR      a configured and built tree (default: build)
#   --prefix DIR     installation prefix of the binaries (default: /usr/local)
#   --no-user        do not create the lct system user and group
#   --no-systemctl   do not run systemctl daemon-reload
#   DESTDIR=ROOT     stage everything under ROOT (packaging, tests): implies --no-user and
#                    --no-systemctl; the user is still declared in ROOT/usr/lib/sysusers.d/lctd.conf
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build prefix=/usr/local make_user=1 reload=1
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=${2:?install.sh: --build needs a directory}; shift 2 ;;
    --build=*) build=${1#*=}; shift ;;
    --prefix) prefix=${2:?install.sh: --prefix needs a directory}; shift 2 ;;
    --prefix=*) prefix=${1#*=}; shift ;;
    --no-user) make_user=0; shift ;;
    --no-systemctl) reload=0; shift ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
# It goes into the unit file by sed: a plain absolute path only.
[[ $prefix =~ ^/[A-Za-z0-9._/-]*$ ]] || { echo "install.sh: --prefix must be an absolute path of letters, digits, . _ - /" >&2; exit 2; }
dest=${DESTDIR:-}
if [ -n "$dest" ]; then make_user=0 reload=0; fi
[ -x "$build/bin/lctd" ] || { echo "install.sh: $build/bin/lctd not found: build first" >&2; exit 1; }

DESTDIR=$dest cmake --install "$build" --prefix "$prefix" >/dev/null
docdir=$prefix/share/doc/lct
install -d -m 0755 "$dest$docdir" "$dest/etc/systemd/system" "$dest/usr/lib/sysusers.d"
install -m 0644 "$top/deploy/README.md" "$dest$docdir/README.md"
sed -e "s|@BINDIR@|$prefix/bin|g" -e "s|@DOCDIR@|$docdir|g" "$top/deploy/lctd.service" \
  >"$dest/etc/systemd/system/lctd.service"
chmod 0644 "$dest/etc/systemd/system/lctd.service"
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

if [ "$reload" = 1 ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
fi
echo "installed lctd in $dest$prefix/bin, its unit in $dest/etc/systemd/system/lctd.service"
[ -z "$dest" ] && echo "start it with: systemctl enable --now lctd"
exit 0
