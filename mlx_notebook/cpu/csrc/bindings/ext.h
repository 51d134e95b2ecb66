// Shared by the extension's compilation units (_ext*.cpp): the C
// kernels' declarations and what every CPU primitive here needs.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include "mlx/backend/cpu/encoder.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"

#include "helper.h"

extern "C" {
int mlxnb_qmm(int M, int N, int K, int gs, int bits, const float* x, const uint32_t* w,
              const void* s, const void* b, int half, float* out, int inputs8);
void mlxnb_qmm_set_threads(int n);
void mlxnb_qmm_set_small_parallel_min(long macs);
long mlxnb_qmm_calls(int path);
int mlxnb_ext_threads(void);
int mlxnb_qmm_path(int M, int bits);
int mlxnb_qmm_stretch(int rows, int K, int step);
int mlxnb_qmm_set_amx(int on);
int mlxnb_qmm_set_int_dots(int on);
void mlxnb_qmm_set_igemm_from(int rows);
void mlxnb_qmm_set_one_row_blocks(int blocks);
typedef struct {
  int N, K, gs, bits;
  const void* w;
  const void *scales, *biases;  // float32, or float16 where half
  int half;
  int inputs8;  // a prefill pass's product: inputs rounded to 8 bits (qmm.c)
} mlxnb_linear_t;
int mlxnb_layer_in(int B, int E, const float* x, const float* norm_w, float eps,
                   const mlxnb_linear_t* qkv, int parts, int H, int Hkv, int D, int traditional,
                   const float* cos, const float* sin, int rope_rows, float* q, float* k,
                   float* v);
int mlxnb_layer_out(int B, int E, const float* a, const float* x, const mlxnb_linear_t* o,
                    const float* norm_w, float eps, const mlxnb_linear_t* gate_up,
                    const mlxnb_linear_t* down, float* out);
long mlxnb_layer_calls(void);
void mlxnb_argmax_rows(int rows, long n, long stride, const float* x, uint32_t* out);
long mlxnb_argmax_calls(void);
int mlxnb_logsumexp_rows(int rows, long n, const float* x, float* out);
int mlxnb_top_p_rows(int rows, long n, const float* x, float top_p, float* out);
int mlxnb_categorical_rows(int rows, long n, const float* x, float inv_temp, const float* u,
                           uint32_t* out);
long mlxnb_sample_calls(int which);
}

namespace mlxnb {

namespace mx = mlx::core;

// Whether a quantized layer's scales and biases are a layout the kernels read: both
// float32, or both float16 (a GGUF file's block scales, kept at their size).
inline bool scale_dtype(const mx::array& s, const mx::array& b) {
  return s.dtype() == b.dtype() && (s.dtype() == mx::float32 || s.dtype() == mx::float16);
}

// Whether a decode step of B rows shares its products and attention with helper.c's
// thread: one row always; several where OpenMP would have two threads or fewer (qmm.c's
// on_helper), and more cores take OpenMP's team, as do AMX tiles (path 3: each of
// OpenMP's threads configures its own tiles).
inline bool rows_on_helper(int B) {
  return B == 1 || (mlxnb_ext_threads() <= 2 && mlxnb_qmm_path(B, 4) != 3);
}

// Keeps helper.c's thread awake for a decode step's fused layer, whose products and
// attention it shares (mlxnb_helper_hold, which declines under the thread governor's one
// thread).
class HelperHold {
 public:
  explicit HelperHold(bool wanted)
      : on_(wanted && mlxnb_helper.hold != nullptr && mlxnb_helper.hold(1)) {}
  ~HelperHold() {
    if (on_) mlxnb_helper.hold(0);
  }
  HelperHold(const HelperHold&) = delete;
  HelperHold& operator=(const HelperHold&) = delete;

 private:
  bool on_;
};

// A primitive that runs on the CPU only, with its parameters P (compared with ==):
// the overrides MLX asks of every primitive, written once.
template <typename P>
class CpuPrimitive : public mx::Primitive {
 public:
  CpuPrimitive(mx::Stream s, P p, const char* name) : mx::Primitive(s), p_(p), name_(name) {}

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error(std::string(name_) + " runs on the CPU only");
  }

  const char* name() const override { return name_; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return typeid(other) == typeid(*this) && static_cast<const CpuPrimitive&>(other).p_ == p_;
  }

 protected:
  P p_;

 private:
  const char* name_;
};

// Allocates every output and registers the arrays with the stream's encoder.
inline mx::cpu::CommandEncoder& prepare(mx::Stream s, const std::vector<mx::array>& ins,
                                        std::vector<mx::array>& outs) {
  auto& enc = mx::cpu::get_command_encoder(s);
  for (auto& o : outs) o.set_data(mx::allocator::malloc(o.nbytes()));
  for (const auto& a : ins) enc.set_input_array(a);
  for (auto& o : outs) enc.set_output_array(o);
  return enc;
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

// A 4-D array's strides when its last axis is dense (a KV cache's buffer, sliced or not:
// read in place); otherwise its elements gathered into buf, densely, and their strides.
inline std::vector<int64_t> dense_rows(const mx::array& a, std::vector<float>& buf) {
  const auto& st = a.strides();
  if (st[3] == 1) return {st[0], st[1], st[2], 1};
  dense(a, buf);
  const int64_t n1 = a.shape(1), n2 = a.shape(2), n3 = a.shape(3);
  return {n1 * n2 * n3, n2 * n3, n3, 1};
}

// A decode step's boolean mask [B or 1, 1, 1, S] (any strides, often broadcast) as the
// attention kernel takes it: B rows of S bytes, 1 where the row sees the key.
inline std::vector<unsigned char> mask_rows(const mx::array& a, int B, int S) {
  const auto* p = a.data<bool>();
  const int64_t sb = a.shape(0) == 1 ? 0 : a.strides()[0], ss = a.strides()[3];
  std::vector<unsigned char> m(static_cast<size_t>(B) * S);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < S; t++) m[static_cast<size_t>(b) * S + t] = p[b * sb + t * ss];
  return m;
}

// Whether a is a decode step's boolean mask [B or 1, 1, 1, S].
inline bool is_step_mask(const mx::array& a, int B, int S) {
  return a.dtype() == mx::bool_ && a.ndim() == 4 && a.shape(1) == 1 && a.shape(2) == 1 &&
         a.shape(3) == S && (a.shape(0) == 1 || a.shape(0) == B);
}

// A parameter as given when it is dense already (loaded weights are), else made so.
inline mx::array dense_param(const mx::array& a, mx::Stream s) {
  return a.is_available() && a.flags().row_contiguous ? a : mx::contiguous(a, false, s);
}

// attn.c's mlxnb_decode_attention, handed over by address (set_attention_kernels, in
// bindings/ext.cpp): it lives in the fast path's own library, which this one does not link.
using decode_fn = int (*)(const float*, const float*, const float*, const unsigned char*,
                          float*, int, int, int, int, int, long, long, long, long, long, long,
                          float, int);
extern decode_fn decode_kernel;

// Registers the fused layer halves (bindings/layer.cpp) on the module.
void bind_layers(nanobind::module_& m);

// Registers weight packing on huge pages (bindings/pages.cpp) on the module.
void bind_pages(nanobind::module_& m);

// Registers sampling's row work (bindings/sample.cpp) on the module.
void bind_sampling(nanobind::module_& m);

}  // namespace mlxnb
