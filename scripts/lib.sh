# shellcheck shell=bash
# Sourced by scripts/try and scripts/test; not meant to be run on its own.
#
# ensure_tool makes sure a command-line tool the scripts need is installed. On Debian and
# Ubuntu it installs the package itself when it may (as root, or through sudo that needs no
# password); anywhere else it prints the line to install it and fails, so that nothing is
# ever installed behind the user's back on a machine we know less about.

# Prefix of the scripts' own messages, set by the script that sources this file.
: "${LIB_NAME:=${0##*/}}"

say() {
    printf '%s: %s\n' "$LIB_NAME" "$*" >&2
}

# The command that runs its arguments as root without asking for a password, printed on
# stdout ("" when we already are root); fails when there is none.
_as_root_prefix() {
    if [[ $(id -u) -eq 0 ]]; then
        printf ''
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        printf 'sudo -n'
    else
        return 1
    fi
}

# ensure_tool COMMAND APT_PACKAGE DNF_PACKAGE BREW_PACKAGE
ensure_tool() {
    local cmd=$1 apt_pkg=$2 dnf_pkg=$3 brew_pkg=$4 root
    command -v "$cmd" >/dev/null 2>&1 && return 0

    if command -v apt-get >/dev/null 2>&1 && root=$(_as_root_prefix); then
        say "$cmd not found: installing the '$apt_pkg' package with apt-get"
        # $root is empty or 'sudo -n': word splitting is wanted here.
        # shellcheck disable=SC2086
        if $root env DEBIAN_FRONTEND=noninteractive apt-get -qq update &&
            $root env DEBIAN_FRONTEND=noninteractive apt-get -y -qq \
                --no-install-recommends install "$apt_pkg" >/dev/null &&
            command -v "$cmd" >/dev/null 2>&1; then
            return 0
        fi
        say "installing '$apt_pkg' failed; see the apt-get messages above"
        return 1
    fi

    say "$cmd is needed but not installed. Install it with:"
    if command -v apt-get >/dev/null 2>&1; then
        say "    sudo apt-get update && sudo apt-get install -y $apt_pkg"
    elif command -v dnf >/dev/null 2>&1; then
        say "    sudo dnf install -y $dnf_pkg"
    elif command -v brew >/dev/null 2>&1; then
        say "    brew install $brew_pkg"
    else
        say "    your system's package manager (Debian/Ubuntu: $apt_pkg, Fedora: $dnf_pkg, Homebrew: $brew_pkg)"
    fi
    say "then run this script again."
    return 1
}

ensure_redis_server() {
    ensure_tool redis-server redis-server redis redis
}
