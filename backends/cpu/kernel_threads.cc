#include "backends/cpu/kernel_threads.h"

#include <algorithm>

#include "tbb/info.h"

namespace tandem::cpu {

KernelThreads::KernelThreads(int threads)
    : threads_(threads > 0 ? threads : HostCores()), arena_(threads_, /*reserved_for_masters=*/1) {}

int HostCores() { return std::max(1, tbb::info::default_concurrency()); }

int SharedCoreThreads(int actors) { return std::max(1, HostCores() / std::max(1, actors)); }

}  // namespace tandem::cpu
