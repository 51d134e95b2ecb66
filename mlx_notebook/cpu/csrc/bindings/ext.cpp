// MLX primitives for the CPU fast path: quantized products (kernels in qmm.c) and
// attention, of decode steps and of chunks (the kernels in attn.c, from the fast path's
// library);
// the fused layer halves are in bindings/layer.cpp, weight packing on huge pages in
// bindings/pages.cpp, sampling's row work in bindings/sample.cpp.
//
// A Primitive keeps the work inside MLX's lazy graph: it is scheduled on the CPU
// stream's thread like MLX's own ops, so decode stays pipelined (a native call
// through numpy would evaluate the graph first). Built against the installed mlx
// with nanobind in mlx's domain, so the arrays passed in and out are mlx.core.array.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <optional>

#include "ext.h"

namespace nb = nanobind;
using namespace mlxnb;

namespace mlxnb {
decode_fn decode_kernel = nullptr;  // see ext.h
}

namespace {

long decode_calls = 0;
// and attn.c's mlxnb_causal_attention, the same way
using causal_fn = int (*)(const float*, const float*, const float*, float*, int, int, int, int,
                          int, float, long, long);
causal_fn causal_kernel = nullptr;
long causal_calls = 0;

struct QuantParams {
  int group_size, bits;
  bool inputs8;  // a prefill pass's product: 8-bit inputs (qmm.c)
  bool operator==(const QuantParams&) const = default;
};

class QuantMatmul : public CpuPrimitive<QuantParams> {
 public:
  QuantMatmul(mx::Stream s, QuantParams p) : CpuPrimitive(s, p, "MlxnbQuantMatmul") {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    for (const auto& a : inputs)  // quant_matmul made x contiguous; parameters are
      if (!a.flags().row_contiguous)
        throw std::invalid_argument("mlxnb_quant_matmul: every input must be row-contiguous");
    auto& enc = prepare(stream(), inputs, outputs);
    const auto& out = outputs[0];
    const int K = inputs[0].shape(-1), N = out.shape(-1), M = inputs[0].size() / K;
    // no biases: symmetric blocks (each the scale times -2^(bits - 1))
    enc.dispatch([x = inputs[0], w = inputs[1], s = inputs[2],
                  b = inputs.size() > 3 ? std::optional<mx::array>(inputs[3]) : std::nullopt,
                  out = mx::array::unsafe_weak_copy(out), M, N, K, p = p_]() mutable {
      mlxnb_qmm(M, N, K, p.group_size, p.bits, x.data<float>(), w.data<uint32_t>(),
                s.data<void>(), b ? b->data<void>() : nullptr, s.dtype() == mx::float16,
                out.data<float>(), p.inputs8);
    });
  }
};

mx::array quant_matmul(const mx::array& x, const mx::array& w, const mx::array& scales,
                       const std::optional<mx::array>& biases, int group_size, int bits,
                       bool inputs8) {
  if (x.dtype() != mx::float32 || !scale_dtype(scales, biases.value_or(scales)) ||
      w.dtype() != mx::uint32)
    throw std::invalid_argument(
        "quant_matmul: float32 x, uint32 w, scales and biases both float32 or both float16");
  if (w.ndim() != 2 || scales.ndim() != 2 || (biases && biases->shape() != scales.shape()) ||
      x.ndim() < 1)
    throw std::invalid_argument("quant_matmul: 2-D w, scales and biases");
  const int K = x.shape(-1), N = w.shape(0);
  if (bits < 4 || bits > 8 || bits == 7 || group_size < 32 || group_size % 32 || K < 1 || K % group_size ||
      w.shape(1) * 32 / bits != K || scales.shape(0) != N || scales.shape(1) * group_size != K)
    throw std::invalid_argument("quant_matmul: shapes do not match the group size and bits");
  auto shape = x.shape();
  shape.back() = N;
  auto s = mx::default_stream(mx::Device::cpu);
  // A view (a slice, a transpose) becomes dense rows; a dense x is shared, not copied.
  auto xc = mx::contiguous(x, false, s);
  std::vector<mx::array> ins = {xc, w, scales};
  if (biases) ins.push_back(*biases);
  return mx::array(shape, mx::float32,
                   std::make_shared<QuantMatmul>(s, QuantParams{group_size, bits, inputs8}), ins);
}

struct AttentionParams {
  float scale;
  bool operator==(const AttentionParams&) const = default;
};

// softmax(scale * q k^T) v for one query per batch row. q [B, H, 1, D] dense; k and
// v [B, Hkv, S, D] any view whose last axis is dense (a KV cache's buffer, sliced);
// an optional boolean mask [B or 1, 1, 1, S], any strides.
class DecodeAttention : public CpuPrimitive<AttentionParams> {
 public:
  DecodeAttention(mx::Stream s, float scale)
      : CpuPrimitive(s, AttentionParams{scale}, "MlxnbDecodeAttention") {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    auto& enc = prepare(stream(), inputs, outputs);
    enc.dispatch([ins = inputs, out = mx::array::unsafe_weak_copy(outputs[0]),
                  scale = p_.scale]() mutable {
      const auto &q = ins[0], &k = ins[1], &v = ins[2];
      const int B = q.shape(0), H = q.shape(1), D = q.shape(3), Hkv = k.shape(1),
                S = k.shape(2);
      std::vector<unsigned char> m;
      if (ins.size() > 3) m = mask_rows(ins[3], B, S);
      std::vector<float> kd, vd;
      auto ks = dense_rows(k, kd), vs = dense_rows(v, vd);
      decode_kernel(q.data<float>(), kd.empty() ? k.data<float>() : kd.data(),
                    vd.empty() ? v.data<float>() : vd.data(), m.empty() ? nullptr : m.data(),
                    out.data<float>(), B, H, Hkv, S, D, ks[0], ks[1], ks[2], vs[0], vs[1], vs[2],
                    scale, 0);
      decode_calls++;
    });
  }
};

mx::array decode_attention(const mx::array& q, const mx::array& k, const mx::array& v,
                           std::optional<mx::array> mask, float scale) {
  if (decode_kernel == nullptr) throw std::runtime_error("decode_attention: no kernel set");
  if (q.ndim() != 4 || k.ndim() != 4 || v.shape() != k.shape() || q.shape(2) != 1 ||
      q.shape(0) != k.shape(0) || q.shape(3) != k.shape(3) || k.shape(1) == 0 ||
      q.shape(1) % k.shape(1) || q.dtype() != mx::float32 || k.dtype() != mx::float32 ||
      v.dtype() != mx::float32)
    throw std::invalid_argument("decode_attention: q [B, H, 1, D], k and v [B, Hkv, S, D], float32");
  auto s = mx::default_stream(mx::Device::cpu);
  // The kernel reads rows of D floats through strides: q is made dense here; k and v
  // are read in place when their last axis is dense (a KV cache), else gathered.
  std::vector<mx::array> ins = {mx::contiguous(q, false, s), k, v};
  if (mask) {
    if (!is_step_mask(*mask, k.shape(0), k.shape(2)))
      throw std::invalid_argument("decode_attention: a boolean mask [B or 1, 1, 1, S]");
    ins.push_back(*mask);
  }
  return mx::array(q.shape(), mx::float32, std::make_shared<DecodeAttention>(s, scale), ins);
}

// softmax(scale * q k^T, causal) v for one row's chunk of L queries, query i at position
// S - L + i. q [1, H, L, D] dense; k and v [1, Hkv, S, D] read in place when their rows
// are dense (a KV cache), else gathered. Any L; the fast path sends it verify passes (up
// to cpu_attention.FEW_QUERIES queries), whose kernel runs on OpenMP alone.
class CausalAttention : public CpuPrimitive<AttentionParams> {
 public:
  CausalAttention(mx::Stream s, float scale)
      : CpuPrimitive(s, AttentionParams{scale}, "MlxnbCausalAttention") {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    auto& enc = prepare(stream(), inputs, outputs);
    enc.dispatch([ins = inputs, out = mx::array::unsafe_weak_copy(outputs[0]),
                  scale = p_.scale]() mutable {
      const auto &q = ins[0], &k = ins[1], &v = ins[2];
      const int H = q.shape(1), L = q.shape(2), D = q.shape(3), Hkv = k.shape(1), S = k.shape(2);
      std::vector<float> kd, vd;
      auto ks = dense_rows(k, kd), vs = dense_rows(v, vd);
      if (ks[2] != D) ks = {0, static_cast<int64_t>(S) * D, D, 1}, dense(k, kd);
      if (vs[2] != D) vs = {0, static_cast<int64_t>(S) * D, D, 1}, dense(v, vd);
      if (causal_kernel(q.data<float>(), kd.empty() ? k.data<float>() : kd.data(),
                        vd.empty() ? v.data<float>() : vd.data(), out.data<float>(), H, Hkv, L,
                        S, D, scale, ks[1], vs[1]) != 0)
        throw std::runtime_error("causal_attention: the kernel failed (no OpenBLAS or memory)");
      causal_calls++;
    });
  }
};

mx::array causal_attention(const mx::array& q, const mx::array& k, const mx::array& v,
                           float scale) {
  if (causal_kernel == nullptr) throw std::runtime_error("causal_attention: no kernel set");
  if (q.ndim() != 4 || k.ndim() != 4 || v.shape() != k.shape() || q.shape(0) != 1 ||
      k.shape(0) != 1 || q.shape(3) != k.shape(3) || k.shape(1) == 0 ||
      q.shape(1) % k.shape(1) || q.shape(2) > k.shape(2) || q.dtype() != mx::float32 ||
      k.dtype() != mx::float32 || v.dtype() != mx::float32)
    throw std::invalid_argument(
        "causal_attention: q [1, H, L, D], k and v [1, Hkv, S, D] with L <= S, float32");
  auto s = mx::default_stream(mx::Device::cpu);
  return mx::array(q.shape(), mx::float32, std::make_shared<CausalAttention>(s, scale),
                   {mx::contiguous(q, false, s), k, v});
}

}  // namespace

NB_MODULE(_mlxnb_ext, m) {
  m.def("quant_matmul", &quant_matmul, nb::arg("x"), nb::arg("w"), nb::arg("scales"),
        nb::arg("biases").none(), nb::arg("group_size"), nb::arg("bits"), nb::arg("inputs8") = false,
        "x @ dequantize(w, scales, biases).T for MLX's affine 4-, 5-, 6- or 8-bit layout, on the CPU "
        "(biases None: each the scale times -2^(bits - 1)); inputs8: a prefill pass's product "
        "(inputs rounded to 8 bits where the integer dots are on).");
  m.def("set_threads", &mlxnb_qmm_set_threads, nb::arg("n"),
        "Threads for the products (0: OpenMP's default).");
  m.def("set_small_parallel_min", &mlxnb_qmm_set_small_parallel_min, nb::arg("macs"),
        "The smallest product of up to 31 rows split over threads (multiply-adds).");
  m.def("calls", &mlxnb_qmm_calls, nb::arg("path"),
        "Products computed so far by one path: 0 registers, 1 row tiles, 2 sgemm, 3 AMX tiles; "
        "4: of path 0's, those on integer dots; 5: of path 2's, those on integer dots; 6: of "
        "those, the ones on 8-bit inputs (a prefill pass's).");
  m.def("set_igemm_from", &mlxnb_qmm_set_igemm_from, nb::arg("rows"),
        "From how many rows quantized products take integer sums on vpdpwssd (0: the default).");
  m.def("set_one_row_blocks", &mlxnb_qmm_set_one_row_blocks, nb::arg("blocks"),
        "Blocks of four weight rows in each unit of a one-row product split with the "
        "helper thread (0: the product in 4 runs, the default).");
  m.def("set_amx", &mlxnb_qmm_set_amx, nb::arg("on"),
        "AMX tiles for products of several rows on (where granted) or off; returns whether in use.");
  m.def("set_int_dots", &mlxnb_qmm_set_int_dots, nb::arg("on"),
        "Inputs of quantized products rounded to 16 bits a unit of 32, one-row products on "
        "integer dots (where the CPU has VNNI), or float inputs (off); returns whether on.");
  m.def("path", &mlxnb_qmm_path, nb::arg("rows"), nb::arg("bits") = 4,
        "The path a product of this many rows of bits-bit weights takes.");
  m.def("stretch", &mlxnb_qmm_stretch, nb::arg("rows"), nb::arg("k"), nb::arg("step"),
        "The stretch of K the row tiles take with this many input rows (0 without AVX-512).");
  m.def("decode_attention", &decode_attention, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("mask").none(), nb::arg("scale"),
        "softmax(scale * q k^T, mask) v for one query per batch row, on the CPU.");
  m.def("causal_attention", &causal_attention, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("scale"), "softmax(scale * q k^T, causal) v for one row's chunk, on the CPU.");
  m.def(
      "set_attention_kernels",
      [](uintptr_t decode, uintptr_t causal) {
        decode_kernel = reinterpret_cast<decode_fn>(decode);
        causal_kernel = reinterpret_cast<causal_fn>(causal);
      },
      nb::arg("decode"), nb::arg("causal"),
      "The addresses of attn.c's mlxnb_decode_attention and mlxnb_causal_attention.");
  m.def(
      "set_helper",
      [](uintptr_t run, uintptr_t runs, uintptr_t hold, uintptr_t thread_count) {
        mlxnb_helper.run = reinterpret_cast<void (*)(mlxnb_unit_fn, void*, int)>(run);
        mlxnb_helper.runs = reinterpret_cast<void (*)(mlxnb_unit_fn, void*, int, int)>(runs);
        mlxnb_helper.hold = reinterpret_cast<int (*)(int)>(hold);
        mlxnb_helper.thread_count = reinterpret_cast<const int*>(thread_count);
      },
      nb::arg("run"), nb::arg("runs"), nb::arg("hold"), nb::arg("thread_count"),
      "The addresses of the library's helper (helper.h): mlxnb_helper_run, _runs, _hold "
      "and mlxnb_thread_count.");
  m.def("attention_calls", [] { return decode_calls; }, "Decode attentions computed so far.");
  m.def("causal_calls", [] { return causal_calls; }, "Causal attentions computed so far.");
  bind_layers(m);
  bind_pages(m);
  bind_sampling(m);
}
