#!/bin/sh
# fetch-debs.sh: download (not install) the Debian packages the GPU proof
# machine lacks into .deps/ at the repository root (git-ignored), so that
# bench/gpu/run.sh can unpack them there with `dpkg -x` and build zbsched
# without root and without a network.
#
# The GPU machine has nvcc, cuBLAS, NCCL (Python wheel) and PyTorch but no
# glpk, cjson, graphviz, check, openblas, meson, ninja or pkg-config.  The
# list below is the link-time closure of what meson.build needs, minus what
# every Linux has (libc, libstdc++, zlib, libexpat: Debian 12's libexpat
# needs glibc 2.36 and would shadow the system's for Python): checked by unpacking
# into an empty prefix and configuring a build against it (docs/gpu.md).
#
# usage: bench/gpu/fetch-debs.sh            (run on a Debian 12 machine with apt)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
dest="$root/.deps"
mkdir -p "$dest"
cd "$dest"
PKGS="
  libglpk-dev libglpk40 libamd2 libcolamd2 libsuitesparseconfig5 libltdl7 libgmp10
  libcjson-dev libcjson1
  libgraphviz-dev libgvc6 libcgraph6 libcdt5 libpathplan4 libxdot4 libgvpr2 liblab-gamut1
  check libsubunit-dev libsubunit0
  libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0 libgfortran5 libquadmath0
  meson ninja-build
  pkgconf pkgconf-bin libpkgconf3
"
# shellcheck disable=SC2086
apt-get download $PKGS
ls -1 "$dest"/*.deb | wc -l | sed 's/^/fetched .deb files: /'
du -sh "$dest" | sed 's/^/size: /'
