// What the API server answers when it refuses a server-side apply: the
// message of its Status object, else the start of the body. Never a crash;
// a Status's message comes back whole, anything else at most 200 bytes.
#include <nlohmann/json.hpp>

#include "apiserver/apiserver.h"
#include "fuzz.h"

using namespace numaserve;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string body(fuzz::text(data, size));
  const std::string reason = kube::apiserver::refusal_reason(body);
  const auto status = nlohmann::json::parse(body, nullptr, false);
  if (status.is_object() && status.contains("message") && status["message"].is_string()) {
    FUZZ_CHECK(reason == status["message"].get<std::string>(), "%s", "the Status message changed on the way");
  } else {
    FUZZ_CHECK(reason.size() <= 200 && body.compare(0, reason.size(), reason) == 0, "a reason of %zu bytes",
               reason.size());
  }
  return 0;
}
