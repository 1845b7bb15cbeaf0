#!/usr/bin/env bash
# Puts Debian's oneDNN 2.x (libdnnl-dev) where Jittor 1.3.11 looks for the oneDNN it would
# otherwise download (dnnl_lnx_2.2.0_cpu_gomp): headers in include/, the library in lib/ under
# its old name libmkldnn.so. (Jittor's mkl_include_path/mkl_lib_path variables crash in 1.3.11.)
set -euo pipefail
header=/usr/include/oneapi/dnnl/dnnl.hpp
library=$(ls /usr/lib/*-linux-gnu/libdnnl.so 2>/dev/null | head -n1 || true)
if [ ! -e "$header" ] || [ -z "$library" ]; then
    echo "warning: Debian's libdnnl-dev is not installed; Jittor will run without oneDNN" >&2
    exit 0
fi
home=$HOME/.cache/jittor
if [ -f "$home/config.json" ]; then  # Jittor's home can be moved (JITTOR_HOME in config.json)
    moved=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('JITTOR_HOME',''))" "$home/config.json")
    [ -n "$moved" ] && home=$moved/.cache/jittor
fi
target=$home/mkl/dnnl_lnx_2.2.0_cpu_gomp
mkdir -p "$target/include" "$target/lib"
for f in /usr/include/dnnl*.h /usr/include/dnnl*.hpp /usr/include/oneapi; do
    ln -sfn "$f" "$target/include/$(basename "$f")"
done
ln -sfn "$library" "$target/lib/libdnnl.so"
ln -sfn libdnnl.so "$target/lib/libmkldnn.so"
echo "oneDNN for Jittor: $target -> $(readlink -f "$library")"
