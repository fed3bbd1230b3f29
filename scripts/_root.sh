# A Debian root built with debootstrap, and the suite run inside it with chroot: shared by
# scripts/test-targets.sh (bullseye, arm64 under qemu) and scripts/test-trixie.sh (trixie,
# native); sourced, not run, after scripts/_log.sh. Before calling, set:
#   R         the root's folder (cached outside the clone)
#   SUITE     the Debian release; ARCH its architecture (foreign ones run under qemu)
#   MIRRORS   the mirrors to try, in order (pick_mirror sets MIRROR to the first that has SUITE)
#   APT_PKGS  Debian packages the tests need inside the root
#   VENV SRC WHEELS  inside the root: the test venv, the copied tree, the wheels the install
#             test may install offline
#   TEST_ENV  NAME=VALUE settings the tests run with (in_venv)
#   CACHE     the folder R lives in, locked for one run at a time

# The start of every such script: SKIPVAR=1 skips it, loudly (not for CI); root is needed;
# one run at a time per cache (a second waits: a build can take 20 minutes); the root's
# mounts go when the script ends.  take_root SKIPVAR WHAT "$@", WHAT naming what a skip
# leaves untested.
take_root() {
    local skip=$1 what=$2
    shift 2
    if [ "${!skip:-0}" = 1 ]; then
        say "SKIPPED: $skip=1; $what is NOT tested"
        exit 0
    fi
    [ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot and mounts): sudo $0 $*"
    mkdir -p "$CACHE"
    exec 8>"$CACHE/.lock"
    flock -w 3600 8 || die "another $log_tag run holds $CACHE/.lock"
    trap umount_root EXIT
}

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

timed() {  # timed NAME CMD...: run CMD, log how long it took
    local name=$1 t0=$SECONDS
    shift
    "$@"
    say "$name: $((SECONDS - t0)) s"
}
