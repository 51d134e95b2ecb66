// Sampling's row work as MLX primitives, on the CPU: the greedy pick (argmax.c), and
// logsumexp, mlx-lm's nucleus filter and the draw (sample.c), each giving exactly what
// MLX's own operations give. Primitives keep them in the step's lazy graph (decode stays pipelined).
#include "ext.h"

namespace nb = nanobind;

namespace mlxnb {
namespace {

struct NoParams {
  bool operator==(const NoParams&) const = default;
};

// The index of each row's largest element along the last axis, as uint32.
class ArgmaxRows : public CpuPrimitive<NoParams> {
 public:
  explicit ArgmaxRows(mx::Stream s) : CpuPrimitive(s, NoParams{}, "MlxnbArgmaxRows") {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    auto& enc = prepare(stream(), inputs, outputs);
    enc.dispatch([x = inputs[0], out = mx::array::unsafe_weak_copy(outputs[0])]() mutable {
      const long n = x.shape(-1);
      mlxnb_argmax_rows(static_cast<int>(x.size() / n), n, n, x.data<float>(),
                        out.data<uint32_t>());
    });
  }
};

// logsumexp along the last axis, kept as an axis of one (mx.logsumexp(x, -1, keepdims)).
class LogsumexpRows : public CpuPrimitive<NoParams> {
 public:
  explicit LogsumexpRows(mx::Stream s) : CpuPrimitive(s, NoParams{}, "MlxnbLogsumexpRows") {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    auto& enc = prepare(stream(), inputs, outputs);
    enc.dispatch([x = inputs[0], out = mx::array::unsafe_weak_copy(outputs[0])]() mutable {
      const long n = x.shape(-1);
      if (mlxnb_logsumexp_rows(static_cast<int>(x.size() / n), n, x.data<float>(),
                               out.data<float>()) != 0)
        throw std::runtime_error("logsumexp_rows: out of memory");
    });
  }
};

struct TopParams {
  float top_p;
  bool operator==(const TopParams&) const = default;
};

// mlx-lm's apply_top_p(x, top_p) along the last axis.
class TopPRows : public CpuPrimitive<TopParams> {
 public:
  TopPRows(mx::Stream s, float top_p) : CpuPrimitive(s, TopParams{top_p}, "MlxnbTopPRows") {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    auto& enc = prepare(stream(), inputs, outputs);
    enc.dispatch([x = inputs[0], out = mx::array::unsafe_weak_copy(outputs[0]),
                  top_p = p_.top_p]() mutable {
      const long n = x.shape(-1);
      if (mlxnb_top_p_rows(static_cast<int>(x.size() / n), n, x.data<float>(), top_p,
                           out.data<float>()) != 0)
        throw std::runtime_error("top_p_rows: out of memory");
    });
  }
};

struct DrawParams {
  float inv_temp;
  bool operator==(const DrawParams&) const = default;
};

// mx.random.categorical(x * inv_temp) row by row, given each row's uniform number u.
class CategoricalRows : public CpuPrimitive<DrawParams> {
 public:
  CategoricalRows(mx::Stream s, float inv_temp)
      : CpuPrimitive(s, DrawParams{inv_temp}, "MlxnbCategoricalRows") {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    auto& enc = prepare(stream(), inputs, outputs);
    enc.dispatch([x = inputs[0], u = inputs[1], out = mx::array::unsafe_weak_copy(outputs[0]),
                  inv_temp = p_.inv_temp]() mutable {
      const long n = x.shape(-1);
      if (mlxnb_categorical_rows(static_cast<int>(x.size() / n), n, x.data<float>(), inv_temp,
                                 u.data<float>(), out.data<uint32_t>()) != 0)
        throw std::runtime_error("categorical_rows: out of memory");
    });
  }
};

// float32 rows on the CPU, dense: the kernels' input.
mx::array rows_of(const mx::array& x, const char* name) {
  if (x.dtype() != mx::float32 || x.ndim() < 1 || x.shape(-1) == 0 ||
      x.size() / x.shape(-1) > INT32_MAX || x.shape(-1) > UINT32_MAX)
    throw std::invalid_argument(std::string(name) + ": float32 rows of at least one element");
  return mx::contiguous(x, false, mx::default_stream(mx::Device::cpu));
}

mx::array argmax_rows(const mx::array& x) {
  auto shape = x.shape();
  shape.pop_back();
  auto s = mx::default_stream(mx::Device::cpu);
  return mx::array(shape, mx::uint32, std::make_shared<ArgmaxRows>(s), {rows_of(x, "argmax_rows")});
}

mx::array logsumexp_rows(const mx::array& x) {
  auto shape = x.shape();
  shape.back() = 1;
  auto s = mx::default_stream(mx::Device::cpu);
  return mx::array(shape, mx::float32, std::make_shared<LogsumexpRows>(s),
                   {rows_of(x, "logsumexp_rows")});
}

mx::array top_p_rows(const mx::array& x, float top_p) {
  auto s = mx::default_stream(mx::Device::cpu);
  return mx::array(x.shape(), mx::float32, std::make_shared<TopPRows>(s, top_p),
                   {rows_of(x, "top_p_rows")});
}

mx::array categorical_rows(const mx::array& x, const mx::array& u, float inv_temp) {
  auto shape = x.shape();
  shape.pop_back();
  auto rows = rows_of(x, "categorical_rows");
  if (u.dtype() != mx::float32 || u.size() != rows.size() / rows.shape(-1))
    throw std::invalid_argument("categorical_rows: one float32 uniform number per row");
  auto s = mx::default_stream(mx::Device::cpu);
  return mx::array(shape, mx::uint32, std::make_shared<CategoricalRows>(s, inv_temp),
                   {rows, mx::contiguous(u, false, s)});
}

}  // namespace

void bind_sampling(nb::module_& m) {
  m.def("argmax_rows", &argmax_rows, nb::arg("x"),
        "mx.argmax(x, axis=-1) for float32 on the CPU: first index of the maximum, NaN first.");
  m.def("argmax_calls", &mlxnb_argmax_calls, "Row sets picked by argmax_rows so far.");
  m.def("logsumexp_rows", &logsumexp_rows, nb::arg("x"),
        "mx.logsumexp(x, axis=-1, keepdims=True) for float32 on the CPU, bit for bit.");
  m.def("top_p_rows", &top_p_rows, nb::arg("x"), nb::arg("top_p"),
        "mlx-lm's apply_top_p(x, top_p) for float32 on the CPU, bit for bit.");
  m.def("categorical_rows", &categorical_rows, nb::arg("x"), nb::arg("u"), nb::arg("inv_temp"),
        "mx.random.categorical(x * inv_temp) of each row, given its uniform draw u, bit for bit.");
  m.def("sample_calls", &mlxnb_sample_calls, nb::arg("which"),
        "Rows computed so far: 0 logsumexp_rows, 1 top_p_rows, 2 categorical_rows; 3 the "
        "top_p_rows rows that sorted only the values that can change their sums.");
}

}  // namespace mlxnb
