// MLX primitives for the CPU fast path: quantized products (kernels in _qmm.c) and
// the attention of a decode step (the kernel in _attn.c, from the fast path's library).
//
// A Primitive keeps the work inside MLX's lazy graph: it is scheduled on the CPU
// stream's thread like MLX's own ops, so decode stays pipelined (a native call
// through numpy would evaluate the graph first). Built against the installed mlx
// with nanobind in mlx's domain, so the arrays passed in and out are mlx.core.array.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>

#include <stdexcept>

#include "mlx/backend/cpu/encoder.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"

extern "C" {
int mlxnb_qmm(int M, int N, int K, int gs, int bits, const float* x, const uint32_t* w,
              const float* s, const float* b, float* out);
void mlxnb_qmm_set_threads(int n);
void mlxnb_qmm_set_small_parallel_min(long macs);
long mlxnb_qmm_calls(int path);
typedef struct {
  int N, K, gs, bits;
  const void* w;
  const float *scales, *biases;
} mlxnb_linear_t;
int mlxnb_layer_in(int B, int E, const float* x, const float* norm_w, float eps,
                   const mlxnb_linear_t* qkv, int H, int Hkv, int D, int traditional,
                   const float* cos, const float* sin, int rope_rows, float* q, float* k,
                   float* v);
int mlxnb_layer_out(int B, int E, const float* a, const float* x, const mlxnb_linear_t* o,
                    const float* norm_w, float eps, const mlxnb_linear_t* gate_up,
                    const mlxnb_linear_t* down, float* out);
long mlxnb_layer_calls(void);
}

namespace nb = nanobind;
namespace mx = mlx::core;

namespace {

// _attn.c's mlxnb_decode_attention, handed over by address (set_attention_kernel):
// it lives in the fast path's own library, which this one does not link.
using decode_fn = int (*)(const float*, const float*, const float*, const unsigned char*,
                          float*, int, int, int, int, int, long, long, long, long, long, long,
                          float);
decode_fn decode_kernel = nullptr;
long decode_calls = 0;

class QuantMatmul : public mx::Primitive {
 public:
  QuantMatmul(mx::Stream s, int group_size, int bits)
      : mx::Primitive(s), group_size_(group_size), bits_(bits) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    auto& out = outputs[0];
    auto& enc = mx::cpu::get_command_encoder(stream());
    const auto& ins = inputs;
    for (const auto& a : ins)  // quant_matmul made x contiguous; parameters are
      if (!a.flags().row_contiguous)
        throw std::invalid_argument("mlxnb_quant_matmul: every input must be row-contiguous");
    out.set_data(mx::allocator::malloc(out.nbytes()));
    for (auto& a : ins) enc.set_input_array(a);
    enc.set_output_array(out);
    const int K = ins[0].shape(-1), N = out.shape(-1), M = ins[0].size() / K;
    enc.dispatch([x = ins[0], w = ins[1], s = ins[2], b = ins[3], out = mx::array::unsafe_weak_copy(out),
                  M, N, K, gs = group_size_, bits = bits_]() mutable {
      mlxnb_qmm(M, N, K, gs, bits, x.data<float>(), w.data<uint32_t>(), s.data<float>(),
                b.data<float>(), out.data<float>());
    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("mlxnb_quant_matmul runs on the CPU only");
  }

  const char* name() const override { return "MlxnbQuantMatmul"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto& o = static_cast<const QuantMatmul&>(other);
    return group_size_ == o.group_size_ && bits_ == o.bits_;
  }

 private:
  int group_size_, bits_;
};

mx::array quant_matmul(const mx::array& x, const mx::array& w, const mx::array& scales,
                       const mx::array& biases, int group_size, int bits) {
  if (x.dtype() != mx::float32 || scales.dtype() != mx::float32 ||
      biases.dtype() != mx::float32 || w.dtype() != mx::uint32)
    throw std::invalid_argument("quant_matmul: float32 x, scales, biases and uint32 w");
  if (w.ndim() != 2 || scales.ndim() != 2 || biases.shape() != scales.shape() || x.ndim() < 1)
    throw std::invalid_argument("quant_matmul: 2-D w, scales and biases");
  const int K = x.shape(-1), N = w.shape(0);
  if ((bits != 4 && bits != 8) || group_size % 32 || K % group_size ||
      w.shape(1) * 32 / bits != K || scales.shape(0) != N || scales.shape(1) * group_size != K)
    throw std::invalid_argument("quant_matmul: shapes do not match the group size and bits");
  auto shape = x.shape();
  shape.back() = N;
  auto s = mx::default_stream(mx::Device::cpu);
  // A view (a slice, a transpose) becomes dense rows; a dense x is shared, not copied.
  auto xc = mx::contiguous(x, false, s);
  return mx::array(shape, mx::float32, std::make_shared<QuantMatmul>(s, group_size, bits),
                   {xc, w, scales, biases});
}

// a's strides when its last axis is dense (a KV cache's buffer, sliced: read in place);
// otherwise a's elements gathered into buf, densely, and their strides.
std::vector<int64_t> dense_rows(const mx::array& a, std::vector<float>& buf) {
  const auto& st = a.strides();
  if (st[3] == 1) return {st[0], st[1], st[2], 1};
  const int64_t n0 = a.shape(0), n1 = a.shape(1), n2 = a.shape(2), n3 = a.shape(3);
  buf.resize(static_cast<size_t>(a.size()));
  const float* p = a.data<float>();
  size_t i = 0;
  for (int64_t x = 0; x < n0; x++)
    for (int64_t y = 0; y < n1; y++)
      for (int64_t z = 0; z < n2; z++)
        for (int64_t w = 0; w < n3; w++)
          buf[i++] = p[x * st[0] + y * st[1] + z * st[2] + w * st[3]];
  return {n1 * n2 * n3, n2 * n3, n3, 1};
}

// softmax(scale * q k^T) v for one query per batch row. q [B, H, 1, D] dense; k and
// v [B, Hkv, S, D] any view whose last axis is dense (a KV cache's buffer, sliced);
// an optional boolean mask [B or 1, 1, 1, S], any strides.
class DecodeAttention : public mx::Primitive {
 public:
  DecodeAttention(mx::Stream s, float scale) : mx::Primitive(s), scale_(scale) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    auto& out = outputs[0];
    auto& enc = mx::cpu::get_command_encoder(stream());
    out.set_data(mx::allocator::malloc(out.nbytes()));
    for (const auto& a : inputs) enc.set_input_array(a);
    enc.set_output_array(out);
    enc.dispatch([ins = inputs, out = mx::array::unsafe_weak_copy(out), scale = scale_]() mutable {
      const auto &q = ins[0], &k = ins[1], &v = ins[2];
      const int B = q.shape(0), H = q.shape(1), D = q.shape(3), Hkv = k.shape(1),
                S = k.shape(2);
      std::vector<unsigned char> m;
      if (ins.size() > 3) {  // the mask, read through its strides (often broadcast)
        const auto& a = ins[3];
        const auto* p = a.data<bool>();
        const long sb = a.shape(0) == 1 ? 0 : a.strides()[0], ss = a.strides()[3];
        m.resize(static_cast<size_t>(B) * S);
        for (int b = 0; b < B; b++)
          for (int t = 0; t < S; t++) m[static_cast<size_t>(b) * S + t] = p[b * sb + t * ss];
      }
      std::vector<float> kd, vd;
      auto ks = dense_rows(k, kd), vs = dense_rows(v, vd);
      decode_kernel(q.data<float>(), kd.empty() ? k.data<float>() : kd.data(),
                    vd.empty() ? v.data<float>() : vd.data(), m.empty() ? nullptr : m.data(),
                    out.data<float>(), B, H, Hkv, S, D, ks[0], ks[1], ks[2], vs[0], vs[1], vs[2],
                    scale);
      decode_calls++;
    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("mlxnb_decode_attention runs on the CPU only");
  }

  const char* name() const override { return "MlxnbDecodeAttention"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return scale_ == static_cast<const DecodeAttention&>(other).scale_;
  }

 private:
  float scale_;
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
    const auto& a = *mask;
    if (a.dtype() != mx::bool_ || a.ndim() != 4 || a.shape(1) != 1 || a.shape(2) != 1 ||
        a.shape(3) != k.shape(2) || (a.shape(0) != 1 && a.shape(0) != k.shape(0)))
      throw std::invalid_argument("decode_attention: a boolean mask [B or 1, 1, 1, S]");
    ins.push_back(a);
  }
  return mx::array(q.shape(), mx::float32, std::make_shared<DecodeAttention>(s, scale), ins);
}

// An array's elements densely in row-major order: its own buffer when it is
// row-contiguous, else gathered (through its strides) into buf.
template <typename T>
const T* dense(const mx::array& a, std::vector<T>& buf) {
  if (a.flags().row_contiguous) return a.data<T>();
  buf.resize(a.size());
  const T* p = a.data<T>();
  const int nd = a.ndim();
  std::vector<int> idx(nd, 0);
  for (size_t i = 0; i < a.size(); i++) {
    int64_t off = 0;
    for (int d = 0; d < nd; d++) off += idx[d] * a.strides()[d];
    buf[i] = p[off];
    for (int d = nd - 1; d >= 0 && ++idx[d] == a.shape(d); d--) idx[d] = 0;
  }
  return buf.data();
}

// A parameter as given when it is dense already (loaded weights are), else made so.
mx::array dense_param(const mx::array& a, mx::Stream s) {
  return a.is_available() && a.flags().row_contiguous ? a : mx::contiguous(a, false, s);
}

// One bias-free linear layer's arrays: [w] (float32 [N, K]) or [w, scales, biases]
// (MLX's affine 4/8-bit layout); bits and the group size follow from the shapes.
struct Lin {
  int N = 0, K = 0, gs = 0, bits = 0;
  int arrays() const { return bits ? 3 : 1; }
  mlxnb_linear_t at(const mx::array* a) const {
    return {N, K, gs, bits, bits ? static_cast<const void*>(a[0].data<uint32_t>())
                                 : static_cast<const void*>(a[0].data<float>()),
            bits ? a[1].data<float>() : nullptr, bits ? a[2].data<float>() : nullptr};
  }
};

Lin describe(const std::vector<mx::array>& l, int K, const char* what) {
  auto bad = [&] { return std::invalid_argument(std::string("fused layer: ") + what +
                                                " is not [w] float32 [N, K] or [w, scales, biases] 4/8-bit"); };
  Lin d;
  d.K = K;
  if (l.size() == 1) {
    if (l[0].dtype() != mx::float32 || l[0].ndim() != 2 || l[0].shape(1) != K) throw bad();
    d.N = l[0].shape(0);
    return d;
  }
  if (l.size() != 3 || l[0].dtype() != mx::uint32 || l[0].ndim() != 2 || l[1].ndim() != 2 ||
      l[1].dtype() != mx::float32 || l[2].dtype() != mx::float32 || l[2].shape() != l[1].shape() ||
      l[1].shape(0) != l[0].shape(0) || l[1].shape(1) == 0 || K % l[1].shape(1))
    throw bad();
  d.N = l[0].shape(0);
  d.gs = K / l[1].shape(1);
  if (l[0].shape(1) * 32 % K) throw bad();
  d.bits = l[0].shape(1) * 32 / K;
  if ((d.bits != 4 && d.bits != 8) || d.gs % 32 || d.K * d.bits != l[0].shape(1) * 32) throw bad();
  return d;
}

// Allocates every output and registers the arrays with the stream's encoder.
mx::cpu::CommandEncoder& prepare(mx::Stream s, const std::vector<mx::array>& ins,
                                 std::vector<mx::array>& outs) {
  auto& enc = mx::cpu::get_command_encoder(s);
  for (auto& o : outs) o.set_data(mx::allocator::malloc(o.nbytes()));
  for (const auto& a : ins) enc.set_input_array(a);
  for (auto& o : outs) enc.set_output_array(o);
  return enc;
}

// A decode step's input half of a llama-style layer (_layer.c's mlxnb_layer_in).
// Inputs: x [B, 1, E], the norm's weight, cos and sin rows, then the q/k/v arrays.
struct InParams {
  float eps;
  int H, Hkv, D;
  bool trad;
  Lin qkv;
  bool operator==(const InParams& o) const {
    return eps == o.eps && H == o.H && Hkv == o.Hkv && D == o.D && trad == o.trad &&
           qkv.N == o.qkv.N && qkv.K == o.qkv.K && qkv.gs == o.qkv.gs && qkv.bits == o.qkv.bits;
  }
};

class LayerIn : public mx::Primitive {
 public:
  LayerIn(mx::Stream s, InParams p) : mx::Primitive(s), p_(p) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    auto& enc = prepare(stream(), inputs, outputs);
    enc.dispatch([ins = inputs, q = mx::array::unsafe_weak_copy(outputs[0]),
                  k = mx::array::unsafe_weak_copy(outputs[1]),
                  v = mx::array::unsafe_weak_copy(outputs[2]), p = p_]() mutable {
      std::vector<float> xb, cb, sb;
      const int E = p.qkv.K, B = ins[0].size() / E, width = p.trad ? p.D : p.D / 2;
      auto lin = p.qkv.at(&ins[4]);
      mlxnb_layer_in(B, E, dense(ins[0], xb), ins[1].data<float>(), p.eps, &lin, p.H, p.Hkv, p.D,
                     p.trad, dense(ins[2], cb), dense(ins[3], sb),
                     static_cast<int>(ins[2].size() / width), q.data<float>(), k.data<float>(),
                     v.data<float>());
    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("mlxnb_layer_in runs on the CPU only");
  }

  const char* name() const override { return "MlxnbLayerIn"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return p_ == static_cast<const LayerIn&>(other).p_;
  }

 private:
  InParams p_;
};

std::vector<mx::array> layer_in(const mx::array& x, const mx::array& norm_w, float eps,
                                const std::vector<mx::array>& qkv, const mx::array& cos,
                                const mx::array& sin, bool traditional, int n_heads,
                                int n_kv_heads) {
  if (x.ndim() != 3 || x.shape(1) != 1 || x.dtype() != mx::float32 ||
      norm_w.dtype() != mx::float32 || norm_w.ndim() != 1 || norm_w.shape(0) != x.shape(2))
    throw std::invalid_argument("layer_in: x [B, 1, E] float32 and a norm weight [E]");
  const int B = x.shape(0), E = x.shape(2);
  auto lin = describe(qkv, E, "q/k/v");
  const int heads = n_heads + 2 * n_kv_heads;
  if (n_heads < 1 || n_kv_heads < 1 || lin.N % heads || (lin.N / heads) % 2)
    throw std::invalid_argument("layer_in: q/k/v rows are not (H + 2 Hkv) heads of even width");
  const int D = lin.N / heads, width = traditional ? D : D / 2;
  for (const auto* t : {&cos, &sin})
    if (t->dtype() != mx::float32 || (t->size() != static_cast<size_t>(width) &&
                                      t->size() != static_cast<size_t>(B) * width))
      throw std::invalid_argument("layer_in: cos and sin hold 1 or B rows of the RoPE width");
  auto s = mx::default_stream(mx::Device::cpu);
  std::vector<mx::array> ins = {x, dense_param(norm_w, s), cos, sin};
  for (const auto& a : qkv) ins.push_back(dense_param(a, s));
  return mx::array::make_arrays(
      {{B, n_heads, 1, D}, {B, n_kv_heads, 1, D}, {B, n_kv_heads, 1, D}},
      {mx::float32, mx::float32, mx::float32},
      std::make_shared<LayerIn>(s, InParams{eps, n_heads, n_kv_heads, D, traditional, lin}), ins);
}

// A decode step's output half (_layer.c's mlxnb_layer_out). Inputs: the attention's
// output a [B, H, 1, D], the layer's input x [B, 1, E], the norm's weight, then the
// arrays of o, gate/up (stacked) and down.
struct OutParams {
  float eps;
  Lin o, gu, down;
  bool operator==(const OutParams& p) const {
    auto same = [](const Lin& a, const Lin& b) {
      return a.N == b.N && a.K == b.K && a.gs == b.gs && a.bits == b.bits;
    };
    return eps == p.eps && same(o, p.o) && same(gu, p.gu) && same(down, p.down);
  }
};

class LayerOut : public mx::Primitive {
 public:
  LayerOut(mx::Stream s, OutParams p) : mx::Primitive(s), p_(p) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    auto& enc = prepare(stream(), inputs, outputs);
    enc.dispatch([ins = inputs, out = mx::array::unsafe_weak_copy(outputs[0]), p = p_]() mutable {
      std::vector<float> ab, xb;
      const int E = p.o.N, B = ins[1].size() / E;
      auto o = p.o.at(&ins[3]);
      auto gu = p.gu.at(&ins[3 + p.o.arrays()]);
      auto down = p.down.at(&ins[3 + p.o.arrays() + p.gu.arrays()]);
      mlxnb_layer_out(B, E, dense(ins[0], ab), dense(ins[1], xb), &o, ins[2].data<float>(), p.eps,
                      &gu, &down, out.data<float>());
    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("mlxnb_layer_out runs on the CPU only");
  }

  const char* name() const override { return "MlxnbLayerOut"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return p_ == static_cast<const LayerOut&>(other).p_;
  }

 private:
  OutParams p_;
};

mx::array layer_out(const mx::array& a, const mx::array& x, const std::vector<mx::array>& o,
                    const mx::array& norm_w, float eps, const std::vector<mx::array>& gate_up,
                    const std::vector<mx::array>& down) {
  if (x.ndim() != 3 || x.shape(1) != 1 || x.dtype() != mx::float32 || a.dtype() != mx::float32 ||
      a.ndim() != 4 || a.shape(0) != x.shape(0) || a.shape(2) != 1 ||
      norm_w.dtype() != mx::float32 || norm_w.ndim() != 1 || norm_w.shape(0) != x.shape(2))
    throw std::invalid_argument("layer_out: a [B, H, 1, D], x [B, 1, E] float32, a norm weight [E]");
  const int E = x.shape(2);
  auto lo = describe(o, a.shape(1) * a.shape(3), "o");
  auto lgu = describe(gate_up, E, "gate/up");
  if (lo.N != E || lgu.N % 2) throw std::invalid_argument("layer_out: o or gate/up rows");
  auto ld = describe(down, lgu.N / 2, "down");
  if (ld.N != E) throw std::invalid_argument("layer_out: down's rows are not E");
  auto s = mx::default_stream(mx::Device::cpu);
  std::vector<mx::array> ins = {a, x, dense_param(norm_w, s)};
  for (const auto* l : {&o, &gate_up, &down})
    for (const auto& w : *l) ins.push_back(dense_param(w, s));
  return mx::array(x.shape(), mx::float32, std::make_shared<LayerOut>(s, OutParams{eps, lo, lgu, ld}), ins);
}

}  // namespace

NB_MODULE(_mlxnb_ext, m) {
  m.def("quant_matmul", &quant_matmul, nb::arg("x"), nb::arg("w"), nb::arg("scales"),
        nb::arg("biases"), nb::arg("group_size"), nb::arg("bits"),
        "x @ dequantize(w, scales, biases).T for MLX's affine 4- or 8-bit layout, on the CPU.");
  m.def("set_threads", &mlxnb_qmm_set_threads, nb::arg("n"),
        "Threads for the products (0: OpenMP's default).");
  m.def("set_small_parallel_min", &mlxnb_qmm_set_small_parallel_min, nb::arg("macs"),
        "The smallest product of up to 31 rows split over threads (multiply-adds).");
  m.def("calls", &mlxnb_qmm_calls, nb::arg("path"),
        "Products computed so far by one path: 0 registers, 1 8-row register passes, 2 sgemm.");
  m.def("decode_attention", &decode_attention, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("mask").none(), nb::arg("scale"),
        "softmax(scale * q k^T, mask) v for one query per batch row, on the CPU.");
  m.def(
      "set_attention_kernel", [](uintptr_t f) { decode_kernel = reinterpret_cast<decode_fn>(f); },
      nb::arg("address"), "The address of _attn.c's mlxnb_decode_attention.");
  m.def("layer_in", &layer_in, nb::arg("x"), nb::arg("norm_weight"), nb::arg("eps"),
        nb::arg("qkv"), nb::arg("cos"), nb::arg("sin"), nb::arg("traditional"),
        nb::arg("n_heads"), nb::arg("n_kv_heads"),
        "A decode step's RMSNorm, stacked q/k/v product and RoPE: [q, k, v], each [B, heads, 1, D].");
  m.def("layer_out", &layer_out, nb::arg("a"), nb::arg("x"), nb::arg("o"),
        nb::arg("norm_weight"), nb::arg("eps"), nb::arg("gate_up"), nb::arg("down"),
        "A decode step's x + o(a), then + down(silu(g) * u) of [g | u] = gate_up(RMSNorm).");
  m.def("layer_calls", &mlxnb_layer_calls, "Fused layer halves computed so far.");
  m.def("attention_calls", [] { return decode_calls; }, "Decode attentions computed so far.");
}
