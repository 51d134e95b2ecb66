// Weights on transparent huge pages: one MLX primitive that copies arrays into one
// buffer whose 2 MiB-aligned stretch is advised for huge pages (Linux).
//
// A decode step streams every weight once. With 4 KiB pages a 135M float32 model is
// 130,000 pages, and walking their page tables costs a few percent of the stream
// (measured 3-8% on this machine's one-row products, paired in one process). MLX
// allocates with malloc, whose large blocks are mmap'd and, under the usual
// `transparent_hugepage=madvise`, never huge. Here the buffer's pages are advised
// before they are first written, so the first writes fault in huge pages.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/vector.h>

#include <cstring>

#include "ext.h"
#include "scratch.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace nb = nanobind;

namespace mlxnb {
namespace {

constexpr size_t HUGE_PAGE = size_t(1) << 21;
constexpr size_t ALIGN = 64;  // each array starts on a cache line

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

long advised_bytes = 0;    // advised so far in this process (status, tests)
long allocated_bytes = 0;  // buffers allocated so far (the model's memory counts them)

struct PackParams {
  bool operator==(const PackParams&) const = default;
};

// Inputs: row-contiguous arrays. Outputs: the same arrays, one buffer.
class HugePack : public CpuPrimitive<PackParams> {
 public:
  HugePack(mx::Stream s) : CpuPrimitive(s, PackParams{}, "MlxnbHugePack") {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    std::vector<size_t> at;
    size_t total = 0;
    for (const auto& a : inputs) {
      at.push_back(total);
      total += round_up(a.nbytes(), ALIGN);
    }
    // One spare huge page, so a 2 MiB-aligned start lies inside the block.
    const size_t bytes = round_up(total + HUGE_PAGE, 4096);
    allocated_bytes += bytes;
    mx::array holder(mx::allocator::malloc(bytes), {static_cast<int>(bytes / 4096), 4096},
                     mx::uint8);
    char* raw = holder.data<char>();
    const size_t lead = round_up(reinterpret_cast<uintptr_t>(raw), HUGE_PAGE) -
                        reinterpret_cast<uintptr_t>(raw);
    char* base = raw + lead;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    // Before the first write: the writes then fault in huge pages (where the kernel
    // has them); afterwards it would take khugepaged's slow collapsing.
    const size_t span = (bytes - lead) / HUGE_PAGE * HUGE_PAGE;
    if (span && madvise(base, span, MADV_HUGEPAGE) == 0) advised_bytes += span;
#endif
    auto& enc = mx::cpu::get_command_encoder(stream());
    std::vector<char*> dst;
    for (size_t i = 0; i < inputs.size(); i++) {
      auto& o = outputs[i];
      const size_t item = o.itemsize(), off = lead + at[i];
      if (off % item) throw std::runtime_error("huge_pack: misaligned offset");
      o.copy_shared_buffer(holder, inputs[i].strides(), inputs[i].flags(), inputs[i].data_size(),
                           static_cast<int64_t>(off / item));
      if (o.data<char>() != base + at[i])
        throw std::runtime_error("huge_pack: this mlx places shared buffers differently");
      dst.push_back(base + at[i]);
      enc.set_input_array(inputs[i]);
      enc.set_output_array(o);
    }
    enc.dispatch([ins = inputs, dst = std::move(dst)]() {
      for (size_t i = 0; i < ins.size(); i++) std::memcpy(dst[i], ins[i].data<char>(), ins[i].nbytes());
    });
  }
};

std::vector<mx::array> huge_pack(const std::vector<mx::array>& arrays) {
  if (arrays.empty()) return {};
  auto s = mx::default_stream(mx::Device::cpu);
  std::vector<mx::array> ins;
  std::vector<mx::Shape> shapes;
  std::vector<mx::Dtype> dtypes;
  for (const auto& a : arrays) {
    ins.push_back(dense_param(a, s));
    shapes.push_back(a.shape());
    dtypes.push_back(a.dtype());
  }
  return mx::array::make_arrays(std::move(shapes), dtypes, std::make_shared<HugePack>(s), ins);
}

}  // namespace

void bind_pages(nb::module_& m) {
  m.def("huge_pack", &huge_pack, nb::arg("arrays"),
        "The arrays copied into one buffer advised for transparent huge pages (CPU).");
  m.def("huge_advised", [] { return advised_bytes; }, "Bytes advised for huge pages so far.");
  m.def("huge_allocated", [] { return allocated_bytes; }, "Bytes huge_pack allocated so far.");
  m.def("scratch_release", &mlxnb_scratch_release,
        "Frees the kernels' kept scratch buffers that no call holds; returns the bytes freed.");
  m.def(
      "scratch_held",
      [] {
        long grows = 0;
        const size_t held = mlxnb_scratch_held(&grows);
        return std::make_pair(held, grows);
      },
      "(bytes the kernels' scratch buffers hold now, times one was allocated so far).");
}

}  // namespace mlxnb
