#!/usr/bin/env bash
# Checks the wheel's glibc floor on a real older system: installs the wheel into a Debian 11
# root (glibc 2.31, Python 3.9, pip 20.3), made with debootstrap, and runs smoke.sh there:
#   sudo bash viewer/wheel/old-glibc.sh target/wheels/fragprobe-*.whl
# Needs root (for chroot and mount) and debootstrap. The root (~250 MB) is made once, in
# $FRAGPROBE_OLD_ROOT or ${XDG_CACHE_HOME:-~/.cache}/fragprobe/debian-11-root, and reused.
set -euo pipefail
[ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: $0 WHEEL" >&2; exit 2; }
wheel=$(realpath "$1")
root=${FRAGPROBE_OLD_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/fragprobe/debian-11-root}
if [ ! -x "$root/usr/bin/python3" ]; then
  command -v debootstrap >/dev/null || { echo "old-glibc: needs debootstrap (apt-get install debootstrap)" >&2; exit 2; }
  debootstrap --variant=minbase --include=python3,python3-venv,python3-pip \
    bullseye "$root" http://deb.debian.org/debian
fi
check="$root/tmp/fragprobe-check"
rm -rf "$check" && mkdir -p "$check" "$root/proc" "$root/dev/shm"
cp "$wheel" "$(dirname "$0")/smoke.sh" "$check/"
mount -t proc proc "$root/proc"
mount -t tmpfs tmpfs "$root/dev/shm"
trap 'umount "$root/dev/shm" "$root/proc"; rm -rf "$check"' EXIT
echo "old-glibc: $(chroot "$root" /usr/bin/ldd --version | head -1)"
chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
  bash /tmp/fragprobe-check/smoke.sh "/tmp/fragprobe-check/$(basename "$wheel")"
