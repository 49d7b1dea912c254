#pragma once
// The config layer. Each module has one plain struct with documented defaults whose fields are
// listed once, in a VisitFields template:
//
//   struct IoConfig {
//     int queue_depth = 32;
//     template <class V> void VisitFields(V& v) {
//       v.Field("queue_depth", queue_depth, "io requests in flight per ring", InRange(1, 4096));
//     }
//   };
//
// That one list drives the YAML loader (unknown keys and invalid values are errors naming the
// key, the file and the line), the dump of the effective config, and `--set key=value`
// overrides. Supported field types: bool, int, int64_t, uint64_t, double, std::string, Bytes
// (a byte count written as "2.5GiB"), enums with EnumNames (below), std::vector of those, and
// nested structs via Section().

#include <compare>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/status.h"

namespace sluice {

// A byte count. Written in YAML as a number or with a unit ("64KiB", "2.5GiB").
struct Bytes {
  uint64_t value = 0;
  friend auto operator<=>(Bytes a, Bytes b) = default;
};

// A parsed YAML document: maps keep their order; every node knows where it came from.
struct ConfigNode {
  // Declared here, defined in config.cc: a node holds pairs of itself, and a defaulted
  // constructor checked inside its own class is a recursion clang refuses (libstdc++'s pair).
  ConfigNode();
  ~ConfigNode();
  ConfigNode(const ConfigNode&);
  ConfigNode(ConfigNode&&) noexcept;
  ConfigNode& operator=(const ConfigNode&);
  ConfigNode& operator=(ConfigNode&&) noexcept;

  enum class Kind { kNull, kScalar, kMap, kSequence };
  Kind kind = Kind::kNull;
  std::string scalar;
  std::vector<std::pair<std::string, ConfigNode>> entries;  // kMap
  std::vector<ConfigNode> items;                            // kSequence
  std::string where;                                        // "run.yaml:12" or "--set io.x"
  bool used = false;                                        // set by the loader

  ConfigNode* Find(std::string_view key);
};

// Parse YAML text / a YAML file. Syntax errors name the file and line.
Result<ConfigNode> ParseConfigText(const std::string& text, const std::string& source_name);
Result<ConfigNode> ParseConfigFile(const std::string& path);
// Applies "a.b.c=value" to the tree (value parsed as YAML, so lists like [15,10,5] work),
// creating maps as needed. Whether the key exists is checked by the loader afterwards.
Status ApplyOverride(ConfigNode& root, std::string_view assignment);

// Scalar conversion, one overload per supported type. Errors say what was expected.
Status ParseValue(const ConfigNode& node, bool& out);
Status ParseValue(const ConfigNode& node, int& out);
Status ParseValue(const ConfigNode& node, int64_t& out);
Status ParseValue(const ConfigNode& node, uint64_t& out);
Status ParseValue(const ConfigNode& node, double& out);
Status ParseValue(const ConfigNode& node, std::string& out);
Status ParseValue(const ConfigNode& node, Bytes& out);
template <typename T>
Status ParseValue(const ConfigNode& node, std::vector<T>& out) {
  if (node.kind != ConfigNode::Kind::kSequence) return InvalidArgument("expected a list");
  std::vector<T> values(node.items.size());
  for (size_t i = 0; i < node.items.size(); ++i) {
    SLUICE_RETURN_IF_ERROR(ParseValue(node.items[i], values[i]));
  }
  out = std::move(values);
  return Status::Ok();
}

// Enum fields. A config enum lists its names once, in a specialisation of EnumNames:
//
//   enum class Decoder { kDistMult, kComplEx };
//   template <> struct EnumNames<Decoder> {
//     static constexpr std::pair<Decoder, const char*> kNames[] = {
//         {Decoder::kDistMult, "distmult"}, {Decoder::kComplEx, "complex"}};
//   };
//
// A field of that type is then read from its name (anything else is an error listing the
// names), dumped as its name, and validated once, at load time.
template <typename E>
struct EnumNames;
template <typename E>
concept ConfigEnum = std::is_enum_v<E> && requires { EnumNames<E>::kNames; };

template <ConfigEnum E>
const char* EnumName(E value) {
  for (const auto& [v, name] : EnumNames<E>::kNames) {
    if (v == value) return name;
  }
  return "?";
}
template <ConfigEnum E>
std::string EnumNameList() {
  std::string list;
  for (const auto& [v, name] : EnumNames<E>::kNames) list += (list.empty() ? "" : ", ") + std::string(name);
  return list;
}
template <ConfigEnum E>
Status ParseValue(const ConfigNode& node, E& out) {
  if (node.kind == ConfigNode::Kind::kScalar) {
    for (const auto& [v, name] : EnumNames<E>::kNames) {
      if (node.scalar == name) {
        out = v;
        return Status::Ok();
      }
    }
  }
  return InvalidArgument("must be one of " + EnumNameList<E>() + ", got '" + node.scalar + "'");
}

// Rendering for the dump.
std::string FormatValue(bool v);
std::string FormatValue(int v);
std::string FormatValue(int64_t v);
std::string FormatValue(uint64_t v);
std::string FormatValue(double v);
std::string ShortestValue(double v);  // the shortest text that reads back as v
std::string FormatValue(const std::string& v);
std::string FormatValue(Bytes v);
template <ConfigEnum E>
std::string FormatValue(E v) {
  return FormatValue(std::string(EnumName(v)));
}
template <typename T>
std::string FormatValue(const std::vector<T>& v) {
  std::string text = "[";
  for (size_t i = 0; i < v.size(); ++i) text += (i ? ", " : "") + FormatValue(v[i]);
  return text + "]";
}

// Validators: return an empty string when the value is acceptable, else why not.
struct NoCheck {
  template <typename T>
  std::string operator()(const T&) const { return {}; }
};
template <typename T>
auto InRange(T lo, T hi) {
  return [lo, hi](const T& v) -> std::string {
    if (v >= lo && v <= hi) return {};
    if constexpr (std::is_floating_point_v<T>) {  // 0.99, not 0.98999999999999999
      return "must be in [" + ShortestValue(lo) + ", " + ShortestValue(hi) + "], got " + ShortestValue(v);
    } else {
      return "must be in [" + FormatValue(lo) + ", " + FormatValue(hi) + "], got " + FormatValue(v);
    }
  };
}
inline auto OneOf(std::initializer_list<const char*> choices) {
  std::vector<std::string> allowed(choices.begin(), choices.end());
  return [allowed](const std::string& v) -> std::string {
    std::string list;
    for (const auto& a : allowed) {
      if (a == v) return {};
      list += (list.empty() ? "" : ", ") + a;
    }
    return "must be one of " + list + ", got '" + v + "'";
  };
}

// A subset of an enum's values (a field that takes only some of them).
template <ConfigEnum E>
struct EnumChoices {
  std::vector<E> allowed;
  std::string List() const {
    std::string list;
    for (E e : allowed) list += (list.empty() ? "" : ", ") + std::string(EnumName(e));
    return list;
  }
  std::string operator()(const E& v) const {
    for (E e : allowed) {
      if (e == v) return {};
    }
    return "must be one of " + List() + ", got '" + EnumName(v) + "'";
  }
};
template <ConfigEnum E>
EnumChoices<E> OneOfEnum(std::initializer_list<E> allowed) {
  return EnumChoices<E>{std::vector<E>(allowed)};
}

// Visitor that fills a struct from a ConfigNode map. Collects the first error.
class ConfigLoader {
 public:
  ConfigLoader(ConfigNode* node, std::string prefix) : node_(node), prefix_(std::move(prefix)) {}

  template <typename T, typename Check = NoCheck>
  void Field(const char* name, T& value, const char* /*doc*/, Check check = {}) {
    ConfigNode* child = Lookup(name);
    if (child == nullptr || !status_.ok()) return;
    T parsed = value;
    Status s = ParseValue(*child, parsed);
    std::string why = s.ok() ? check(parsed) : s.message();
    if constexpr (requires { check.List(); }) {  // a subset of an enum: name only it
      if (!s.ok()) why = "must be one of " + check.List() + ", got '" + child->scalar + "'";
    }
    if (!why.empty()) {
      status_ = InvalidArgument(child->where + ": " + prefix_ + name + ": " + why);
      return;
    }
    value = std::move(parsed);
  }

  template <typename S>
  void Section(const char* name, S& section, const char* /*doc*/) {
    ConfigNode* child = Lookup(name);
    if (child == nullptr || !status_.ok()) return;
    if (child->kind != ConfigNode::Kind::kMap) {
      status_ = InvalidArgument(child->where + ": " + prefix_ + name + ": expected a section");
      return;
    }
    ConfigLoader inner(child, prefix_ + name + ".");
    section.VisitFields(inner);
    status_ = inner.Finish();
  }

  // Call after VisitFields: reports the first error, or the first key no field claimed.
  Status Finish();

 private:
  ConfigNode* Lookup(const char* name);

  ConfigNode* node_;
  std::string prefix_;
  Status status_;
};

// Visitor that writes the effective config as YAML, each field preceded by its doc comment.
class ConfigDumper {
 public:
  explicit ConfigDumper(int indent = 0) : indent_(indent) {}

  template <typename T, typename Check = NoCheck>
  void Field(const char* name, T& value, const char* doc, Check = {}) {
    Comment(doc);
    out_ << Pad() << name << ": " << FormatValue(value) << "\n";
  }
  template <typename S>
  void Section(const char* name, S& section, const char* doc) {
    Comment(doc);
    out_ << Pad() << name << ":\n";
    ConfigDumper inner(indent_ + 2);
    section.VisitFields(inner);
    out_ << inner.str();
  }
  std::string str() const { return out_.str(); }

 private:
  void Comment(const char* doc);
  std::string Pad() const { return std::string(static_cast<size_t>(indent_), ' '); }

  int indent_;
  std::ostringstream out_;
};

// The shortest text that reads back as `v` (0.1, not 0.10000000000000001).
std::string ShortestValue(double v);

// What a field's value is, in words (the configuration reference).
template <typename T>
std::string TypeWords() {
  if constexpr (std::is_same_v<T, bool>) {
    return "bool";
  } else if constexpr (ConfigEnum<T>) {
    return "one of " + EnumNameList<T>();
  } else if constexpr (std::is_integral_v<T>) {
    return "integer";
  } else if constexpr (std::is_floating_point_v<T>) {
    return "number";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return "string";
  } else if constexpr (std::is_same_v<T, Bytes>) {
    return "bytes (e.g. 512MiB)";
  } else {
    return "list of " + TypeWords<typename T::value_type>();
  }
}

// Visitor that writes a Markdown table of a config's keys: key, type, default, description.
class ConfigReferenceWriter {
 public:
  explicit ConfigReferenceWriter(std::string prefix = "") : prefix_(std::move(prefix)) {}

  template <typename T, typename Check = NoCheck>
  void Field(const char* name, T& value, const char* doc, Check check = {}) {
    std::string type = TypeWords<T>();
    if constexpr (requires { check.List(); }) type = "one of " + check.List();
    if constexpr (std::is_floating_point_v<T>) {
      Row(prefix_ + name, type, ShortestValue(value), doc);
    } else {
      Row(prefix_ + name, type, FormatValue(value), doc);
    }
  }
  template <typename S>
  void Section(const char* name, S& section, const char* doc) {
    Row(prefix_ + name, "section", "", doc);
    ConfigReferenceWriter inner(prefix_ + name + ".");
    section.VisitFields(inner);
    out_ << inner.str();
  }
  std::string str() const { return out_.str(); }

 private:
  void Row(const std::string& key, const std::string& type, const std::string& value, const char* doc);

  std::string prefix_;
  std::ostringstream out_;
};

// The Markdown table of a config struct's keys, under a header row.
template <typename Config>
std::string ConfigReferenceTable(Config config) {
  ConfigReferenceWriter writer;
  config.VisitFields(writer);
  return "| key | type | default | what it does |\n|---|---|---|---|\n" + writer.str();
}

// Loads `config` from a YAML file (empty path: defaults only) plus "key=value" overrides.
template <typename Config>
Status LoadConfig(const std::string& path, const std::vector<std::string>& overrides,
                  Config& config) {
  ConfigNode root;
  root.kind = ConfigNode::Kind::kMap;
  if (!path.empty()) {
    SLUICE_ASSIGN_OR_RETURN(root, ParseConfigFile(path));
    if (root.kind == ConfigNode::Kind::kNull) root.kind = ConfigNode::Kind::kMap;
    if (root.kind != ConfigNode::Kind::kMap) {
      return InvalidArgument(path + ": the top level of a config must be a map of sections");
    }
  }
  for (const std::string& assignment : overrides) {
    SLUICE_RETURN_IF_ERROR(ApplyOverride(root, assignment));
  }
  ConfigLoader loader(&root, "");
  config.VisitFields(loader);
  return loader.Finish();
}

template <typename Config>
std::string DumpConfig(Config& config) {
  ConfigDumper dumper;
  config.VisitFields(dumper);
  return dumper.str();
}

}  // namespace sluice
