#!/bin/sh
# libcurl is opened only when something needs it (core/src/model/curl_api.hpp): a replay that
# writes HDF5 and uses no LLM must not load it (nor, with MLPRIO_HDF5_STATIC, the shared HDF5
# that would pull it in), and an llm:URL replay must load it on demand and still finish when the
# endpoint is dead. Checked with glibc's loader trace (LD_DEBUG=files), which names every
# library a process maps, whether needed at start or opened by dlopen.
# Usage: lazy_libraries.sh MLPRIO_REPLAY TRACE WORK_DIR HDF5_STATIC(ON|OFF) HAVE_CURL(ON|OFF)
set -eu
replay="$1" trace="$2" work="$3" h5static="$4" curl="$5"
rm -rf "$work" && mkdir -p "$work"

LD_DEBUG=files "$replay" run --trace "$trace" --policy fcfs --backfill easy \
  --out "$work/run.h5" --json > "$work/plain.json" 2> "$work/plain.ld"
grep -q '"avg_bsld"' "$work/plain.json"
[ -s "$work/run.h5" ]
if grep -q 'file=libcurl' "$work/plain.ld"; then
  echo "FAIL: a replay without an LLM loaded libcurl:"; grep 'file=libcurl' "$work/plain.ld"
  exit 1
fi
if [ "$h5static" = ON ] && grep -q 'file=libhdf5' "$work/plain.ld"; then
  echo "FAIL: MLPRIO_HDF5_STATIC=ON but the shared HDF5 was loaded:"; grep 'file=libhdf5' "$work/plain.ld"
  exit 1
fi
echo "plain replay: $(grep -c 'file=.*generating link map' "$work/plain.ld") libraries, no libcurl"

[ "$curl" = ON ] || { echo "built without libcurl: the llm:URL half is not run"; exit 0; }
# Port 9 (discard) on loopback: nothing listens, every request is a transport error.
LD_DEBUG=files "$replay" run --trace "$trace" --policy llm:http://127.0.0.1:9 --backfill easy \
  --json > "$work/llm.json" 2> "$work/llm.ld"
grep -q '"avg_bsld"' "$work/llm.json"
grep -q 'file=libcurl.so.4 \[0\];  dynamically loaded' "$work/llm.ld" || {
  echo "FAIL: llm:URL did not open libcurl by dlopen:"; grep 'libcurl' "$work/llm.ld" || true
  exit 1
}
echo "llm:URL replay: libcurl opened on demand"
