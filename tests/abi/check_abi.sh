#!/usr/bin/env bash
# ABI check: libshoal.so exports exactly the symbols listed for the SHOAL_ABI_VERSION its
# header declares (sdk/abi/shoal-abi-<version>.txt), every one of them named shoal_*, and the
# list matches the SHOAL_EXPORT declarations of shoal.h. A symbol that appears or disappears
# without the ABI version changing fails here.
#   check_abi.sh LIBSHOAL_SO SHOAL_H ABI_DIR
set -euo pipefail
lib=$1 header=$2 dir=$3
version=$(sed -n 's/^#define SHOAL_ABI_VERSION \([0-9][0-9]*\)$/\1/p' "$header")
[ -n "$version" ] || { echo "no '#define SHOAL_ABI_VERSION N' in $header"; exit 1; }
list="$dir/shoal-abi-$version.txt"
if [ ! -f "$list" ]; then
  echo "SHOAL_ABI_VERSION is $version but $list does not exist: write the new ABI's symbol list there"
  exit 1
fi
expected=$(grep -v '^#' "$list" | sed '/^$/d' | sort -u)
exported=$(nm -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' | sort -u)
declared=$(grep -v '^#' "$header" | grep -o 'SHOAL_EXPORT [^(]*(' | sed -E 's/.*[ *]([A-Za-z_0-9]+)\($/\1/' | sort -u)
status=0
if other=$(grep -v '^shoal_' <<<"$exported"); then
  echo "exported symbols outside the shoal_ namespace (hide them: visibility / sdk/shoal.map):"
  echo "$other"
  status=1
fi
if ! out=$(diff <(echo "$expected") <(echo "$exported")); then
  echo "libshoal.so's exports differ from $list (ABI $version) ('>' appeared, '<' disappeared)."
  echo "An ABI change needs a new SHOAL_ABI_VERSION in shoal.h and a new list:"
  echo "$out"
  status=1
fi
if ! out=$(diff <(echo "$expected") <(echo "$declared")); then
  echo "shoal.h's SHOAL_EXPORT declarations differ from $list ('>' declared only, '<' listed only):"
  echo "$out"
  status=1
fi
[ "$status" -eq 0 ] && echo "ABI $version: $(wc -l <<<"$exported") symbols, as listed"
exit "$status"
