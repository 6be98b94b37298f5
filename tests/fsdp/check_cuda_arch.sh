#!/usr/bin/env bash
# check_cuda_arch.sh BUILD_DIR "ARCHS" [CUOBJDUMP LIBRARY] — the CUDA kernels are compiled for
# exactly ARCHS (CMake CUDA_ARCHITECTURES syntax: 80-real = machine code only, 90 = machine code
# + PTX, 90-virtual = PTX only), read from every nvcc line of BUILD_DIR/compile_commands.json;
# and, when cuobjdump is given (the toolkit here has none), from the built library too. Fails
# naming what is missing or extra (e.g. CUDA 13's default sm_75 alone).
set -uo pipefail
build=$1 archs=$2 dump=${3:-} lib=${4:-}
cc="$build/compile_commands.json"
[ -f "$cc" ] || { echo "no $cc"; exit 1; }
codes=$(grep -o -- '--generate-code=arch=compute_[0-9a-z]*,code=\[[^]]*\]' "$cc" | sort -u)
[ -n "$codes" ] || { echo "no nvcc --generate-code in $cc"; exit 1; }
echo "nvcc: $(tr '\n' ' ' <<<"$codes")"
elf=$(grep -o 'code=\[[^]]*\]' <<<"$codes" | grep -o 'sm_[0-9a-z]*' | sort -u)
ptx=$(grep -o 'code=\[[^]]*\]' <<<"$codes" | grep -o 'compute_[0-9a-z]*' | sed 's/compute_/sm_/' | sort -u)
if [ -n "$dump" ] && [ -x "$dump" ] && [ -f "$lib" ]; then
  elf=$("$dump" --list-elf "$lib" 2>/dev/null | grep -o 'sm_[0-9a-z]*' | sort -u)
  ptx=$("$dump" --list-ptx "$lib" 2>/dev/null | grep -o 'sm_[0-9a-z]*' | sort -u)
  echo "cuobjdump: ELF $(tr '\n' ' ' <<<"$elf")PTX $(tr '\n' ' ' <<<"$ptx")"
fi
bad=0 want_elf="" want_ptx=""
IFS=';' read -ra list <<<"$archs"
for a in "${list[@]}"; do
  n=${a%%-*}
  case $a in
    *-virtual) want_ptx="$want_ptx sm_$n" ;;
    *-real) want_elf="$want_elf sm_$n" ;;
    *) want_elf="$want_elf sm_$n"; want_ptx="$want_ptx sm_$n" ;;
  esac
done
for s in $want_elf; do grep -qx "$s" <<<"$elf" || { echo "missing machine code for $s"; bad=1; }; done
for s in $want_ptx; do grep -qx "$s" <<<"$ptx" || { echo "missing PTX for $s"; bad=1; }; done
for s in $elf; do [[ " $want_elf " == *" $s "* ]] || { echo "unexpected machine code for $s"; bad=1; }; done
for s in $ptx; do [[ " $want_ptx " == *" $s "* ]] || { echo "unexpected PTX for $s"; bad=1; }; done
[ "$bad" = 0 ] && echo "ok: $archs"
exit $bad
