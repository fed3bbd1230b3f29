# Logging and retries for scripts/_root.sh (the Debian roots the noxfile's sessions test in);
# sourced, not run.
# Set log_tag before sourcing: it names the script in every line.

say() { printf '[%s %(%H:%M:%S)T] %s\n' "$log_tag" -1 "$*" >&2; }
die() { say "FAILED: $*"; exit 1; }

retry() {  # retry CMD...: up to 4 tries, 15/30/60 s apart (mirrors and PyPI do flake)
    local n=1
    until "$@"; do
        [ $n -ge 4 ] && return 1
        say "try $n of '$*' failed; again in $((15 << (n - 1))) s"
        sleep $((15 << (n - 1)))
        n=$((n + 1))
    done
}
