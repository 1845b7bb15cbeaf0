#!/usr/bin/env bash
# The first checks on a GPU machine (../shared/GPU_NOTES.md's list, by risk), each under a
# time limit, printed and kept in .membench/gpu-checks.log: what the image really holds
# before any cell trusts it. Run by scripts/gpu_node.sh once per machine; never fails.
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
check() {
    local name=$1
    shift
    echo "== $name"
    timeout 120 "$@" 2>&1 | tail -n 12
    echo "-- $name: exit ${PIPESTATUS[0]}"
}
{
    check host sh -c 'nproc; grep -m1 "model name" /proc/cpuinfo; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nvcc --version | tail -n 2; '"$PY"' --version'
    check torch "$PY" -c "import torch; print(torch.__version__, torch.cuda.is_available(), torch.backends.cudnn.version(), torch.cuda.get_device_name())"
    check jax env JAX_PLATFORMS=cuda "$PY" -c "import jax; d = jax.devices()[0]; print(jax.__version__, d.device_kind, d.memory_stats()['bytes_limit'])"
    check torch-compile "$PY" -c "import torch; print(torch.compile(lambda x: x.sin() + 1)(torch.ones(8, device='cuda')))"
    check nvml-sees-this-process "$PY" -c "import os, torch, pynvml as n; x = torch.empty(2**28, device='cuda'); n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0); print(os.getpid(), [(p.pid, p.usedGpuMemory) for p in n.nvmlDeviceGetComputeRunningProcesses(h)])"
    # a capacity budget's fraction is of NVML's total; torch and XLA apply it to CUDA's (the
    # H200: 140.4 against 139.8 GiB, a 24 GiB budget enforced as 23.90): is NVML's reserve
    # (memory info v2) the difference, so that the fraction can be of what CUDA counts?
    check device-totals "$PY" -c "
import torch, pynvml as n
n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0)
m = n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
print('nvml total', m.total, 'reserved', m.reserved, 'total-reserved', m.total - m.reserved)
print('cuda total', torch.cuda.get_device_properties(0).total_memory, torch.cuda.mem_get_info())
"
    check alloc-conf-and-fraction env PYTORCH_ALLOC_CONF=expandable_segments:True "$PY" -c "
import torch
torch.cuda.set_per_process_memory_fraction(2**30 / torch.cuda.get_device_properties(0).total_memory)
x = torch.empty(2**26, device='cuda')
print('expandable:', [s.get('is_expandable') for s in torch.cuda.memory._snapshot()['segments']][:2])
try:
    y = torch.empty(2**29, device='cuda')
    print('fraction NOT enforced: 2 GiB allocated under a 1 GiB limit')
except torch.OutOfMemoryError as e:
    print('fraction enforced:', str(e)[:100])
"
    # the card as NVML, torch and XLA read it, against the description the predictions use
    # (kept in results/devices/<machine>/card.json, which the part's pack carries back)
    check card "$PY" -m membench gpu-predict --describe-card
} 2>&1 | tee .membench/gpu-checks.log
exit 0
