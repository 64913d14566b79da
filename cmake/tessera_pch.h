// The library's precompiled header (TESSERA_PRECOMPILED_HEADERS, CMakeLists.txt): the headers most
// of its files include, parsed once per layer instead of once per file. Only headers from outside
// the project, which change with the system, not with an edit; a file still includes what it uses.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>
