"""CPU decode and prefill, side by side: our engine (fast path on and off), mlx-lm, llama.cpp.

Usage:
    python benchmarks/bench_cpu.py [--rounds 5] [--llama-python PYTHON]

Every configuration runs in a process of its own (the fast path is process-wide),
and each round runs them all in a rotated order, so drift of a shared machine
hits all of them alike. Figures are medians over rounds with min-max, and ratios
are taken round by round (paired), then their median.

- ours (fast path on / off): the engine on the bundled default model (float32); and
  with the fast path on but MLX's own attention (``MLX_NOTEBOOK_FUSED_ATTENTION=0``).
- ours, 4-bit: the engine on ``default:q4`` (the GGUF's own 4-bit weights, 8-bit
  embedding), with the quantized products on the fast path's native kernels.
- mlx-lm: ``mlx_lm.stream_generate`` on the same converted float32 weights, with
  OpenBLAS loaded as in the engine and no fast path; and on the 4-bit weights
  (MLX's own quantized kernels).
- llama.cpp: llama-cpp-python with 2 threads, on an f32 copy of the same GGUF
  (written here with the ``gguf`` package) and on the Q4_1 file as shipped. It is
  optional (the ``bench`` extra, ~10 minutes to compile); ``--llama-python`` points
  at another interpreter that has it.

Also printed: this machine's memory read bandwidth (numpy), the decode limit it
implies for the float32 weights, and Stop latency mid-prefill (20 random cancels).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")  # timed runs run: no replays

Q4 = "ours, default:q4"
DECODE_PROMPT = "Describe a rainy afternoon in a small town."
ROOT = Path(__file__).resolve().parent.parent

OURS = r"""
import json, random, sys, time
import mlx_notebook
from mlx_notebook.engine import Engine, Request
prompt_text, n, stops = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spec = sys.argv[5]
eng = Engine.default()
eng.submit(Request("hi", model=spec, max_tokens=2)).result()
greedy = dict(temperature=0, repetition_penalty=1)  # as llama.cpp and mlx-lm run it
r = eng.submit(Request(prompt_text, model=spec, max_tokens=n, reuse_cache=False, **greedy)).result()
out = {"decode": r.stats.generation_tps, "ids": r.token_ids}
tok = eng.registry.peek(spec).tokenizer
long_prompt = tok.decode(tok.encode(open(sys.argv[4]).read())[:int(sys.argv[6])])
once = dict(model=spec, chat=False, max_tokens=1, reuse_cache=False)
r = eng.submit(Request(long_prompt, **once)).result()
out["prefill"], out["chunk"] = r.stats.prompt_tps, r.stats.prefill_chunk
lat = []
for _ in range(stops):
    job = eng.submit(Request(long_prompt, **once))
    next(e for e in job.events(detach=True) if type(e).__name__ == "PrefillProgress")
    time.sleep(random.uniform(0.0, 6.0))
    t0 = time.perf_counter()
    job.cancel()
    job.wait()
    if job.finished.finish_reason == "cancelled":
        lat.append(time.perf_counter() - t0)
out["stop"] = lat
out["fast"] = mlx_notebook.cpu.blas.status()["gemv"]
print(json.dumps(out))
"""

MLX_LM = r"""
import json, sys
import mlx_notebook  # OpenBLAS, as the engine has it (MLX_NOTEBOOK_FAST=0: no fast path)
import mlx.core as mx
from mlx_lm import load, stream_generate
from mlx_lm.sample_utils import make_sampler
path, prompt_text, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
model, tok = load(path)
model.set_dtype(mx.float32)
msgs = [{"role": "user", "content": prompt_text}]
ids = tok.apply_chat_template(msgs, add_generation_prompt=True)
for r in stream_generate(model, tok, ids, max_tokens=n, sampler=make_sampler(0.0)):
    pass
out = {"decode": r.generation_tps}
long_ids = tok.encode(open(sys.argv[4]).read())[:int(sys.argv[5])]
for r in stream_generate(model, tok, long_ids, max_tokens=1):
    pass
out["prefill"] = r.prompt_tps
print(json.dumps(out))
"""

# A child's own peak resident memory. Linux carries ru_maxrss across exec (a parent that
# once held a 4 GB file makes every child report 4 GB); VmHWM belongs to the new image.
PEAK = r"""
def peak_rss():
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
"""

# llama.cpp runs with its defaults: its repacked CPU buffers (Q4_0 and Q4_K in 8-row
# interleaved blocks on int8 dots) are what users get. With MLXNB_LLAMA_PLAIN=1
# (``--llama-plain``) it loads without them, as these benchmarks did until 2026-12-01:
# on the Intel Xeon (AMX) multi-token batches of the Q4_1 file crashed in them.
LLAMA_PLAIN = r"""
if os.environ.get("MLXNB_LLAMA_PLAIN") == "1":
    _default = llama_cpp.llama_model_default_params
    def _params():
        p = _default()
        p.use_extra_bufts = False
        return p
    llama_cpp.llama_model_default_params = _params
    llama_cpp.llama.llama_cpp.llama_model_default_params = _params
"""

LLAMA = (
    PEAK
    + r"""
import json, os, resource, sys, time
import llama_cpp
from llama_cpp import Llama
"""
    + LLAMA_PLAIN
    + r"""
path, n = sys.argv[1], int(sys.argv[2])
llm = Llama(model_path=path, n_threads=2, n_threads_batch=2, n_ctx=2048, n_batch=512,
            verbose=False)
msgs = [{"role": "user", "content": sys.argv[3]}]
t_first = None
count = 0
for chunk in llm.create_chat_completion(msgs, max_tokens=n, temperature=0.0, stream=True):
    if chunk["choices"][0]["delta"].get("content"):
        count += 1
        if t_first is None:
            t_first = time.perf_counter()
t_end = time.perf_counter()
out = {"decode": (count - 1) / (t_end - t_first)}
n_pre = int(sys.argv[5]) if len(sys.argv) > 5 else 1500
long_ids = llm.tokenize(open(sys.argv[4]).read().encode())[:n_pre]
llm.reset()
t0 = time.perf_counter()
llm.eval(long_ids)
out["prefill"] = len(long_ids) / (time.perf_counter() - t0)
out["rss"] = peak_rss()
print(json.dumps(out))
"""
)


def f32_gguf(src: Path, dst: Path) -> Path:
    """An f32 copy of a GGUF file: every quantized tensor dequantized, metadata kept."""
    if dst.is_file():
        return dst
    dst.parent.mkdir(parents=True, exist_ok=True)
    import gguf
    import numpy as np

    def dequantized(t):
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        return data.reshape([int(d) for d in reversed(t.shape)]), None

    rewrite_gguf(src, dst, gguf.LlamaFileType.ALL_F32, dequantized)
    return dst


def rewrite_gguf(src: Path, dst: Path, file_type, convert) -> None:
    """``src`` written to ``dst`` with its metadata, as ``file_type``, each tensor as
    ``convert(tensor)`` gives it: ``(array, raw GGML type or None)``."""
    import gguf

    reader = gguf.GGUFReader(str(src))
    writer = gguf.GGUFWriter(str(dst), reader.fields["general.architecture"].contents())
    skip = ("general.architecture", "general.file_type")
    copy_fields(reader, writer, lambda name: not name.startswith("GGUF.") and name not in skip)
    writer.add_file_type(file_type)
    for t in reader.tensors:
        data, raw = convert(t)
        writer.add_tensor(t.name, data, **({"raw_dtype": raw} if raw is not None else {}))
    write_out(writer)


def copy_fields(reader, writer, keep) -> None:
    """The metadata fields of ``reader`` whose name ``keep`` accepts, into ``writer``."""
    import gguf

    for name, field in reader.fields.items():
        if keep(name):
            kind = field.types[0]
            sub = {"sub_type": field.types[-1]} if kind == gguf.GGUFValueType.ARRAY else {}
            writer.add_key_value(name, field.contents(), kind, **sub)


def write_out(writer) -> None:
    """Header, metadata and tensors to the file; closed."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def bandwidth_gbs() -> tuple[float, float, float]:
    """Memory read bandwidth, best of 5 over 512 MB: numpy's sum (one thread), OpenBLAS
    sgemv (all threads, as decoding reads weights), and numpy's sums of a slice on each
    thread the process may use (what the cores read together, whatever the kernel: on
    the Zen 4 here a fast path's decode read faster than sgemv)."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    a = np.ones(128 * 2**20, dtype=np.float32)
    w = a.reshape(2**17, 1024)
    x = np.ones(1024, dtype=np.float32)
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    slices = np.array_split(a, n or 1)
    best = [0.0, 0.0, 0.0]
    with ThreadPoolExecutor(len(slices)) as pool:  # numpy's sum releases the GIL
        # the slices first: after sgemv, OpenBLAS's workers may still spin on the cores
        ways = {2: lambda: list(pool.map(np.sum, slices)), 0: a.sum, 1: lambda: w @ x}
        for _ in range(5):
            for i, fn in ways.items():
                t0 = time.perf_counter()
                fn()
                best[i] = max(best[i], a.nbytes / (time.perf_counter() - t0) / 1e9)
    return best[0], best[1], best[2]


def llama_targets(llama_python: str | None, q41: Path) -> list[tuple[str, str, Path]]:
    """llama.cpp's two configurations, ``(name, interpreter, GGUF)``: the f32 copy of the
    default GGUF (written on first use) and the Q4_1 file; none without llama-cpp-python."""
    if llama_python is None:
        try:
            import llama_cpp  # noqa: F401

            llama_python = sys.executable
        except ImportError:
            print("llama-cpp-python not installed (pip install '.[bench]'): llama.cpp skipped")
            return []
    from mlx_notebook.models.gguf import cache_root

    f32 = f32_gguf(q41, cache_root() / "bench" / "SmolLM2-135M-Instruct.f32.gguf")
    return [("llama.cpp f32", llama_python, f32), ("llama.cpp Q4_1", llama_python, q41)]


def llama_env(args) -> dict:
    """The environment of llama.cpp's runs: ``--llama-plain`` turns its repacked buffers off."""
    return {"MLXNB_LLAMA_PLAIN": "1"} if getattr(args, "llama_plain", False) else {}


def add_llama_args(ap) -> None:
    """``--llama-python`` and ``--llama-plain``, the options of every llama.cpp comparison."""
    ap.add_argument("--llama-python", default=None, help="interpreter with llama_cpp")
    ap.add_argument(
        "--llama-plain",
        action="store_true",
        help="llama.cpp without its repacked CPU buffers (they crashed on an AMX Xeon)",
    )


def print_speeds(args, names: list[str], results: dict, width: int) -> None:
    """Each configuration's decode and prefill tok/s: median (min, max) over the rounds."""
    print(f"\nDecode ({args.tokens} tokens, greedy), tok/s, median over {args.rounds} rounds:")
    for name in names:
        print(f"  {name:{width}s} {fmt([x['decode'] for x in results[name]], 'tok/s')}")
    print(f"\nPrefill of a {args.prefill}-token prompt, tok/s:")
    for name in names:
        print(f"  {name:{width}s} {fmt([x['prefill'] for x in results[name]], 'tok/s')}")


def run(cmd, env=None) -> dict:
    res = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=900
    )
    if res.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def fmt(xs: list[float], unit: str) -> str:
    med = statistics.median(xs)
    return f"{med:7.1f} {unit} (min {min(xs):.1f}, max {max(xs):.1f}, n={len(xs)})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--stops", type=int, default=4, help="random Stops per engine process")
    ap.add_argument("--prefill", type=int, default=1500, help="prompt tokens for prefill")
    add_llama_args(ap)
    ap.add_argument("--save", default=None, help="write every round's raw results to this file")
    args = ap.parse_args()

    import mlx_notebook  # noqa: F401 - OpenBLAS first
    from mlx_notebook.models.default import default_gguf
    from mlx_notebook.models.gguf import convert_gguf

    q41 = default_gguf()
    mlx_dir, q_dir = convert_gguf(q41, "f32"), convert_gguf(q41, "q")
    text = ROOT / "docs" / "performance-log.md"  # long, stable text (the old lab notes)
    py, pre = sys.executable, str(args.prefill)
    ours = [py, "-c", OURS, DECODE_PROMPT, str(args.tokens)]
    configs = {
        "ours, fast path on": ([*ours, str(args.stops), str(text), "default:f32", pre],
                               {"MLX_NOTEBOOK_FAST": "1"}),
        "ours, fast path off": ([*ours, "0", str(text), "default:f32", pre],
                                {"MLX_NOTEBOOK_FAST": "0"}),
        "ours, MLX's attention": ([*ours, "0", str(text), "default:f32", pre],
                                  {"MLX_NOTEBOOK_FUSED_ATTENTION": "0"}),
        "ours, default:q4": ([*ours, str(args.stops), str(text), "default:q4", pre], {}),
        "mlx-lm": ([py, "-c", MLX_LM, str(mlx_dir), DECODE_PROMPT, str(args.tokens), str(text),
                    pre],
                   {"MLX_NOTEBOOK_FAST": "0"}),
        "mlx-lm, 4-bit": ([py, "-c", MLX_LM, str(q_dir), DECODE_PROMPT, str(args.tokens),
                           str(text), pre], {"MLX_NOTEBOOK_FAST": "0"}),
    }  # fmt: skip
    for name, llama_py, path in llama_targets(args.llama_python, q41):
        cmd = [llama_py, "-c", LLAMA, str(path), str(args.tokens), DECODE_PROMPT, str(text), pre]
        configs[name] = (cmd, llama_env(args))
    names = list(configs)
    results: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            cmd, env = configs[name]
            results[name].append(run(cmd, env))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        if args.save:
            Path(args.save).write_text(json.dumps(results))

    one, gemv, every = bandwidth_gbs()
    weights = sum(p.stat().st_size for p in Path(mlx_dir).glob("*.safetensors"))
    print_speeds(args, names, results, 22)

    def ratio(a: str, b: str, key: str) -> str:
        rs = [x[key] / y[key] for x, y in zip(results[a], results[b])]
        return f"{statistics.median(rs):.2f}x (min {min(rs):.2f}, max {max(rs):.2f})"

    print("\nPaired ratios (round by round):")
    print(f"  decode, fast path on / off:      {ratio(names[0], names[1], 'decode')}")
    print(f"  decode, ours / mlx-lm:           {ratio(names[0], 'mlx-lm', 'decode')}")
    if "llama.cpp f32" in results:
        print(f"  decode, ours / llama.cpp f32:    {ratio(names[0], 'llama.cpp f32', 'decode')}")
        print(f"  decode, ours / llama.cpp Q4_1:   {ratio(names[0], 'llama.cpp Q4_1', 'decode')}")
        print(f"  decode, q4 / llama.cpp Q4_1:     {ratio(Q4, 'llama.cpp Q4_1', 'decode')}")
        print(f"  prefill, ours / llama.cpp f32:   {ratio(names[0], 'llama.cpp f32', 'prefill')}")
        print(f"  prefill, q4 / llama.cpp Q4_1:    {ratio(Q4, 'llama.cpp Q4_1', 'prefill')}")
    print(f"  decode, q4 / f32 (ours):         {ratio(Q4, names[0], 'decode')}")
    print(f"  decode, q4 / mlx-lm 4-bit:       {ratio(Q4, 'mlx-lm, 4-bit', 'decode')}")
    print(f"  prefill, q4 / f32 (ours):        {ratio(Q4, names[0], 'prefill')}")
    print(f"  prefill, ours / mlx-lm:          {ratio(names[0], 'mlx-lm', 'prefill')}")
    print(f"  prefill, fused / MLX's attention: {ratio(names[0], names[2], 'prefill')}")
    same = all(x["ids"] == y["ids"] for x, y in zip(results[names[0]], results[names[1]]))
    print(f"  greedy tokens, fast path on == off: {same}")
    for name in (names[0], Q4):
        stops = [s * 1e3 for x in results[name] for s in x["stop"]]
        if stops:
            print(
                f"\nStop mid-prefill ({name}, {len(stops)} random cancels): median "
                f"{statistics.median(stops):.0f} ms, max {max(stops):.0f} ms; largest chunk "
                f"{max(x['chunk'] for x in results[name])} tokens"
            )
    print(
        f"\nMemory read bandwidth, best of 5 over 512 MB: {one:.1f} GB/s (numpy sum, one "
        f"thread), {gemv:.1f} GB/s (OpenBLAS sgemv, all threads), {every:.1f} GB/s (numpy "
        f"sums, a slice a thread). float32 weights: {weights / 1e6:.0f} MB per token -> "
        f"decode limit {max(gemv, every) * 1e9 / weights:.1f} tok/s (the faster of the two)"
    )


if __name__ == "__main__":
    main()
