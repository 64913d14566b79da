#include "core/resource_mgr.h"

namespace tessera::internal {

void ResourceMgr::cancel_all(const Status& reason) {
  std::vector<std::shared_ptr<ResourceBase>> all;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [k, v] : resources_) all.push_back(v);
  }
  for (auto& r : all) r->cancel_all(reason);
}

void ResourceMgr::clear() {
  std::map<std::string, std::shared_ptr<ResourceBase>> dead;
  std::lock_guard<std::mutex> l(mu_);
  dead.swap(resources_);
}

std::vector<std::string> ResourceMgr::names() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::string> out;
  for (auto& [k, v] : resources_) out.push_back(k);
  return out;
}

}  // namespace tessera::internal
