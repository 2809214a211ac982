// The surrogate NPU's device: PrivateUse1 tensors whose memory is host memory.
//
// Registered like an out-of-tree backend (PyTorch's test/cpp_extensions/open_registration_extension): a host
// allocator that counts what it hands out (torch.npu's memory statistics), a device guard of one device whose
// events are always complete, the PrivateUse1 hooks autograd asks for, the factory, copy and resize kernels,
// the view kernels (metadata only: a view shares its base's storage, as on a real device), convolution (which
// ATen sends to `convolution_overrideable` on such a backend, and the CPU has no kernel for), the operators
// that update an argument their schema does not mark as written (batch norm's running statistics: the CPU
// fallback copies back only what the schema says), and a boxed CPU fallback for every other operator.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_reshape_alias_cpu_dispatch.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/ops/unfold_cpu_dispatch.h>
#include <ATen/ops/view_as_complex_cpu_dispatch.h>
#include <ATen/ops/view_as_real_cpu_dispatch.h>
#include <ATen/ops/view_cpu_dispatch.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace {

// Host memory, counted: allocated bytes now and at their peak since the last reset. The table and its lock are
// never destroyed: tensors still alive at exit are freed after static destructors ran.
struct HostAllocator final : at::Allocator {
  static std::mutex& lock() {
    static auto* mutex = new std::mutex;
    return *mutex;
  }
  static std::unordered_map<void*, size_t>& sizes() {
    static auto* table = new std::unordered_map<void*, size_t>;
    return *table;
  }
  static std::atomic<int64_t> allocated, peak;

  static void release(void* pointer) {
    if (pointer == nullptr) return;
    {
      std::lock_guard<std::mutex> guard(lock());
      auto found = sizes().find(pointer);
      if (found != sizes().end()) {
        allocated -= static_cast<int64_t>(found->second);
        sizes().erase(found);
      }
    }
    c10::free_cpu(pointer);
  }

  at::DataPtr allocate(size_t bytes) override {
    void* pointer = bytes ? c10::alloc_cpu(bytes) : nullptr;
    if (pointer != nullptr) {
      std::lock_guard<std::mutex> guard(lock());
      sizes()[pointer] = bytes;
      int64_t now = allocated += static_cast<int64_t>(bytes);
      if (now > peak) peak = now;
    }
    return {pointer, pointer, &release, at::Device(at::DeviceType::PrivateUse1, 0)};
  }
  at::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
};
std::atomic<int64_t> HostAllocator::allocated{0};
std::atomic<int64_t> HostAllocator::peak{0};
HostAllocator host_allocator;

constexpr c10::DispatchKeySet device_keys(c10::DispatchKey::PrivateUse1);

// NPU_SURROGATE_NO_FLOAT64=1: the device allocates no float64 tensor, as an NPU without double (torch_npu's
// kernels narrow fp64), so a harness path that computes in float64 on the device fails here as it would there.
bool refuses_float64() {
  static const bool refuses = [] {
    const char* value = std::getenv("NPU_SURROGATE_NO_FLOAT64");
    return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
  }();
  return refuses;
}

at::ScalarType allowed(std::optional<at::ScalarType> dtype) {
  at::ScalarType chosen = c10::dtype_or_default(dtype);
  TORCH_CHECK(!(chosen == at::kDouble && refuses_float64()),
              "float64 is not supported on this device (the surrogate NPU with NPU_SURROGATE_NO_FLOAT64=1)");
  return chosen;
}

at::Tensor empty_memory_format(at::IntArrayRef size, std::optional<at::ScalarType> dtype, std::optional<at::Layout>,
                               std::optional<at::Device>, std::optional<bool>,
                               std::optional<at::MemoryFormat> memory_format) {
  return at::detail::empty_generic(size, &host_allocator, device_keys, allowed(dtype), memory_format);
}

at::Tensor empty_strided(at::IntArrayRef size, at::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout>, std::optional<at::Device>, std::optional<bool>) {
  return at::detail::empty_strided_generic(size, stride, &host_allocator, device_keys, allowed(dtype));
}

// A CPU tensor over the very memory of `tensor` (same sizes, strides and offset): both live in host memory.
at::Tensor host_alias(const at::Tensor& tensor) {
  auto storage = tensor.storage();
  c10::Storage host(c10::Storage::use_byte_size_t(), storage.nbytes(),
                    at::DataPtr(storage.mutable_data(), at::Device(at::kCPU)), nullptr, false);
  at::Tensor alias = at::detail::empty_cpu({0}, tensor.scalar_type(), std::nullopt, std::nullopt, std::nullopt,
                                           std::nullopt);
  at::cpu::set_(alias, host, tensor.storage_offset(), tensor.sizes(), tensor.strides());
  // A lazily conjugated or negated view (fft's conj results) stays one: its bits are the tensor's, not the memory's.
  alias._set_conj(tensor.is_conj());
  alias._set_neg(tensor.is_neg());
  return alias;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool) {
  at::Tensor source = self.is_cpu() ? self : host_alias(self);
  at::Tensor target = dst.is_cpu() ? dst : host_alias(dst);
  target.copy_(source);
  return dst;
}

// The CPU fallback's way back for an out= argument: the CPU kernel resized its host copy, in the layout its
// TensorIterator chose from the inputs (a permuted input gives a permuted result). A device out= that must be
// resized takes that layout too, as the CPU's own out= kernel gives it: resized contiguous, the result of a
// composite that allocates an empty out and calls the out= op (`logical_or`, `heaviside`, the comparisons) came
// back contiguous where the CPU's is permuted, unlike its meta, which Inductor's code for it relies on.
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) {
    dst.resize_(self.sizes());
    if (self.is_non_overlapping_and_dense()) dst.as_strided_(self.sizes(), self.strides(), dst.storage_offset());
  }
  return copy_from(self, dst, false);
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef sym_size, std::optional<at::MemoryFormat>) {
  auto size = C10_AS_INTARRAYREF_SLOW(sym_size);
  auto* impl = self.unsafeGetTensorImpl();
  int64_t needed = at::detail::computeStorageNbytesContiguous(size, self.dtype().itemsize(), self.storage_offset());
  auto storage = self.storage();
  if (static_cast<int64_t>(storage.nbytes()) < needed) {
    auto fresh = host_allocator.allocate(needed);
    if (storage.nbytes()) std::memcpy(fresh.get(), storage.data(), storage.nbytes());
    storage.set_data_ptr_noswap(std::move(fresh));
    storage.set_nbytes(needed);
  }
  impl->set_sizes_contiguous(size);
  return self;
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &host_allocator, true);
  return at::cpu::set_(self, storage, 0, {0}, {});
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source) { return at::cpu::set_(self, source); }
at::Tensor& set_storage_at(at::Tensor& self, at::Storage source, c10::SymInt offset, c10::SymIntArrayRef size,
                           c10::SymIntArrayRef stride) {
  return at::cpu::set__symint(self, source, offset, size, stride);
}
at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) { return at::cpu::set_(self, source); }
at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> offset) {
  return at::cpu::as_strided_symint(self, size, stride, offset);
}
at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) { return at::cpu::view_symint(self, size); }
at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::cpu::_reshape_alias_symint(self, size, stride);
}
at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return at::cpu::unfold(self, dimension, size, step);
}
at::Tensor view_as_real(const at::Tensor& self) { return at::cpu::view_as_real(self); }
at::Tensor view_as_complex(const at::Tensor& self) { return at::cpu::view_as_complex(self); }

// A CPU result as a device tensor (same sizes and strides).
at::Tensor on_device(const at::Tensor& host) {
  if (!host.defined()) return host;
  at::Tensor out = empty_strided(host.sizes(), host.strides(), host.scalar_type(), std::nullopt, std::nullopt,
                                 std::nullopt);
  host_alias(out).copy_(host);
  return out;
}

std::optional<at::Tensor> host_optional(const std::optional<at::Tensor>& tensor) {
  if (!tensor.has_value() || !tensor->defined()) return tensor;
  return host_alias(*tensor);
}

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
                       bool transposed, c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  return on_device(at::convolution_symint(host_alias(input), host_alias(weight), host_optional(bias), stride, padding,
                                          dilation, transposed, output_padding, groups));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, std::array<bool, 3> output_mask) {
  std::vector<c10::SymInt> bias_sizes{weight.sym_size(transposed ? 1 : 0) * (transposed ? groups : 1)};
  auto [grad_input, grad_weight, grad_bias] = at::convolution_backward_symint(
      host_alias(grad_output), host_alias(input), host_alias(weight), bias_sizes, stride, padding, dilation,
      transposed, output_padding, groups, output_mask);
  return {on_device(grad_input), on_device(grad_weight), on_device(grad_bias)};
}

// The CPU kernel run on the very memory of the device arguments (host aliases), its results copied to the device:
// for operators that write arguments their schema does not mark as written.
void on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  for (size_t i = stack->size() - schema.arguments().size(); i < stack->size(); ++i) {
    auto& value = (*stack)[i];
    if (value.isTensor() && value.toTensor().defined() && !value.toTensor().is_cpu()) {
      value = c10::IValue(host_alias(value.toTensor()));
    }
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  for (size_t i = stack->size() - schema.returns().size(); i < stack->size(); ++i) {
    auto& value = (*stack)[i];
    if (value.isTensor()) value = c10::IValue(on_device(value.toTensor()));
  }
}

// What the autograd engine, AOT autograd and the random-number ops ask of a PrivateUse1 backend.
struct HostHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return 1; }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  // Kernels run on the host and draw from the CPU generator.
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    return at::detail::getDefaultCPUGenerator();
  }
  at::Device getDeviceFromPtr(void*) const override { return at::Device(at::DeviceType::PrivateUse1, 0); }
  bool isPinnedPtr(const void*) const override { return false; }
  at::Allocator* getPinnedMemoryAllocator() const override { return c10::GetAllocator(c10::DeviceType::CPU); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t bytes) const override {
    auto fresh = host_allocator.allocate(bytes);
    size_t kept = std::min(bytes, storage.nbytes());
    if (kept) std::memcpy(fresh.get(), storage.data(), kept);
    const_cast<c10::Storage&>(storage).set_data_ptr_noswap(std::move(fresh));
    const_cast<c10::Storage&>(storage).set_nbytes(bytes);
  }
};

// Registered when the library loads, as the open-registration extension does.
const bool hooks_registered = [] {
  static HostHooks hooks;
  at::RegisterPrivateUse1HooksInterface(&hooks);
  return true;
}();

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) { at::native::cpu_fallback(op, stack); }

// Memory statistics for torch.npu (torch.ops.npu_surrogate.*).
int64_t memory_allocated() { return HostAllocator::allocated; }
int64_t max_memory_allocated() { return HostAllocator::peak; }
void reset_peak_memory_stats() { HostAllocator::peak = HostAllocator::allocated.load(); }

}  // namespace

namespace {
// One device, one stream, and kernels that have finished when they return: events are always complete.
struct HostGuard final : c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kind = c10::DeviceType::PrivateUse1;
  c10::DeviceType type() const override { return kind; }
  c10::Device exchangeDevice(c10::Device) const override { return c10::Device(kind, 0); }
  c10::Device getDevice() const override { return c10::Device(kind, 0); }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kind, 0));
  }
  c10::Stream getNewStream(c10::Device, int) const override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kind, 0));
  }
  c10::Stream exchangeStream(c10::Stream) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kind, 0));
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void** event, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {
    static int completed;
    *event = &completed;
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
};
}  // namespace

namespace at::detail {
C10_REGISTER_GUARD_IMPL(PrivateUse1, HostGuard);
}
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &host_allocator);

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", &empty_memory_format);
  m.impl("empty_strided", &empty_strided);
  m.impl("_copy_from", &copy_from);
  m.impl("_copy_from_and_resize", &copy_from_and_resize);
  m.impl("resize_", &resize_);
  m.impl("set_", &set_empty);
  m.impl("set_.source_Storage", &set_storage);
  m.impl("set_.source_Storage_storage_offset", &set_storage_at);
  m.impl("set_.source_Tensor", &set_tensor);
  // Views: metadata over the same storage.
  m.impl("as_strided", &as_strided);
  m.impl("view", &view);
  m.impl("_reshape_alias", &reshape_alias);
  m.impl("unfold", &unfold);
  m.impl("view_as_real", &view_as_real);
  m.impl("view_as_complex", &view_as_complex);
  m.impl("convolution_overrideable", &convolution);
  m.impl("convolution_backward_overrideable", &convolution_backward);
  // They update running_mean and running_var in place; their schemas say nothing of it.
  m.impl("native_batch_norm", torch::CppFunction::makeFromBoxedFunction<&on_host>());
  m.impl("batch_norm_update_stats", torch::CppFunction::makeFromBoxedFunction<&on_host>());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>()); }

// A copy from a lazily conjugated (or negated) tensor reaches `_copy_from` with the bit set; the Conjugate key's
// fallback would materialize it with clone, whose copy_ calls `_copy_from` again, without end (fft's conj results
// killed the process). `copy_from` copies through host aliases that keep the bits, as the CPU's copy_ reads them.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) { m.impl("_copy_from", torch::CppFunction::makeFallthrough()); }
TORCH_LIBRARY_IMPL(aten, Negative, m) { m.impl("_copy_from", torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY(npu_surrogate, m) {
  m.def("memory_allocated() -> int", &memory_allocated);
  m.def("max_memory_allocated() -> int", &max_memory_allocated);
  m.def("reset_peak_memory_stats() -> ()", &reset_peak_memory_stats);
}
