"""The host→device copy rate of this machine's GPU, measured with torch, for scripts/gpu-check.sh (issue #38):
pageable and pinned host buffers of --mib MiB, median of --runs copies, GB/s (1e9 bytes/s), as JSON."""

import argparse
import json
import statistics
import time

import torch


def rate(src, dst, runs):
    times = []
    for _ in range(runs):
        torch.cuda.synchronize()
        t = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return src.numel() * src.element_size() / statistics.median(times) / 1e9


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mib", type=int, default=1024)
    p.add_argument("--runs", type=int, default=9)
    a = p.parse_args()
    n = a.mib << 20
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    pageable = torch.randint(0, 255, (n,), dtype=torch.uint8)
    pinned = pageable.pin_memory()
    print(json.dumps({"mib": a.mib, "runs": a.runs, "pageable_GBps": rate(pageable, dst, a.runs),
                      "pinned_GBps": rate(pinned, dst, a.runs), "gpu": torch.cuda.get_device_name(0)}))


if __name__ == "__main__":
    main()
