#pragma once
// Human-readable rendering of what discovery found: the operator's first
// look at a node (`numaserve-topology-agent discover`).

#include <optional>
#include <string>
#include <vector>

#include "discover/discover.h"

namespace numaserve::agent::report {

// Bytes as "63.9 GiB" / "512 MiB": binary units, as the kernel counts memory.
std::string format_bytes(std::uint64_t bytes);

std::string render_text(const discover::NodeReport& report);

}  // namespace numaserve::agent::report
