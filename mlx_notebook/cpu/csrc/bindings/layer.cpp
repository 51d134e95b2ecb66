// The two halves of a llama-style layer's decode step as MLX primitives (kernels in
// layer.c): layer_in (RMSNorm, the q/k/v products, RoPE) and layer_out (the
// output product and residual, RMSNorm, gate/up, SwiGLU, down and residual).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include "ext.h"

namespace nb = nanobind;

namespace mlxnb {
namespace {

// One bias-free linear layer's arrays: [w] (float32 [N, K]), [w, scales, biases]
// (MLX's affine 4-, 5-, 6- or 8-bit layout) or [w, scales] (symmetric blocks: each bias the scale
// times -2^(bits - 1)); bits and the group size follow from the shapes.
struct Lin {
  int N = 0, K = 0, gs = 0, bits = 0;
  bool half = false;  // float16 scales and biases
  bool sym = false;   // no biases
  bool inputs8 = false;  // a prefill pass's product (8-bit inputs)
  bool operator==(const Lin&) const = default;
  int arrays() const { return bits ? (sym ? 2 : 3) : 1; }
  mlxnb_linear_t at(const mx::array* a) const {
    return {N, K, gs, bits, bits ? static_cast<const void*>(a[0].data<uint32_t>())
                                 : static_cast<const void*>(a[0].data<float>()),
            bits ? a[1].data<void>() : nullptr, bits && !sym ? a[2].data<void>() : nullptr,
            half, inputs8};
  }
};

// l: n arrays (a view into the caller's list: layer_in describes each of its three
// parts on every step, without copies).
Lin describe(const mx::array* l, size_t n, int K, const char* what) {
  auto bad = [&] { return std::invalid_argument(std::string("fused layer: ") + what +
                                                " is not [w] float32 [N, K] or [w, scales(, biases)] 4, 5, 6 or 8-bit"); };
  Lin d;
  d.K = K;
  if (n == 1) {
    if (l[0].dtype() != mx::float32 || l[0].ndim() != 2 || l[0].shape(1) != K) throw bad();
    d.N = l[0].shape(0);
    return d;
  }
  if (n != 2 && n != 3) throw bad();
  const bool sym = n == 2;
  const auto& b = sym ? l[1] : l[2];
  if (l[0].dtype() != mx::uint32 || l[0].ndim() != 2 ||
      l[1].ndim() != 2 || !scale_dtype(l[1], b) || b.shape() != l[1].shape() ||
      l[1].shape(0) != l[0].shape(0) || l[1].shape(1) == 0 || K % l[1].shape(1))
    throw bad();
  d.N = l[0].shape(0);
  d.half = l[1].dtype() == mx::float16;
  d.sym = sym;
  d.gs = K / l[1].shape(1);
  if (l[0].shape(1) * 32 % K) throw bad();
  d.bits = l[0].shape(1) * 32 / K;
  if (d.bits < 4 || d.bits > 8 || d.bits == 7 || d.gs % 32 || d.K * d.bits != l[0].shape(1) * 32) throw bad();
  return d;
}

// Inputs: x [B, 1, E], the norm's weight, cos and sin rows, then the q/k/v arrays:
// one stacked product's, or q's, k's and v's in turn (parts = 3).
struct InParams {
  float eps;
  int H, Hkv, D;
  bool trad;
  int parts;
  Lin qkv[3];
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
      const int E = p.qkv[0].K, B = ins[0].size() / E, width = p.trad ? p.D : p.D / 2;
      mlxnb_linear_t lin[3];
      for (int i = 0, at = 4; i < p.parts; at += p.qkv[i].arrays(), i++) lin[i] = p.qkv[i].at(&ins[at]);
      const HelperHold hold(rows_on_helper(B));
      mlxnb_layer_in(B, E, dense(ins[0], xb), ins[1].data<float>(), p.eps, lin, p.parts, p.H, p.Hkv, p.D,
                     p.trad, dense(ins[2], cb), dense(ins[3], sb),
                     static_cast<int>(ins[2].size() / width), q.data<float>(), k.data<float>(),
                     v.data<float>());
    });
  }
};

// layer_in's parameters for x [B, 1, E], checked.
InParams in_params(const mx::array& x, const mx::array& norm_w, float eps,
                   const std::vector<mx::array>& qkv, const mx::array& cos, const mx::array& sin,
                   bool traditional, int n_heads, int n_kv_heads, int parts,
                   const std::vector<int>& counts) {
  if (x.ndim() != 3 || x.shape(1) != 1 || x.dtype() != mx::float32 ||
      norm_w.dtype() != mx::float32 || norm_w.ndim() != 1 || norm_w.shape(0) != x.shape(2))
    throw std::invalid_argument("layer_in: x [B, 1, E] float32 and a norm weight [E]");
  // each part's arrays: counts (a symmetric part has 2 beside others' 3), or as many each
  size_t sum = 0;
  for (int c : counts) sum += c > 0 ? c : qkv.size() + 1;
  if ((parts != 1 && parts != 3) ||
      (counts.empty() ? qkv.size() % parts != 0 : counts.size() != size_t(parts) || sum != qkv.size()))
    throw std::invalid_argument(
        "layer_in: q/k/v are 1 stacked product or 3, with as many arrays each or `counts`");
  const int B = x.shape(0), E = x.shape(2);
  InParams p{};
  const char* names[3] = {"q", "k", "v"};
  for (size_t i = 0, at = 0; i < size_t(parts); i++) {
    const size_t n = counts.empty() ? qkv.size() / parts : size_t(counts[i]);
    p.qkv[i] = describe(qkv.data() + at, n, E, parts == 1 ? "q/k/v" : names[i]);
    at += n;
  }
  const int heads = n_heads + 2 * n_kv_heads;
  const int N = parts == 1 ? p.qkv[0].N : p.qkv[0].N + p.qkv[1].N + p.qkv[2].N;
  if (n_heads < 1 || n_kv_heads < 1 || N % heads || (N / heads) % 2)
    throw std::invalid_argument("layer_in: q/k/v rows are not (H + 2 Hkv) heads of even width");
  const int D = N / heads, width = traditional ? D : D / 2;
  if (parts == 3 && (p.qkv[0].N != n_heads * D || p.qkv[1].N != n_kv_heads * D || p.qkv[2].N != n_kv_heads * D))
    throw std::invalid_argument("layer_in: q, k and v are not H, Hkv and Hkv heads");
  for (const auto* t : {&cos, &sin})
    if (t->dtype() != mx::float32 || (t->size() != static_cast<size_t>(width) &&
                                      t->size() != static_cast<size_t>(B) * width))
      throw std::invalid_argument("layer_in: cos and sin hold 1 or B rows of the RoPE width");
  p.eps = eps, p.H = n_heads, p.Hkv = n_kv_heads, p.D = D, p.trad = traditional, p.parts = parts;
  return p;
}

std::vector<mx::array> layer_in(const mx::array& x, const mx::array& norm_w, float eps,
                                const std::vector<mx::array>& qkv, const mx::array& cos,
                                const mx::array& sin, bool traditional, int n_heads,
                                int n_kv_heads, int parts, bool inputs8,
                                const std::vector<int>& counts) {
  auto p = in_params(x, norm_w, eps, qkv, cos, sin, traditional, n_heads, n_kv_heads, parts, counts);
  for (auto& l : p.qkv) l.inputs8 = inputs8;
  const int B = x.shape(0), D = p.D;
  auto s = mx::default_stream(mx::Device::cpu);
  std::vector<mx::array> ins = {x, dense_param(norm_w, s), cos, sin};
  for (const auto& a : qkv) ins.push_back(dense_param(a, s));
  return mx::array::make_arrays(
      {{B, n_heads, 1, D}, {B, n_kv_heads, 1, D}, {B, n_kv_heads, 1, D}},
      {mx::float32, mx::float32, mx::float32}, std::make_shared<LayerIn>(s, p), ins);
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

// layer_out's parameters for x [B, 1, E] and attention heads of Ea = H * D features, checked.
OutParams out_params(int Ea, const mx::array& x, const std::vector<mx::array>& o,
                     const mx::array& norm_w, float eps, const std::vector<mx::array>& gate_up,
                     const std::vector<mx::array>& down) {
  if (x.ndim() != 3 || x.shape(1) != 1 || x.dtype() != mx::float32 ||
      norm_w.dtype() != mx::float32 || norm_w.ndim() != 1 || norm_w.shape(0) != x.shape(2))
    throw std::invalid_argument("layer_out: x [B, 1, E] float32, a norm weight [E]");
  const int E = x.shape(2);
  auto lo = describe(o.data(), o.size(), Ea, "o");
  auto lgu = describe(gate_up.data(), gate_up.size(), E, "gate/up");
  if (lo.N != E || lgu.N % 2) throw std::invalid_argument("layer_out: o or gate/up rows");
  auto ld = describe(down.data(), down.size(), lgu.N / 2, "down");
  if (ld.N != E) throw std::invalid_argument("layer_out: down's rows are not E");
  return OutParams{eps, lo, lgu, ld};
}

mx::array layer_out(const mx::array& a, const mx::array& x, const std::vector<mx::array>& o,
                    const mx::array& norm_w, float eps, const std::vector<mx::array>& gate_up,
                    const std::vector<mx::array>& down, bool inputs8) {
  if (a.dtype() != mx::float32 || a.ndim() != 4 || a.shape(0) != x.shape(0) || a.shape(2) != 1)
    throw std::invalid_argument("layer_out: a [B, H, 1, D] float32");
  auto p = out_params(a.shape(1) * a.shape(3), x, o, norm_w, eps, gate_up, down);
  for (auto* l : {&p.o, &p.gu, &p.down}) l->inputs8 = inputs8;
  auto s = mx::default_stream(mx::Device::cpu);
  std::vector<mx::array> ins = {a, x, dense_param(norm_w, s)};
  for (const auto* l : {&o, &gate_up, &down})
    for (const auto& w : *l) ins.push_back(dense_param(w, s));
  return mx::array(x.shape(), mx::float32, std::make_shared<LayerOut>(s, p), ins);
}

// The rest of a decode step after the KV cache took its keys and values: the attention
// of q [B, H, 1, D] over the first S rows of the cache's buffers [B, Hkv, capacity, D]
// (read in place: no slices), each row through its mask [B or 1, 1, 1, S] if given (a
// batched cache's left padding), then layer_out. One primitive where MLX's graph had two
// slices, the attention and layer_out. The cache's write stays before it (kv_write, in
// place): a primitive that read the buffer before the write would keep its data held
// (MLX holds a task's inputs until it has run), and the write right after would copy the
// whole cache each step instead of writing in place.
// Inputs: q, keys, values, x [B, 1, E], the norm's weight, o, gate/up and down, the mask.
struct AttendParams {
  OutParams out;
  int S;
  float scale;
  bool masked;
  bool operator==(const AttendParams&) const = default;
};

long attend_calls = 0;  // tests

class AttendOut : public CpuPrimitive<AttendParams> {
 public:
  AttendOut(mx::Stream s, AttendParams p) : CpuPrimitive(s, p, "MlxnbAttendOut") {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    auto& enc = prepare(stream(), inputs, outputs);
    enc.dispatch([ins = inputs, out = mx::array::unsafe_weak_copy(outputs[0]), p = p_]() mutable {
      const auto &q = ins[0], &k = ins[1], &v = ins[2];
      const int B = q.shape(0), H = q.shape(1), D = q.shape(3), Hkv = k.shape(1), E = p.out.o.N;
      std::vector<float> qb, kb, vb, xb, a(static_cast<size_t>(B) * H * D);
      std::vector<unsigned char> m;
      if (p.masked) m = mask_rows(ins.back(), B, p.S);
      const bool helper = rows_on_helper(B);
      const HelperHold hold(helper);
      auto ks = dense_rows(k, kb), vs = dense_rows(v, vb);
      // threads 2: the second core is helper.c's thread, held awake through the layer,
      // as for the products around it; OpenMP's worker spun after its region on the core
      // OpenBLAS's worker (float32 products) or the next step's graph build (4-bit)
      // needed next, or slept and woke through the kernel
      decode_kernel(dense(q, qb), kb.empty() ? k.data<float>() : kb.data(),
                    vb.empty() ? v.data<float>() : vb.data(), m.empty() ? nullptr : m.data(),
                    a.data(), B, H, Hkv, p.S, D, ks[0], ks[1], ks[2], vs[0], vs[1], vs[2],
                    p.scale, helper ? 2 : 0);
      const mx::array* l = &ins[5];
      auto o = p.out.o.at(l);
      auto gu = p.out.gu.at(l + p.out.o.arrays());
      auto down = p.out.down.at(l + p.out.o.arrays() + p.out.gu.arrays());
      mlxnb_layer_out(B, E, a.data(), dense(ins[3], xb), &o, ins[4].data<float>(), p.out.eps,
                      &gu, &down, out.data<float>());
      attend_calls++;
    });
  }
};

mx::array attend_out(const mx::array& q, const mx::array& keys, const mx::array& values, int S,
                     float scale, const mx::array& x, const std::vector<mx::array>& o,
                     const mx::array& norm_w, float eps, const std::vector<mx::array>& gate_up,
                     const std::vector<mx::array>& down, std::optional<mx::array> mask) {
  if (decode_kernel == nullptr) throw std::runtime_error("attend_out: no attention kernel set");
  if (q.dtype() != mx::float32 || q.ndim() != 4 || q.shape(0) < 1 || q.shape(2) != 1 ||
      x.ndim() != 3 || x.shape(0) != q.shape(0) || x.shape(1) != 1)
    throw std::invalid_argument("attend_out: q [B, H, 1, D] float32 and x [B, 1, E]");
  const int B = q.shape(0), H = q.shape(1), D = q.shape(3);
  for (const auto* c : {&keys, &values})  // shapes only: the buffers are often not evaluated yet
    if (c->dtype() != mx::float32 || c->ndim() != 4 || c->shape(0) != B || c->shape(3) != D ||
        c->shape(1) < 1 || H % c->shape(1) || c->shape(1) != keys.shape(1) || S < 1 ||
        c->shape(2) < S)
      throw std::invalid_argument(
          "attend_out: keys and values float32 [B, Hkv, capacity >= S, D], H a multiple of Hkv");
  if (mask && !is_step_mask(*mask, B, S))
    throw std::invalid_argument("attend_out: a boolean mask [B or 1, 1, 1, S]");
  auto p = out_params(H * D, x, o, norm_w, eps, gate_up, down);
  auto s = mx::default_stream(mx::Device::cpu);
  std::vector<mx::array> ins = {q, keys, values, x, dense_param(norm_w, s)};
  for (const auto* l : {&o, &gate_up, &down})
    for (const auto& w : *l) ins.push_back(dense_param(w, s));
  if (mask) ins.push_back(*mask);
  return mx::array(x.shape(), mx::float32,
                   std::make_shared<AttendOut>(s, AttendParams{p, S, scale, mask.has_value()}),
                   ins);
}

// A decode step's write of its keys (or values) rows [B, Hkv, 1, D] into the KV cache's
// buffer [B, Hkv, capacity, D] at row n: the buffer comes back, written in place where
// MLX lets it go (the cache held it alone, as mlx-lm's slice assignment finds it), else
// into a copy. One output a call: an output with siblings is held by them, so never
// donated. Where the slice assignment took MLX's general strided copy (about 10-25 us
// for a 16-row step's 48 rows of 64 floats, 60 a step), rows are copied as rows.
struct WriteParams {
  int n;
  bool operator==(const WriteParams&) const = default;
};

long write_calls = 0;  // tests

class KVWrite : public CpuPrimitive<WriteParams> {
 public:
  KVWrite(mx::Stream s, int n) : CpuPrimitive(s, WriteParams{n}, "MlxnbKVWrite") {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    auto& enc = mx::cpu::get_command_encoder(stream());
    const auto& buf = inputs[0];
    auto& out = outputs[0];
    const bool copied = !buf.is_donatable();
    if (copied)
      out.set_data(mx::allocator::malloc(out.nbytes()));
    else
      out.copy_shared_buffer(buf);
    enc.set_input_array(buf);
    enc.set_input_array(inputs[1]);
    enc.set_output_array(out);
    enc.dispatch([ins = inputs, out = mx::array::unsafe_weak_copy(out), copied,
                  n = p_.n]() mutable {
      if (copied) {  // the buffer, densely, before the rows are written
        std::vector<float> b;
        const float* src = dense(ins[0], b);
        std::copy(src, src + out.size(), out.data<float>());
      }
      std::vector<float> rb;
      const float* r = dense(ins[1], rb);
      const int B = out.shape(0), H = out.shape(1), D = out.shape(3);
      const auto& st = out.strides();
      float* o = out.data<float>();
      for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
          const float* row = r + (static_cast<size_t>(b) * H + h) * D;
          std::copy(row, row + D, o + b * st[0] + h * st[1] + static_cast<int64_t>(n) * st[2]);
        }
      write_calls++;
    });
  }
};

mx::array kv_write(const mx::array& buffer, const mx::array& rows, int n) {
  if (buffer.dtype() != mx::float32 || buffer.ndim() != 4 || n < 0 || n >= buffer.shape(2))
    throw std::invalid_argument("kv_write: a buffer float32 [B, Hkv, capacity > n, D]");
  if (rows.dtype() != mx::float32 || rows.ndim() != 4 || rows.shape(0) != buffer.shape(0) ||
      rows.shape(1) != buffer.shape(1) || rows.shape(2) != 1 || rows.shape(3) != buffer.shape(3))
    throw std::invalid_argument("kv_write: rows float32 [B, Hkv, 1, D]");
  auto s = mx::default_stream(mx::Device::cpu);
  return mx::array(buffer.shape(), mx::float32, std::make_shared<KVWrite>(s, n), {buffer, rows});
}

}  // namespace

void bind_layers(nb::module_& m) {
  m.def("layer_in", &layer_in, nb::arg("x"), nb::arg("norm_weight"), nb::arg("eps"),
        nb::arg("qkv"), nb::arg("cos"), nb::arg("sin"), nb::arg("traditional"),
        nb::arg("n_heads"), nb::arg("n_kv_heads"), nb::arg("parts") = 1, nb::arg("inputs8") = false,
        nb::arg("counts") = std::vector<int>(),
        "A decode step's RMSNorm, q/k/v product(s) and RoPE: [q, k, v], each [B, heads, 1, D]. "
        "qkv: one stacked product's arrays, or (parts=3) q's, k's and v's, as many each or "
        "`counts` of each (a symmetric part has no biases); "
        "inputs8: a prefill pass (quantized products on 8-bit inputs).");
  m.def("layer_out", &layer_out, nb::arg("a"), nb::arg("x"), nb::arg("o"),
        nb::arg("norm_weight"), nb::arg("eps"), nb::arg("gate_up"), nb::arg("down"),
        nb::arg("inputs8") = false,
        "A decode step's x + o(a), then + down(silu(g) * u) of [g | u] = gate_up(RMSNorm); "
        "inputs8: a prefill pass (quantized products on 8-bit inputs).");
  m.def("attend_out", &attend_out, nb::arg("q"), nb::arg("keys"), nb::arg("values"),
        nb::arg("S"), nb::arg("scale"), nb::arg("x"), nb::arg("o"), nb::arg("norm_weight"),
        nb::arg("eps"), nb::arg("gate_up"), nb::arg("down"), nb::arg("mask").none() = nb::none(),
        "A decode step after the cache's write: the attention of q over the first S rows of "
        "the cache's buffers (each row through its mask, if given), then layer_out.");
  m.def("kv_write", &kv_write, nb::arg("buffer"), nb::arg("rows"), nb::arg("n"),
        "A decode step's keys or values [B, Hkv, 1, D] written at row n of the cache's "
        "buffer: the buffer, in place where MLX lets it go.");
  m.def("write_calls", [] { return write_calls; }, "kv_write steps computed so far.");
  m.def("layer_calls", &mlxnb_layer_calls, "Fused layer halves computed so far.");
  m.def("attend_calls", [] { return attend_calls; }, "attend_out steps computed so far.");
}

}  // namespace mlxnb
