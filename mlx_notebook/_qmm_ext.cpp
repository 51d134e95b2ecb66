// An MLX primitive for quantized products on the CPU (kernels in _qmm.c).
//
// A Primitive keeps the product inside MLX's lazy graph: it is scheduled on
// the CPU stream's thread like MLX's own ops, so decode stays pipelined. Built
// against the installed mlx with nanobind in mlx's domain, so the arrays passed
// in and out are mlx.core.array.
#include <nanobind/nanobind.h>

#include <stdexcept>

#include "mlx/backend/cpu/encoder.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"

extern "C" {
int mlxnb_qmm(int M, int N, int K, int gs, int bits, const float* x, const uint32_t* w,
              const float* s, const float* b, float* out);
void mlxnb_qmm_set_threads(int n);
long mlxnb_qmm_calls(int path);
}

namespace nb = nanobind;
namespace mx = mlx::core;

namespace {

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

}  // namespace

NB_MODULE(_mlxnb_qmm, m) {
  m.def("quant_matmul", &quant_matmul, nb::arg("x"), nb::arg("w"), nb::arg("scales"),
        nb::arg("biases"), nb::arg("group_size"), nb::arg("bits"),
        "x @ dequantize(w, scales, biases).T for MLX's affine 4- or 8-bit layout, on the CPU.");
  m.def("set_threads", &mlxnb_qmm_set_threads, nb::arg("n"),
        "Threads for the products (0: OpenMP's default).");
  m.def("calls", &mlxnb_qmm_calls, nb::arg("path"),
        "Products computed so far by one path: 0 registers, 1 tiles, 2 sgemm.");
}
