# The venv building and pytest running shared by the scripts that run the suite natively on
# a board's Python stack (scripts/test-jetpack5.sh, test-jetpack6.sh); sourced, not run,
# after scripts/_log.sh. Before calling venv_for, set:
#   py      the Python interpreter (find_python finds one)
#   CACHE   the folder the venvs are cached in, one per torch version
#   STACK   the stack's pip specs (torch is added); TOOLS the test tools' specs
#   CHECK   Python code, run with the torch version as argv[1], that exits 0 only when the
#           venv holds the stack
#   stack_name  the stack's name, for the error messages ("JetPack 5")

find_python() {  # find_python X.Y [CANDIDATE]: prints the first Python X.Y with venv of
    # CANDIDATE (an env var's value), pythonX.Y on PATH, pyenv's X.Y*
    local want=$1 candidate
    for candidate in "${2:-}" "$(command -v "python$want" || true)" \
        "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/"$want"*/bin/python"$want"; do
        if [ -n "$candidate" ] && [ -x "$candidate" ] &&
            "$candidate" -c 'import sys, venv; sys.exit("%d.%d" % sys.version_info[:2] != sys.argv[1])' \
                "$want" 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

venv_for() {  # venv_for TORCH_VERSION: build (or reuse) its venv; prints the venv's path
    local torch=$1 venv="$CACHE/torch-$1" want
    want="$("$py" --version 2>&1) ${STACK[*]} torch==$torch ${TOOLS[*]}"
    if [ ! -f "$venv/.stack" ] || [ "$(cat "$venv/.stack")" != "$want" ]; then
        say "building $venv ($want)"
        rm -rf "$venv"
        mkdir -p "$CACHE"
        "$py" -m venv "$venv"
        # the pins also hold torch's own dependencies (numpy) to the stack
        printf '%s\n' "${STACK[@]}" "torch==$torch" | grep -v '^typing\|^tomli' >"$venv/pins.txt"
        retry "$venv/bin/python" -m pip install -q --disable-pip-version-check \
            -c "$venv/pins.txt" "${STACK[@]}" "torch==$torch" >&2 ||
            die "pip install ${STACK[*]} torch==$torch"
        # the tools must not move the stack (a newer numpy would hide what the old one lacks)
        retry "$venv/bin/python" -m pip install -q --disable-pip-version-check \
            -c "$venv/pins.txt" "${TOOLS[@]}" >&2 || die "pip install ${TOOLS[*]}"
        echo "$want" >"$venv/.stack"
    fi
    "$venv/bin/python" -c "$CHECK" "$torch" || die "$venv does not hold $stack_name's stack"
    echo "$venv"
}

run_pytest() {  # run_pytest VENV ARGS...: on the clone's edgeload (PYTHONPATH puts the
    # tree first; the CLI tests run `python -m edgeload`, which finds it the same way)
    local venv=$1
    shift
    PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" "$venv/bin/python" -m pytest \
        -n "${EDGELOAD_TEST_WORKERS:-2}" --dist loadfile -p no:cacheprovider -p no:benchmark "$@"
}
