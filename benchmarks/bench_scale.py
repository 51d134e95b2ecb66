"""The 1B-class size on the CPU: ours vs llama.cpp vs mlx-lm, per precision, with memory.

Usage:
    python benchmarks/bench_scale.py [--rounds 3] [--shape 1b] [--llama-python PYTHON]
        [--types Q4_0,Q4_1] [--skip "mlx-lm f32,..."]

Builds a random-weight GGUF with Llama-3.2-1B's layers (hidden 2048, 16 layers,
32/8 heads, FFN 8192, tied embedding) and the bundled model's tokenizer (nothing
downloaded; its 49,152-token vocabulary makes 1.07B parameters, not 1.24B),
float32, then Q4_0 and Q4_1 from it: with llama.cpp's own quantizer when the
``bench`` extra is installed (its mix: a Q6_K token embedding), else with the
``gguf`` package (Q8_0 embedding). The files are cached under the conversion
cache (``$MLX_NOTEBOOK_CACHE/bench``).

Every configuration runs in a process of its own, each round in a rotated order,
greedy: decode tok/s (``--tokens``), prefill of a 512-token prompt, Stop latency at
random moments of that prefill (ours, ``--stops``), peak resident
memory (``VmHWM``) against the weights as loaded (and, for ours, the KV cache).
Ratios are paired round by round. The memory-bandwidth bound, measured after each
round (the faster of OpenBLAS sgemv on every thread and numpy's sums of a slice on each
thread), gives that round's decode limit of each file's bytes; ours is reported against
it, round by round, with the spread of its rounds. The machine's read rate moves within
seconds (here between about 47 and 67 GB/s), so ours also decodes
in ``--pairs`` slices of 16 tokens, each beside an sgemv run as long, alternating which
goes first: the rate its decode read over sgemv's next to it (read the median: a pair
that straddles a change of state reads high or low).

``--shape tiny`` runs the same on a small model in seconds (the script's own test).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

from bench_cpu import (
    LLAMA,
    PEAK,
    add_llama_args,
    bandwidth_gbs,
    copy_fields,
    fmt,
    llama_env,
    print_speeds,
    rewrite_gguf,
    run,
    write_out,
)

os.environ.setdefault("MLX_NOTEBOOK_RESULT_CACHE", "off")  # timed runs run: no replays

PROMPT = "Describe a rainy afternoon in a small town."
ROOT = Path(__file__).resolve().parent.parent
TEXT = ROOT / "docs" / "performance-log.md"  # long, stable text for the prefill
SHAPES = {  # hidden, layers, heads, kv heads, ffn
    "1b": (2048, 16, 32, 8, 8192),  # Llama-3.2-1B's layers
    "tiny": (256, 2, 4, 2, 512),
}

KV = (
    PEAK
    + r"""
def kv_bytes(cfg, tokens):  # float32 K and V, in mlx-lm's steps of 256 positions
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return 2 * cfg.num_hidden_layers * kv_heads * head_dim * 4 * -(-tokens // 256) * 256
"""
)

OURS = (
    KV
    + r"""
import json, random, re, resource, sys, time
from mlx.utils import tree_flatten
from mlx_notebook.engine import Engine, Request
path, n, text, n_pre = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
import mlx_lm.utils  # noqa: F401 - the libraries (transformers), as the mlx-lm child's base
eng = Engine.default()
base = peak_rss()  # before the model
greedy = dict(model=path, temperature=0, repetition_penalty=1, reuse_cache=False)
eng.submit(Request("hi", max_tokens=2, **greedy)).result()
loaded = peak_rss()  # the load's own peak (converting, huge pages), before any prompt
r = eng.submit(Request(sys.argv[5], max_tokens=n, **greedy)).result()
out = {"decode": r.stats.generation_tps, "tokens": len(r.token_ids), "rss_load": loaded}
lm = eng.registry.peek(path)
ids = lm.tokenizer.encode(open(text).read())[:n_pre]
r = eng.submit(Request(lm.tokenizer.decode(ids), chat=False, max_tokens=1, **greedy)).result()
out["prefill"] = r.stats.prompt_tps
out["weights"] = sum(v.nbytes for _, v in tree_flatten(lm.model.parameters()))
out["kv"] = kv_bytes(lm.model.args, r.stats.prompt_tokens)
out["chunk"], out["stop"] = r.stats.prefill_chunk, []
# The share of the weights on huge pages (`cpu.pages`): a round short of them is slower
pages = [c for c in getattr(lm.model, "_mlxnb_fast", None) or [] if "huge pages (" in c]
m = re.search(r"\(([\d.]+) of ([\d.]+) MiB", pages[0]) if pages else None
out["huge"] = float(m[1]) / max(float(m[2]), 1e-9) if m else 0.0
for _ in range(int(sys.argv[6])):  # Stop at a random moment of the prefill
    job = eng.submit(Request(lm.tokenizer.decode(ids), chat=False, max_tokens=1, **greedy))
    next(e for e in job.events(detach=True) if type(e).__name__ == "PrefillProgress")
    time.sleep(random.uniform(0.0, 0.8 * n_pre / out["prefill"]))
    t0 = time.perf_counter()
    job.cancel()
    job.wait()
    if job.finished.finish_reason == "cancelled":
        out["stop"].append(time.perf_counter() - t0)
out["rss"] = peak_rss()
out["base"] = base
# KV caches still held: the prompt cache keeps the cancelled prefills' (its byte budget)
held = [n for n in eng.info().notes if n.startswith(f"prompt cache of {path}:")]
if held:
    out["kv"] = max(out["kv"], float(held[0].split(" entries, ")[1].split(" MB")[0]) * 2**20)
# Decode against the machine's read rate next to it (the rate moves within seconds):
# slices of 16 tokens alternate with OpenBLAS sgemv over 1 GiB for as long, after the peak
import numpy as np
w, x, sec = np.ones((2**18, 1024), np.float32), np.ones(1024, np.float32), 1.0
def gemv(s):
    t0, b = time.perf_counter(), 0
    while time.perf_counter() - t0 < s:
        w @ x
        b += w.nbytes
    return b / (time.perf_counter() - t0) / 1e9
def ours():
    t0 = time.perf_counter()
    tps = eng.submit(Request(sys.argv[5], max_tokens=16, **greedy)).result().stats.generation_tps
    return tps, time.perf_counter() - t0
out["pairs"] = []
for i in range(int(sys.argv[7])):
    if i % 2:
        (tps, sec), g = ours(), gemv(sec)
    else:
        g = gemv(sec)
        tps, sec = ours()
    out["pairs"].append([tps * out["weights"] / 1e9, g])  # GB/s: ours, sgemv
eng.close()
print(json.dumps(out))
"""
)

MLX_LM = (
    KV
    + r"""
import json, resource, sys
import mlx_notebook  # OpenBLAS, as the engine has it (MLX_NOTEBOOK_FAST=0: no fast path)
import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm import load, stream_generate
from mlx_lm.sample_utils import make_sampler
base = peak_rss()  # before the model
path, n, text, n_pre = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
model, tok = load(path)
model.set_dtype(mx.float32)  # float16 is slow on x86 (MLX's kernels follow the scales)
ids = tok.apply_chat_template([{"role": "user", "content": sys.argv[5]}],
                              add_generation_prompt=True)
for r in stream_generate(model, tok, ids, max_tokens=n, sampler=make_sampler(0.0)):
    pass
out = {"decode": r.generation_tps, "tokens": r.generation_tokens}
for r in stream_generate(model, tok, tok.encode(open(text).read())[:n_pre], max_tokens=1):
    pass
out["prefill"] = r.prompt_tps
out["kv"] = kv_bytes(model.args, r.prompt_tokens)
out["weights"] = sum(v.nbytes for _, v in tree_flatten(model.parameters()))
out["rss"] = peak_rss()
out["base"] = base
print(json.dumps(out))
"""
)


def build_f32(dst: Path, shape: tuple, seed: int = 0) -> Path:
    """A random float32 llama GGUF of ``shape`` with the bundled model's tokenizer.

    Weights are normal with std 0.02 (as the models are initialised), norms 1; the
    token embedding is tied (no ``output.weight``), as Llama-3.2-1B's and SmolLM2's.
    """
    if dst.is_file():
        return dst
    import gguf
    import numpy as np

    from mlx_notebook.models.default import default_gguf

    hidden, layers, heads, kv_heads, ffn = shape
    head_dim = hidden // heads
    src = gguf.GGUFReader(str(default_gguf()))
    vocab = int(src.fields["llama.vocab_size"].contents())
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_suffix(".tmp")
    w = gguf.GGUFWriter(str(tmp), "llama")
    keep = ("general.quantization_version",)
    copy_fields(src, w, lambda name: name.startswith("tokenizer.") or name in keep)
    w.add_name(f"random llama {hidden}x{layers}")
    w.add_block_count(layers)
    w.add_context_length(8192)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(500000.0)
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    rng = np.random.default_rng(seed)

    def rand(*s):
        a = rng.standard_normal(s, dtype=np.float32)
        a *= 0.02
        return a

    w.add_tensor("token_embd.weight", rand(vocab, hidden))
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    for i in range(layers):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(b + "ffn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(b + "attn_q.weight", rand(heads * head_dim, hidden))
        w.add_tensor(b + "attn_k.weight", rand(kv_heads * head_dim, hidden))
        w.add_tensor(b + "attn_v.weight", rand(kv_heads * head_dim, hidden))
        w.add_tensor(b + "attn_output.weight", rand(hidden, heads * head_dim))
        w.add_tensor(b + "ffn_gate.weight", rand(ffn, hidden))
        w.add_tensor(b + "ffn_up.weight", rand(ffn, hidden))
        w.add_tensor(b + "ffn_down.weight", rand(hidden, ffn))
    write_out(w)
    tmp.rename(dst)
    return dst


def quantize(f32: Path, qtype: str, llama_python: str | None) -> tuple[Path, str]:
    """``f32`` quantized to ``qtype`` (Q4_0, Q4_1; with llama.cpp also its K-quant mixes,
    Q4_K_M, Q5_K_M, ...), and which quantizer made it."""
    tool = "llama.cpp" if llama_python else "gguf-py"
    if "_K" in qtype and not llama_python:
        raise SystemExit(f"{qtype}: only llama.cpp's quantizer writes K-quants (the bench extra)")
    dst = f32.with_name(f32.name.replace(".f32.", f".{qtype}.{tool}."))
    if dst.is_file():
        return dst, tool
    tmp = dst.with_suffix(".tmp")
    if llama_python:
        code = (
            "import ctypes, sys, llama_cpp as L\n"
            "p = L.llama_model_quantize_default_params()\n"
            f"p.ftype = L.LLAMA_FTYPE_MOSTLY_{qtype}\n"
            "p.nthread = 2\n"
            "rc = L.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), "
            "ctypes.byref(p))\n"
            "sys.exit(rc)\n"
        )
        import subprocess

        res = subprocess.run([llama_python, "-c", code, str(f32), str(tmp)],
                             capture_output=True, text=True)  # fmt: skip
        if res.returncode:
            raise RuntimeError(f"llama.cpp's quantizer failed:\n{res.stderr[-2000:]}")
    else:
        _quantize_gguf_py(f32, tmp, qtype)
    tmp.rename(dst)
    return dst, tool


def _quantize_gguf_py(src: Path, dst: Path, qtype: str) -> None:
    """The ``gguf`` package's quantizer: 2-D weights to ``qtype``, the embedding Q8_0."""
    import gguf

    T = gguf.GGMLQuantizationType

    def quantized(t):
        data = t.data.reshape([int(d) for d in reversed(t.shape)])
        if data.ndim != 2:
            return data, None
        kind = T.Q8_0 if t.name == "token_embd.weight" else getattr(T, qtype)
        return gguf.quants.quantize(data, kind), kind

    rewrite_gguf(src, dst, getattr(gguf.LlamaFileType, f"MOSTLY_{qtype}"), quantized)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prefill", type=int, default=512, help="prompt tokens for prefill")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    ap.add_argument("--stops", type=int, default=3, help="random Stops mid-prefill per run")
    ap.add_argument("--pairs", type=int, default=6, help="ours' decode slices beside sgemv")
    add_llama_args(ap)
    ap.add_argument(
        "--types",
        default="Q4_0,Q4_1",
        help="quantized files beside float32 (Q4_K_M, Q5_K_M: llama.cpp's mixes)",
    )
    ap.add_argument("--skip", default="", help="comma-separated configurations to leave out")
    ap.add_argument("--save", default=None, help="write every round's raw results to this file")
    args = ap.parse_args()

    from mlx_notebook.models.gguf import cache_root, convert_gguf

    llama_py = args.llama_python
    if llama_py is None:
        try:
            import llama_cpp  # noqa: F401

            llama_py = sys.executable
        except ImportError:
            print("llama-cpp-python not installed (pip install '.[bench]'): llama.cpp skipped")
    f32 = build_f32(cache_root() / "bench" / f"random-llama-{args.shape}.f32.gguf",
                    SHAPES[args.shape])  # fmt: skip
    files, tool = {"f32": f32}, "-"
    for q in filter(None, args.types.split(",")):
        files[q], tool = quantize(f32, q, llama_py)
    print(f"files: {', '.join(f'{k} {p.stat().st_size / 1e6:.0f} MB' for k, p in files.items())}"
          f" (quantized by {tool})", file=sys.stderr)  # fmt: skip
    py, common = sys.executable, [str(args.tokens), str(TEXT), str(args.prefill), PROMPT]
    skip = {name.strip() for name in args.skip.split(",") if name.strip()}
    configs: dict[str, tuple[list, dict]] = {}
    for k, path in files.items():
        if f"ours {k}" not in skip:
            cmd = [py, "-c", OURS, str(path), *common, str(args.stops), str(args.pairs)]
            configs[f"ours {k}"] = (cmd, {})
            convert_gguf(path, "q")  # the engine's own: converted here, not inside a timed run
        if f"mlx-lm {k}" not in skip:
            mlx_dir = convert_gguf(path, "f32" if k == "f32" else "q")
            configs[f"mlx-lm {k}"] = ([py, "-c", MLX_LM, str(mlx_dir), *common],
                                      {"MLX_NOTEBOOK_FAST": "0"})  # fmt: skip
        if llama_py and f"llama.cpp {k}" not in skip:
            cmd = [llama_py, "-c", LLAMA, str(path), str(args.tokens), PROMPT, str(TEXT),
                   str(args.prefill)]  # fmt: skip
            configs[f"llama.cpp {k}"] = (cmd, llama_env(args))
    names = list(configs)
    results: dict[str, list[dict]] = {n: [] for n in names}
    bounds: list[tuple[float, float, float]] = []
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            cmd, env = configs[name]
            results[name].append(run(cmd, env))
        bounds.append(bandwidth_gbs())  # the round's own: the machine's rate moves
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        if args.save:
            Path(args.save).write_text(json.dumps(results))
    report(args, names, results, files, bounds)


def report(args, names: list[str], results: dict, files: dict, bounds: list) -> None:
    print_speeds(args, names, results, 16)

    def ratio(a: str, b: str, key: str) -> str:
        if a not in results or b not in results:
            return "-"
        rs = [x[key] / y[key] for x, y in zip(results[a], results[b])]
        return f"{statistics.median(rs):.2f}x ({min(rs):.2f}-{max(rs):.2f})"

    print("\nOurs against each, paired by round: decode | prefill")
    for k in files:
        for peer in ("llama.cpp", "mlx-lm"):
            a, b = f"ours {k}", f"{peer} {k}"
            print(f"  {k:6s} / {peer:9s} {ratio(a, b, 'decode'):22s} {ratio(a, b, 'prefill')}")
    print("\nMemory: peak resident (median round), and what it grew by from the process's")
    print("size before loading (Python, MLX, mlx-lm and transformers imported), against the")
    print("weights as loaded (+ KV cache):")
    for name in names:
        last = sorted(results[name], key=lambda x: x["rss"])[(len(results[name]) - 1) // 2]
        rss, base = last["rss"], last.get("base", 0)
        w, kv = last.get("weights"), last.get("kv", 0)
        line = f"  {name:16s} {rss / 1e6:7.0f} MB"
        if w:
            line += (f"; +{(rss - base) / 1e6:.0f} MB over {base / 1e6:.0f} MB; loaded "
                     f"{w / 1e6:.0f} MB (+ KV {kv / 1e6:.0f} MB): "
                     f"{(rss - base) / (w + kv):.2f}x")  # fmt: skip
            if "rss_load" in last:  # which part set the peak: the load or the prompts
                line += f"; the load's peak {(last['rss_load'] - base) / w:.2f}x the weights"
        print(line)
    for name in names:
        stops = [s * 1e3 for x in results[name] for s in x.get("stop", [])]
        if stops:
            print(f"Stop mid-prefill, {name} ({len(stops)} random cancels): median "
                  f"{statistics.median(stops):.0f} ms, max {max(stops):.0f} ms; largest chunk "
                  f"{max(x['chunk'] for x in results[name])} tokens")  # fmt: skip
    limit = [max(gemv, every) for _, gemv, every in bounds]  # GB/s, each round's
    print("\nFile sizes and the decode limit at each round's read rate:")
    for k, p in files.items():
        size = p.stat().st_size
        print(f"  {k:6s} {size / 1e6:7.0f} MB -> {fmt([g * 1e9 / size for g in limit], 'tok/s')}")
        ours = [x["decode"] for x in results.get(f"ours {k}", [])]
        if ours:  # the weights read a token against the round's rate, and the spread
            rs = [d * size / 1e9 / g for d, g in zip(ours, limit)]
            mid = statistics.median(ours)
            print(f"         ours ÷ that limit {statistics.median(rs):.2f}x ({min(rs):.2f}-"
                  f"{max(rs):.2f}); rounds {min(ours) / mid:.2f}-{max(ours) / mid:.2f}x "
                  "their median")  # fmt: skip
            each = [f"{x['decode']:.1f} ({x.get('huge', 0):.0%})" for x in results[f"ours {k}"]]
            print(f"         each round's decode tok/s (weights on huge pages): {', '.join(each)}")
            rounds = [x["pairs"] for x in results[f"ours {k}"] if x.get("pairs")]
            if rounds:  # the read rate ours reached ÷ sgemv's next to it, slice by slice
                flat = [a / g for ps in rounds for a, g in ps]
                each = ", ".join(f"{statistics.median(a / g for a, g in ps):.2f}x" for ps in rounds)
                ours_gbs, gemv = ([p[i] for ps in rounds for p in ps] for i in (0, 1))
                print(f"         ours ÷ sgemv next to it, {len(flat)} slices of 16 tokens in "
                      f"{len(rounds)} rounds: {statistics.median(flat):.2f}x ({min(flat):.2f}-"
                      f"{max(flat):.2f}); rounds {each}; ours {min(ours_gbs):.1f}-"
                      f"{max(ours_gbs):.1f} GB/s, sgemv {min(gemv):.1f}-"
                      f"{max(gemv):.1f}")  # fmt: skip
    for name, i in (("numpy sum, one thread", 0), ("OpenBLAS sgemv, all threads", 1),
                    ("numpy sums, a slice a thread", 2)):  # fmt: skip
        print(f"Bandwidth ({name}), best of 5 over 512 MB a round: "
              f"{fmt([b[i] for b in bounds], 'GB/s')}")  # fmt: skip


if __name__ == "__main__":
    main()
