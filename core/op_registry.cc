#include "core/op_registry.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/op_kernel.h"

namespace tessera::internal {

OpRegistry& OpRegistry::global() {
  static OpRegistry* registry = new OpRegistry();  // never destroyed: used during static exit
  return *registry;
}

void OpRegistry::register_op(OpDef def) {
  TESSERA_CHECK(!ops_.count(def.type));
  std::string type = def.type;
  ops_[type] = std::make_unique<OpDef>(std::move(def));
}

void OpRegistry::register_kernel(const std::string& type, const std::string& device_type,
                                 KernelFactory f, KernelDTypes dtypes) {
  TESSERA_CHECK(!kernels_.count({type, device_type}));
  kernels_[{type, device_type}] = Kernel{std::move(f), std::move(dtypes)};
}

const OpDef* OpRegistry::find_op(const std::string& type) const {
  auto it = ops_.find(type);
  return it == ops_.end() ? nullptr : it->second.get();
}

const KernelFactory* OpRegistry::find_kernel(const std::string& type,
                                             const std::string& device_type) const {
  auto it = kernels_.find({type, device_type});
  return it == kernels_.end() ? nullptr : &it->second.factory;
}

std::vector<std::string> OpRegistry::op_types() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : ops_) out.push_back(k);
  return out;
}

std::vector<std::string> OpRegistry::kernel_device_types(const std::string& type) const {
  std::vector<std::string> out;
  for (const auto& [k, v] : kernels_) {
    if (k.first == type) out.push_back(k.second);
  }
  return out;
}

void OpRegistry::register_kernel_adapter(const std::string& device_type,
                                         const std::string& base_device_type, KernelAdapter adapter) {
  TESSERA_CHECK(!adapters_.count(device_type) && device_type != base_device_type);
  adapters_[device_type] = Adapter{base_device_type, std::move(adapter)};
}

const OpRegistry::Kernel* OpRegistry::kernel_of(const std::string& type, const std::string& device_type) const {
  if (auto it = kernels_.find({type, device_type}); it != kernels_.end()) return &it->second;
  auto a = adapters_.find(device_type);
  if (a == adapters_.end()) return nullptr;
  const OpDef* def = find_op(type);
  if (def == nullptr || def->host_only) return nullptr;
  auto it = kernels_.find({type, a->second.base_device_type});
  return it == kernels_.end() ? nullptr : &it->second;
}

namespace {

// Whether a kernel of `dtypes` takes `node` (by its output 0; a node without outputs passes).
bool kernel_takes(const KernelDTypes& dtypes, const Node& node) {
  return dtypes.empty() || node.output_dtypes.empty() ||
         std::find(dtypes.begin(), dtypes.end(), node.output_dtypes[0]) != dtypes.end();
}

}  // namespace

bool OpRegistry::has_kernel(const std::string& type, const std::string& device_type) const {
  return kernel_of(type, device_type) != nullptr;
}

bool OpRegistry::has_kernel(const Node& node, const std::string& device_type) const {
  const Kernel* k = kernel_of(node.type, device_type);
  return k != nullptr && kernel_takes(k->dtypes, node);
}

StatusOr<std::unique_ptr<OpKernel>> OpRegistry::create_kernel(const Node& node,
                                                              const std::string& device_type) const {
  const Kernel* k = kernel_of(node.type, device_type);
  if (k == nullptr) {
    return errors::unimplemented("{}: no {} kernel registered for op type {}", node.debug_name(), device_type,
                                 node.type);
  }
  if (!kernel_takes(k->dtypes, node)) {
    std::string taken;
    for (DType d : k->dtypes) taken += fmt::format("{}{}", taken.empty() ? "" : ", ", dtype_name(d));
    return errors::unimplemented("{}: no {} kernel for op type {} of dtype {} (it takes {})", node.debug_name(),
                                 device_type, node.type, dtype_name(node.output_dtypes[0]), taken);
  }
  try {
    if (kernels_.count({node.type, device_type})) return k->factory(node);
    return adapters_.at(device_type).adapter(k->factory(node));
  } catch (...) {
    return status_from_current_exception().with_prefix(node.debug_name() + ": ");
  }
}

bool OpKernel::is_expensive() const {
  // Ops producing more than 16K elements are worth a pool thread; smaller ones run inline.
  constexpr int64_t kInlineElements = 1 << 14;
  for (const auto& s : node_.output_shapes) {
    int64_t n = s.num_elements();
    if (n < 0 || n > kInlineElements) return true;
  }
  return false;
}

// ---- CancellationManager ----

CancellationManager::Token CancellationManager::register_callback(Callback cb) {
  std::lock_guard<std::mutex> l(mu_);
  if (cancelled_.load(std::memory_order_relaxed)) return kInvalidToken;
  Token t = next_++;
  callbacks_.emplace(t, std::move(cb));
  return t;
}

bool CancellationManager::deregister_callback(Token token) {
  std::lock_guard<std::mutex> l(mu_);
  return callbacks_.erase(token) > 0;
}

void CancellationManager::start_cancel(Status reason) {
  std::unordered_map<Token, Callback> cbs;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (cancelled_.load(std::memory_order_relaxed)) return;
    reason_ = reason;
    cancelled_.store(true, std::memory_order_release);
    cbs.swap(callbacks_);
  }
  for (auto& [t, cb] : cbs) cb(reason);
}

bool CancellationManager::is_cancelled() const { return cancelled_.load(std::memory_order_acquire); }

Status CancellationManager::reason() const {
  std::lock_guard<std::mutex> l(mu_);
  return reason_;
}

}  // namespace tessera::internal
