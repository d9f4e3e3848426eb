#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds and runs separate consumer projects
# against it: C with find_package(shoal) (shoal::shoal, libshoal.so), C++ with
# find_package(shoal) (shoal::shoal_static, the C++ API), and C with pkg-config.
#   consumer_test.sh BUILD_DIR PACKAGE_TEST_DIR WORK_DIR
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work"
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/shoal-aggregator bin/shoal-client bin/shoal-peer bin/shoal-keygen include/shoal/shoal.h \
  include/shoal/client.h include/shoal/config.h lib/libshoal.a lib/libshoal.so; do
  [ -e "$prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done
libdir=$(dirname "$(find "$prefix" -name libshoal.so | head -1)")
pcdir=$(dirname "$(find "$prefix" -name shoal.pc | head -1)")

for project in c cxx; do
  cmake -S "$src/$project" -B "$work/$project" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
  cmake --build "$work/$project" >/dev/null
done
"$work/c/c_consumer"
"$work/cxx/cxx_consumer"

export PKG_CONFIG_PATH="$pcdir"
[ "$(pkg-config --modversion shoal)" = "$(sed -n 's/^#define SHOAL_VERSION_STRING "\(.*\)"$/\1/p' "$prefix/include/shoal/config.h")" ]
cc -std=c99 -Wall -Werror "$src/c/main.c" $(pkg-config --cflags --libs shoal) -o "$work/pc_consumer"
LD_LIBRARY_PATH="$libdir" "$work/pc_consumer"
echo "consumers built by find_package (C, C++) and pkg-config (C): ok"
