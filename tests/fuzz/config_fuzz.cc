#include <string>
#include <vector>

#include "common/check.h"
#include "common/config.h"
#include "tests/fuzz/fuzz_targets.h"
#include "train/dlrm/dlrm_config.h"
#include "train/lp/lp_config.h"
#include "train/nc/nc_config.h"

namespace sluice::fuzz {
namespace {

template <class Config>
Status Load(const std::string& text, const std::vector<std::string>& overrides, Config& config) {
  SLUICE_ASSIGN_OR_RETURN(ConfigNode root, ParseConfigText(text, "fuzz.yaml"));
  if (root.kind == ConfigNode::Kind::kNull) root.kind = ConfigNode::Kind::kMap;
  if (root.kind != ConfigNode::Kind::kMap) return InvalidArgument("not a map");
  for (const std::string& assignment : overrides) SLUICE_RETURN_IF_ERROR(ApplyOverride(root, assignment));
  ConfigLoader loader(&root, "");
  config.VisitFields(loader);
  return loader.Finish();
}

template <class Config>
void LoadAndRoundTrip(const std::string& text, const std::vector<std::string>& overrides) {
  Config config;
  if (!Load(text, overrides, config).ok()) return;
  const std::string dumped = DumpConfig(config);
  Config again;
  Status s = Load(dumped, {}, again);
  SLUICE_CHECK(s.ok(), "a loaded config's dump does not load: %s\n%s", s.message().c_str(), dumped.c_str());
  SLUICE_CHECK(DumpConfig(again) == dumped, "a loaded config's dump loads to another config:\n%s",
               dumped.c_str());
}

}  // namespace

int Config(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string text = input.substr(0, nul);
  std::vector<std::string> overrides;
  for (size_t at = nul; at != std::string::npos && at < input.size();) {
    const size_t next = input.find('\0', at + 1);
    overrides.push_back(input.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1));
    at = next;
  }
  // The config type the `task` key picks, as sluice does; without the key (sluice's default is
  // link prediction) every type, for coverage.
  const size_t task = text.find("task:");
  const std::string named = task == std::string::npos ? "" : text.substr(task + 5, 24);
  const bool rec = named.find("recommendation") != std::string::npos;
  const bool nc = named.find("node_classification") != std::string::npos;
  if (!rec && !nc) LoadAndRoundTrip<LpConfig>(text, overrides);
  if (rec || task == std::string::npos) LoadAndRoundTrip<DlrmConfig>(text, overrides);
  if (nc || task == std::string::npos) LoadAndRoundTrip<NcConfig>(text, overrides);
  return 0;
}

}  // namespace sluice::fuzz
