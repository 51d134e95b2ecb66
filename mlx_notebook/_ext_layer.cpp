// The two halves of a llama-style layer's decode step as MLX primitives (kernels in
// _layer.c): layer_in (RMSNorm, the stacked q/k/v product, RoPE) and layer_out (the
// output product and residual, RMSNorm, gate/up, SwiGLU, down and residual).
#include <nanobind/stl/vector.h>

#include "_ext.h"

namespace nb = nanobind;

namespace mlxnb {
namespace {

// One bias-free linear layer's arrays: [w] (float32 [N, K]) or [w, scales, biases]
// (MLX's affine 4/8-bit layout); bits and the group size follow from the shapes.
struct Lin {
  int N = 0, K = 0, gs = 0, bits = 0;
  bool operator==(const Lin&) const = default;
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

// Inputs: x [B, 1, E], the norm's weight, cos and sin rows, then the q/k/v arrays.
struct InParams {
  float eps;
  int H, Hkv, D;
  bool trad;
  Lin qkv;
  bool operator==(const InParams&) const = default;
};

class LayerIn : public CpuPrimitive<InParams> {
 public:
  LayerIn(mx::Stream s, InParams p) : CpuPrimitive(s, p, "MlxnbLayerIn") {}

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

// Inputs: the attention's output a [B, H, 1, D], the layer's input x [B, 1, E], the
// norm's weight, then the arrays of o, gate/up (stacked) and down.
struct OutParams {
  float eps;
  Lin o, gu, down;
  bool operator==(const OutParams&) const = default;
};

class LayerOut : public CpuPrimitive<OutParams> {
 public:
  LayerOut(mx::Stream s, OutParams p) : CpuPrimitive(s, p, "MlxnbLayerOut") {}

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

void bind_layers(nb::module_& m) {
  m.def("layer_in", &layer_in, nb::arg("x"), nb::arg("norm_weight"), nb::arg("eps"),
        nb::arg("qkv"), nb::arg("cos"), nb::arg("sin"), nb::arg("traditional"),
        nb::arg("n_heads"), nb::arg("n_kv_heads"),
        "A decode step's RMSNorm, stacked q/k/v product and RoPE: [q, k, v], each [B, heads, 1, D].");
  m.def("layer_out", &layer_out, nb::arg("a"), nb::arg("x"), nb::arg("o"),
        nb::arg("norm_weight"), nb::arg("eps"), nb::arg("gate_up"), nb::arg("down"),
        "A decode step's x + o(a), then + down(silu(g) * u) of [g | u] = gate_up(RMSNorm).");
  m.def("layer_calls", &mlxnb_layer_calls, "Fused layer halves computed so far.");
}

}  // namespace mlxnb
