#!/usr/bin/env python3
"""Times llama.cpp's own one-row dot products (ggml_vec_dot_<type>_q8_K from the llama-cpp-python wheel's
libggml-cpu.so, this machine's x86 build) per block type, as ns per 256-element super-block on one core: the shape
of engine/kernels BenchmarkGridDot (one row of 4096 super-blocks against Q8_K activations), to compare in one run:

    /work/venvs/llama/bin/python scripts/llamacpp_vecdot_speed.py
    go test -run XXX -bench BenchmarkGridDot -benchtime 200x ./engine/kernels

Needs llama-cpp-python, gguf and numpy (pip install llama-cpp-python gguf numpy).
"""
import ctypes
import glob
import os
import sys
import time

import numpy as np
import gguf
import llama_cpp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from ggml_blocks import HALF_OFFSETS, put_iq1m_d  # noqa: E402

NB = 4096
N = NB * 256
TYPES = ["Q4_K", "IQ4_XS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"]


def main():
    lib = ctypes.CDLL(glob.glob(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-cpu.so"))[0])
    lib.ggml_cpu_init()
    F = ctypes.POINTER(ctypes.c_float)
    lib.quantize_row_q8_K.argtypes = [F, ctypes.c_void_p, ctypes.c_int64]
    rng = np.random.default_rng(1)
    x = rng.normal(size=N).astype(np.float32)
    act = ctypes.create_string_buffer(NB * 292)
    lib.quantize_row_q8_K(x.ctypes.data_as(F), act, N)
    for name in TYPES:
        qtype = gguf.GGMLQuantizationType[name]
        size = gguf.GGML_QUANT_SIZES[qtype][1]
        w = rng.integers(0, 256, size=(NB, size), dtype=np.uint8)
        half = np.full(NB, 0.01, dtype=np.float16)  # sane float16 scales: no NaN or Inf products
        if name == "IQ1_M":
            put_iq1m_d(w, half)
        for off in HALF_OFFSETS[name]:
            w[:, off:off + 2] = half.view(np.uint8).reshape(NB, 2)
        dot = getattr(lib, f"ggml_vec_dot_{name.lower().replace('_k', '_K')}_q8_K")
        dot.argtypes = [ctypes.c_int, F, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                        ctypes.c_size_t, ctypes.c_int]
        s = ctypes.c_float()
        for _ in range(3):
            dot(N, ctypes.byref(s), 0, w.ctypes.data, 0, act, 0, 1)
        reps, best = 200, float("inf")
        for _ in range(5):  # the best of 5 timings: the machine is shared
            t0 = time.perf_counter()
            for _ in range(reps):
                dot(N, ctypes.byref(s), 0, w.ctypes.data, 0, act, 0, 1)
            best = min(best, (time.perf_counter() - t0) / reps / NB * 1e9)
        print(f"{name}: llama.cpp ggml_vec_dot {best:.1f} ns per super-block (best of 5)")


if __name__ == "__main__":
    main()
