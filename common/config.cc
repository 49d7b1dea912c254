#include "common/config.h"

#include <sys/stat.h>

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "common/json.h"
#include "common/units.h"

namespace sluice {

ConfigNode::ConfigNode() = default;
ConfigNode::~ConfigNode() = default;
ConfigNode::ConfigNode(const ConfigNode&) = default;
ConfigNode::ConfigNode(ConfigNode&&) noexcept = default;
ConfigNode& ConfigNode::operator=(const ConfigNode&) = default;
ConfigNode& ConfigNode::operator=(ConfigNode&&) noexcept = default;
namespace {

std::string Where(const std::string& source, const YAML::Mark& mark) {
  return source + ":" + std::to_string(mark.line + 1);
}

Result<ConfigNode> Convert(const YAML::Node& yaml, const std::string& source) {
  ConfigNode node;
  node.where = Where(source, yaml.Mark());
  switch (yaml.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      node.kind = ConfigNode::Kind::kNull;
      return node;
    case YAML::NodeType::Scalar:
      node.kind = ConfigNode::Kind::kScalar;
      node.scalar = yaml.Scalar();
      return node;
    case YAML::NodeType::Sequence:
      node.kind = ConfigNode::Kind::kSequence;
      for (const auto& item : yaml) {
        SLUICE_ASSIGN_OR_RETURN(ConfigNode child, Convert(item, source));
        node.items.push_back(std::move(child));
      }
      return node;
    case YAML::NodeType::Map:
      node.kind = ConfigNode::Kind::kMap;
      for (const auto& kv : yaml) {
        if (!kv.first.IsScalar()) {
          return InvalidArgument(Where(source, kv.first.Mark()) + ": keys must be plain names");
        }
        const std::string key = kv.first.Scalar();
        if (node.Find(key) != nullptr) {
          return InvalidArgument(Where(source, kv.first.Mark()) + ": duplicate key '" + key + "'");
        }
        SLUICE_ASSIGN_OR_RETURN(ConfigNode child, Convert(kv.second, source));
        child.where = Where(source, kv.first.Mark());
        node.entries.emplace_back(key, std::move(child));
      }
      return node;
  }
  return node;
}

template <typename T>
Status ParseInteger(const ConfigNode& node, T& out) {
  if (node.kind != ConfigNode::Kind::kScalar) return InvalidArgument("expected an integer");
  const std::string& s = node.scalar;
  T value{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) {
    return InvalidArgument(std::string(std::is_signed_v<T> ? "expected an integer" : "expected a non-negative integer") +
                           ", got '" + s + "'");
  }
  out = value;
  return Status::Ok();
}

}  // namespace

ConfigNode* ConfigNode::Find(std::string_view key) {
  for (auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

Result<ConfigNode> ParseConfigText(const std::string& text, const std::string& source_name) {
  if (std::string why = Utf8Problem(text, source_name); !why.empty()) return InvalidArgument(why);
  try {
    return Convert(YAML::Load(text), source_name);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(source_name + ":" + std::to_string(e.mark.line + 1) +
                           ": malformed YAML: " + e.msg);
  }
}

Result<ConfigNode> ParseConfigFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return InvalidArgument("config " + path + ": is a directory, expected a YAML file");
  }
  std::ifstream in(path);
  if (!in) return ErrnoStatus("cannot open config " + path, errno);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return ParseConfigText(text, path);
}

Status ApplyOverride(ConfigNode& root, std::string_view assignment) {
  const size_t eq = assignment.find('=');
  const std::string where = "--set " + std::string(assignment);
  if (eq == std::string_view::npos || eq == 0) {
    return InvalidArgument(where + ": expected key=value (e.g. io.queue_depth=64)");
  }
  std::string key(assignment.substr(0, eq));
  SLUICE_ASSIGN_OR_RETURN(ConfigNode value,
                          ParseConfigText(std::string(assignment.substr(eq + 1)), where));
  value.where = where;
  ConfigNode* node = &root;
  size_t start = 0;
  while (true) {
    const size_t dot = key.find('.', start);
    const std::string part = key.substr(start, dot == std::string::npos ? dot : dot - start);
    if (part.empty()) return InvalidArgument(where + ": empty key component in '" + key + "'");
    if (node->kind == ConfigNode::Kind::kNull) node->kind = ConfigNode::Kind::kMap;
    if (node->kind != ConfigNode::Kind::kMap) {
      return InvalidArgument(where + ": '" + part + "' is below a value, not a section");
    }
    ConfigNode* child = node->Find(part);
    if (child == nullptr) {
      node->entries.emplace_back(part, ConfigNode{});
      child = &node->entries.back().second;
      child->where = where;
    }
    if (dot == std::string::npos) {
      *child = std::move(value);
      return Status::Ok();
    }
    node = child;
    start = dot + 1;
  }
}

Status ParseValue(const ConfigNode& node, bool& out) {
  if (node.kind == ConfigNode::Kind::kScalar) {
    const std::string& s = node.scalar;
    if (s == "true" || s == "True" || s == "yes" || s == "on") return out = true, Status::Ok();
    if (s == "false" || s == "False" || s == "no" || s == "off") return out = false, Status::Ok();
  }
  return InvalidArgument("expected true or false, got '" + node.scalar + "'");
}
Status ParseValue(const ConfigNode& node, int& out) { return ParseInteger(node, out); }
Status ParseValue(const ConfigNode& node, int64_t& out) { return ParseInteger(node, out); }
Status ParseValue(const ConfigNode& node, uint64_t& out) { return ParseInteger(node, out); }

Status ParseValue(const ConfigNode& node, double& out) {
  if (node.kind == ConfigNode::Kind::kScalar) {
    const std::string& s = node.scalar;
    double value = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (ec == std::errc() && end == s.data() + s.size() && std::isfinite(value)) {
      out = value;
      return Status::Ok();
    }
  }
  return InvalidArgument("expected a number, got '" + node.scalar + "'");
}

Status ParseValue(const ConfigNode& node, std::string& out) {
  if (node.kind != ConfigNode::Kind::kScalar) return InvalidArgument("expected a string");
  if (InvalidUtf8At(node.scalar) != std::string_view::npos) {  // yaml-cpp's \xNN is a raw byte
    return InvalidArgument("expected UTF-8 text (an escape such as \\xa0 gives a raw byte: write the character)");
  }
  out = node.scalar;
  return Status::Ok();
}

Status ParseValue(const ConfigNode& node, Bytes& out) {
  if (node.kind != ConfigNode::Kind::kScalar) return InvalidArgument("expected a byte size");
  SLUICE_ASSIGN_OR_RETURN(out.value, ParseBytes(node.scalar));
  return Status::Ok();
}

std::string FormatValue(bool v) { return v ? "true" : "false"; }
std::string FormatValue(int v) { return std::to_string(v); }
std::string FormatValue(int64_t v) { return std::to_string(v); }
std::string FormatValue(uint64_t v) { return std::to_string(v); }
std::string FormatValue(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.17g", v);
  return text;
}
std::string ShortestValue(double v) {
  char text[32];
  const auto r = std::to_chars(text, text + sizeof(text), v);
  return std::string(text, r.ptr);
}
// A YAML double-quoted scalar that reads back as `v`: quotes and backslashes escaped, control
// characters (a newline would fold into a space) as \xNN.
std::string FormatValue(const std::string& v) {
  std::string quoted = "\"";
  for (char c : v) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      quoted.push_back('\\');
      quoted.push_back(c);
    } else if (u < 0x20 || u == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", u);
      quoted += escaped;
    } else {
      quoted.push_back(c);
    }
  }
  return quoted + "\"";
}
std::string FormatValue(Bytes v) {
  // Exact and re-parseable: the largest binary unit that divides the value.
  static const char* kNames[] = {"", "KiB", "MiB", "GiB", "TiB"};
  uint64_t value = v.value;
  int unit = 0;
  while (value != 0 && value % 1024 == 0 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return std::to_string(value) + kNames[unit];
}

ConfigNode* ConfigLoader::Lookup(const char* name) {
  ConfigNode* child = node_->Find(name);
  if (child != nullptr) child->used = true;
  return child;
}

Status ConfigLoader::Finish() {
  if (!status_.ok()) return status_;
  for (auto& [key, child] : node_->entries) {
    if (!child.used) {
      return InvalidArgument(child.where + ": unknown key '" + prefix_ + key + "'");
    }
  }
  return Status::Ok();
}

void ConfigReferenceWriter::Row(const std::string& key, const std::string& type,
                                const std::string& value, const char* doc) {
  auto cell = [](std::string text) {
    std::string out;
    for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
    return out;
  };
  out_ << "| `" << key << "` | " << cell(type) << " | " << (value.empty() ? "" : "`" + cell(value) + "`")
       << " | " << cell(doc != nullptr ? doc : "") << " |\n";
}

void ConfigDumper::Comment(const char* doc) {
  if (doc != nullptr && doc[0] != '\0') out_ << Pad() << "# " << doc << "\n";
}

}  // namespace sluice
