# Debian packages for the real-media tests: ffmpeg (H.264 clips), GStreamer with
# gst-rtsp-server (a real RTSP server on loopback) and python3-opencv (an OpenCV
# with GStreamer, the closest thing here to JetPack's).  Installed only when root
# on a Debian-like system and something is missing; otherwise those tests skip.
system_deps() {
    local pkgs=(ffmpeg python3-opencv python3-gi gir1.2-gst-rtsp-server-1.0
        gstreamer1.0-plugins-good gstreamer1.0-plugins-bad gstreamer1.0-plugins-ugly
        gstreamer1.0-libav gstreamer1.0-tools python3-psutil)
    local missing=() p
    command -v dpkg-query >/dev/null 2>&1 || return 0
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        say "not root or no apt-get: tests needing ${missing[*]} will skip"
        return 0
    fi
    say "installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}
