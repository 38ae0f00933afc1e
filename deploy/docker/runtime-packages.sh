#!/bin/sh
# Prints the Debian/Ubuntu packages that own the shared libraries the given binaries load,
# one per line, so a runtime image installs exactly those and no -dev package.
#   runtime-packages.sh bin/tessera bin/tessera-coordinator bin/tessera-worker
# Libraries that no package owns are skipped with a note on stderr. Fails when a binary
# is missing or has unresolved libraries.
set -eu
[ "$#" -gt 0 ] || { echo "usage: $0 BINARY..." >&2; exit 2; }
for bin in "$@"; do
  [ -f "$bin" ] || { echo "runtime-packages: no such file: $bin" >&2; exit 1; }
  if ldd "$bin" | grep -q 'not found'; then
    echo "runtime-packages: $bin has unresolved libraries:" >&2
    ldd "$bin" | grep 'not found' >&2
    exit 1
  fi
done
libs=$(for bin in "$@"; do ldd "$bin"; done | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u)
# Merged /usr: dpkg records a file under the path its package ships, /lib/... or
# /usr/lib/..., whichever ldd printed; ask once for every spelling.
spellings() {
  real=$(readlink -f "$1")
  printf '%s\n' "$1" "/usr$1" "${1#/usr}" "$real" "/usr$real" "${real#/usr}"
}
candidates=$(for lib in $libs; do spellings "$lib"; done | sort -u)
# shellcheck disable=SC2086
owners=$(dpkg-query -S $candidates 2>/dev/null | grep ': /' || true)
for lib in $libs; do
  owner=$(spellings "$lib" | while read -r p; do
    printf '%s\n' "$owners" | awk -v p="$p" '{ i = index($0, ": /"); if (substr($0, i + 2) == p) print substr($0, 1, i - 1) }'
  done | head -n 1 | cut -d, -f1 | cut -d: -f1)
  if [ -n "$owner" ]; then
    echo "$owner"
  else
    echo "runtime-packages: no package owns $lib (skipped)" >&2
  fi
done | sort -u
