#!/usr/bin/env bash
# A Debian root built with debootstrap, and the suite run inside it with chroot: the
# noxfile's root sessions (trixie, arm64) run this, with the stack described in the
# environment. Needs root (debootstrap, chroot, mounts) and network on the first run.
#
#   bash scripts/_root.sh build          build or update the cached root
#   bash scripts/_root.sh test CMD...    build if needed, then in a fresh copy of the clone:
#                                        the versions check, the install check, CMD (pytest)
#   bash scripts/_root.sh shell          a shell in the root's venv, in the copied tree
#
#   ROOT_NAME     the session, for the log          ROOT_CACHE  the folder R lives in
#   ROOT_SUITE    the Debian release                ROOT_ARCH   its architecture (default:
#                                                   this machine's; a foreign one runs under qemu)
#   ROOT_MIRRORS  the mirrors to try, in order (the first that has ROOT_SUITE wins)
#   ROOT_APT      Debian packages the tests need inside the root
#   ROOT_PIP      pip specs added to the root's venv, Debian's own packages pinned
#   ROOT_WHEELS   pip specs the install check may install, offline (downloaded at build)
#   ROOT_CHECK    the arguments of `scripts/stack_check.py check` for this stack
#   ROOT_TEST_ENV NAME=VALUE settings the tests run with
# Lists are space-separated. Each build step checks what is already there, so an
# interrupted build resumes; every download is retried.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
log_tag=$ROOT_NAME
source "$repo/scripts/_log.sh"

read -ra MIRRORS <<<"$ROOT_MIRRORS"
read -ra APT_PKGS <<<"$ROOT_APT"
read -ra PIP_PKGS <<<"$ROOT_PIP"
read -ra WHEEL_PKGS <<<"${ROOT_WHEELS:-}"
read -ra CHECK <<<"${ROOT_CHECK:-}"
read -ra TEST_ENV <<<"${ROOT_TEST_ENV:-}"
CACHE=$ROOT_CACHE
SUITE=$ROOT_SUITE
HOST_ARCH=$(dpkg --print-architecture 2>/dev/null || echo amd64)
ARCH=${ROOT_ARCH:-$HOST_ARCH}
R=$CACHE/$SUITE-$ARCH
VENV=/opt/venv      # inside the root
SRC=/src/edgeload   # inside the root: a fresh copy of this checkout each run
WHEELS=/opt/wheels  # inside the root: what the install check may install, offline

# --- the root's mounts and environment --------------------------------------------------
mount_root() {
    # / bound onto itself so that `unshare -m` (used by the shm tests' helpers) works inside
    mountpoint -q "$R" || mount --bind "$R" "$R"
    # Test what is there, not `mountpoint`: a proc mounted on the root before the bind
    # above still shows as a mount point, yet the bind hides it and /proc is empty inside.
    [ -e "$R/proc/self/stat" ] || mount -t proc proc "$R/proc"
    [ -e "$R/sys/kernel" ] || mount -t sysfs -o ro sysfs "$R/sys"
    mkdir -p "$R/dev/shm"
    mountpoint -q "$R/dev/shm" || mount -t tmpfs -o mode=1777,size=2g tmpfs "$R/dev/shm"
    # name resolution and the host's CA bundle (a proxy's CA reaches pip this way)
    cp /etc/hosts /etc/resolv.conf "$R/etc/"
    if [ -d "$R/etc/ssl/certs" ] && [ -f /etc/ssl/certs/ca-certificates.crt ]; then
        cp /etc/ssl/certs/ca-certificates.crt "$R/etc/ssl/certs/"
    fi
}
umount_root() {
    local m
    for m in dev/shm sys proc ""; do
        # a process of the tests may still be leaving: wait a moment, then detach lazily
        if mountpoint -q "$R/$m" 2>/dev/null; then
            umount "$R/$m" 2>/dev/null || { sleep 2; umount "$R/$m" 2>/dev/null; } || umount -l "$R/$m"
        fi
    done
}
# A clean environment: the host's PIP_FIND_LINKS, pip.conf and PYTHON* settings stay out.
ROOT_ENV=(HOME=/root LANG=C.UTF-8 TERM=dumb DEBIAN_FRONTEND=noninteractive
    PIP_DEFAULT_TIMEOUT=180 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CERT=/etc/ssl/certs/ca-certificates.crt)
in_root() {
    chroot "$R" /usr/bin/env -i "${ROOT_ENV[@]}" \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
}
in_venv() {  # in_venv SECONDS CMD...: in the venv and the source copy, killed after SECONDS
    local limit=$1
    shift
    timeout -k 10 "$limit" chroot "$R" /usr/bin/env -i "${ROOT_ENV[@]}" \
        PATH="$VENV/bin:/usr/bin:/bin" VIRTUAL_ENV="$VENV" PYTHONPATH="$SRC" "${TEST_ENV[@]}" \
        /bin/sh -c 'cd "$0" && exec "$@"' "$SRC" "$@"
}

# --- building the root ------------------------------------------------------------------
pick_mirror() {
    local m
    for m in "${MIRRORS[@]}"; do
        if retry python3 -c 'import sys, urllib.request
urllib.request.urlopen(sys.argv[1] + "/dists/" + sys.argv[2] + "/InRelease", timeout=60)' "$m" "$SUITE"
        then
            MIRROR=$m
            return 0
        fi
        say "$m has no $SUITE; trying the next mirror"
    done
    die "no mirror has Debian $SUITE: ${MIRRORS[*]}"
}

host_tools() {  # a foreign architecture runs under qemu-user-static, through binfmt_misc
    [ "$ARCH" = "$HOST_ARCH" ] && return 0
    if ! command -v qemu-aarch64-static >/dev/null || ! command -v debootstrap >/dev/null \
        || ! command -v update-binfmts >/dev/null; then
        say "installing qemu-user-static, binfmt-support and debootstrap on the host"
        retry apt-get update -qq
        retry env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            qemu-user-static binfmt-support debootstrap >/dev/null
    fi
    mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --import qemu-aarch64 || true
    update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
    grep -q '^enabled' /proc/sys/fs/binfmt_misc/qemu-aarch64 \
        || die "binfmt_misc has no enabled qemu-aarch64 entry: arm64 programs cannot run here"
    # F: the kernel opens the emulator at registration, so it works inside the chroot
    grep -q '^flags: .*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 \
        || die "the qemu-aarch64 binfmt entry lacks the F flag; reinstall qemu-user-static"
}

build_rootfs() {
    [ -e "$R/.edgeload-base-done" ] && return 0
    command -v debootstrap >/dev/null || {
        retry apt-get update -qq
        retry env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    }
    pick_mirror
    say "debootstrap $SUITE $ARCH into $R"
    umount_root
    rm -rf "$R"
    mkdir -p "$(dirname "$R")"
    if [ "$ARCH" = "$(dpkg --print-architecture)" ]; then
        # a failed try starts again from an empty directory
        retry sh -c 'rm -rf "$1" && debootstrap --variant=minbase "$2" "$1" "$3"' \
            _ "$R" "$SUITE" "$MIRROR"
    else
        # download and unpack only (native), then the second stage under emulation
        retry sh -c 'rm -rf "$1" && debootstrap --arch="$4" --variant=minbase --foreign "$2" "$1" "$3"' \
            _ "$R" "$SUITE" "$MIRROR" "$ARCH"
        timed "debootstrap second stage (emulated)" chroot "$R" /debootstrap/debootstrap --second-stage
    fi
    touch "$R/.edgeload-base-done"
}

build_packages() {
    if in_root dpkg -s "${APT_PKGS[@]}" >/dev/null 2>&1; then return 0; fi
    pick_mirror
    # the security suite is left out: bullseye's is listed but answers 404 for its pool files
    printf 'deb %s %s main\ndeb %s %s-updates main\n' "$MIRROR" "$SUITE" "$MIRROR" "$SUITE" \
        > "$R/etc/apt/sources.list"
    printf '#!/bin/sh\nexit 101\n' > "$R/usr/sbin/policy-rc.d"  # no services start inside
    chmod +x "$R/usr/sbin/policy-rc.d"
    mount_root
    retry in_root apt-get update -qq
    # --download-only first, retried; the install itself is not a download
    retry in_root apt-get install -y -qq --no-install-recommends --download-only "${APT_PKGS[@]}"
    in_root dpkg --configure -a  # an install interrupted on an earlier run
    timed "apt install" in_root apt-get install -y -qq --no-install-recommends \
        "${APT_PKGS[@]}" >/dev/null
    in_root apt-get clean
}

# --- testing in it ----------------------------------------------------------------------
copy_source() {
    rm -rf "$R$SRC"
    mkdir -p "$R$SRC"
    if git -C "$repo" rev-parse --git-dir >/dev/null 2>&1; then
        git -C "$repo" ls-files -z --cached --others --exclude-standard \
            | (cd "$repo" && tar --null --ignore-failed-read -T - -cf -) | tar -xf - -C "$R$SRC"
    else
        tar -C "$repo" --exclude='.venv*' --exclude=.git -cf - . | tar -xf - -C "$R$SRC"
    fi
}

# Installing edgeload into a --system-site-packages venv, as on a board, keeps the system's
# numpy and psutil: only edgeload itself and tomli (absent below Python 3.11) may be added.
# --no-index: a requirement the system does not meet has nothing to upgrade to, and fails.
install_test() {
    mkdir -p "$R$WHEELS"
    in_venv 600 sh -ec '
        unset PYTHONPATH  # the installed wheel, not the source copy
        rm -rf /tmp/dist /tmp/board-venv
        python -m pip wheel -q --no-deps --no-build-isolation -w /tmp/dist .
        python3 -m venv --system-site-packages /tmp/board-venv
        vpy=/tmp/board-venv/bin/python
        sp=$($vpy -c "import sysconfig; print(sysconfig.get_paths()[\"purelib\"])")
        show="import numpy, psutil; print(numpy.__version__, numpy.__file__, psutil.__version__)"
        before=$($vpy -c "$show")
        ls "$sp" | sort > /tmp/site-before
        $vpy -m pip install -q --no-index --find-links "$1" /tmp/dist/edgeload-*.whl
        after=$($vpy -c "$show")
        ls "$sp" | sort > /tmp/site-after
        added=$(comm -13 /tmp/site-before /tmp/site-after | grep -vE "^(edgeload|tomli)[-.]|^(edgeload|tomli)$" || true)
        $vpy -c "import edgeload, numpy; print(\"edgeload\", edgeload.__version__, \"installed over the system numpy\", numpy.__version__)"
        rm -rf /tmp/dist /tmp/board-venv /tmp/site-before /tmp/site-after
        [ "$before" = "$after" ] || { echo "numpy/psutil changed: $before -> $after"; exit 1; }
        [ -z "$added" ] || { echo "the install added more than edgeload and tomli:" $added; exit 1; }
        case $before in */usr/lib/python3/dist-packages/*) ;; *) echo "numpy is not the system one: $before"; exit 1 ;; esac
    ' sh "$WHEELS"
}

# Debian's numpy (and the rest of what Debian has) must stay: the venv sees the system's
# packages and pip installs around them, pinned (scripts/stack_check.py pins).
build_venv() {
    local want="${PIP_PKGS[*]} | ${WHEEL_PKGS[*]}"
    mount_root
    [ -x "$R$VENV/bin/python" ] || in_root python3 -m venv --system-site-packages "$VENV"
    [ "$(cat "$R$VENV/.edgeload-pip" 2>/dev/null)" = "$want" ] && return 0
    in_root "$VENV/bin/python" - pins <"$repo/scripts/stack_check.py" >"$R$VENV/debian-pins.txt"
    say "pip install ${PIP_PKGS[*]} into $VENV, with Debian's $(tr '\n' ' ' <"$R$VENV/debian-pins.txt")kept"
    retry in_root "$VENV/bin/python" -m pip install -q -c "$VENV/debian-pins.txt" "${PIP_PKGS[@]}"
    if [ ${#WHEEL_PKGS[@]} -gt 0 ]; then
        retry in_root "$VENV/bin/python" -m pip download -q --no-deps -d "$WHEELS" "${WHEEL_PKGS[@]}"
    fi
    echo "$want" >"$R$VENV/.edgeload-pip"
}

build() {
    local t0=$SECONDS
    host_tools
    build_rootfs
    build_packages
    build_venv
    say "root ready in $((SECONDS - t0)) s: $R"
}

run_tests() {
    local t0=$SECONDS
    mount_root
    copy_source
    in_venv 300 python scripts/stack_check.py check "${CHECK[@]}" \
        || die "$R does not hold the stack this session asks for (delete it to rebuild)"
    timed "install over the system numpy" install_test
    say "the tests: $*"
    timed "pytest" in_venv 1800 "$@"
    say "the tests in the $SUITE $ARCH root passed in $((SECONDS - t0)) s"
}

timed() {  # timed NAME CMD...: run CMD, log how long it took
    local name=$1 t0=$SECONDS
    shift
    "$@"
    say "$name: $((SECONDS - t0)) s"
}

# One run at a time per cache (a second waits: a build can take 20 minutes); the root's
# mounts go when the script ends.
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot and mounts): run nox with sudo"
mkdir -p "$CACHE"
exec 8>"$CACHE/.lock"
flock -w 3600 8 || die "another run holds $CACHE/.lock"
trap umount_root EXIT

what=${1:-}
[ $# -gt 0 ] && shift
case $what in
    # (never `build && ...`: bash ignores set -e inside a function run as part of && or ||)
    build) build ;;
    test)
        build
        run_tests "$@"
        ;;
    shell)
        build
        mount_root
        copy_source
        in_venv 86400 bash
        ;;
    *) die "unknown command '$what': use build, test CMD... or shell" ;;
esac
