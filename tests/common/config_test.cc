#include "common/config.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

namespace sluice {
namespace {

struct Inner {
  int depth = 32;
  Bytes size{4096};
  std::vector<int> fanouts{15, 10, 5};
  template <class V>
  void VisitFields(V& v) {
    v.Field("depth", depth, "queue depth", InRange(1, 4096));
    v.Field("size", size, "a byte size");
    v.Field("fanouts", fanouts, "per-hop fanouts");
  }
};

struct Outer {
  std::string name = "run";
  double lr = 0.1;
  bool verbose = false;
  std::string mode = "oracle";
  Inner inner;
  template <class V>
  void VisitFields(V& v) {
    v.Field("name", name, "run name");
    v.Field("lr", lr, "learning rate", InRange(0.0, 10.0));
    v.Field("verbose", verbose, "talk more");
    v.Field("mode", mode, "planner", OneOf({"oracle", "lru"}));
    v.Section("inner", inner, "an inner section");
  }
};

std::string WriteTemp(const std::string& text) {
  char path[] = "/tmp/sluice-config-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << text;
  return path;
}

TEST(ConfigTest, LoadsNestedSectionsAndKeepsDefaults) {
  std::string path = WriteTemp("name: x\ninner:\n  depth: 64\n  size: 2MiB\n  fanouts: [5, 5]\n");
  Outer config;
  ASSERT_TRUE(LoadConfig(path, {}, config).ok());
  EXPECT_EQ(config.name, "x");
  EXPECT_EQ(config.inner.depth, 64);
  EXPECT_EQ(config.inner.size.value, 2u << 20);
  EXPECT_EQ(config.inner.fanouts, (std::vector<int>{5, 5}));
  EXPECT_DOUBLE_EQ(config.lr, 0.1);
  std::remove(path.c_str());
}

TEST(ConfigTest, TextThatIsNotUtf8IsRefusedNamingTheByteAndLine) {
  EXPECT_TRUE(ParseConfigText("a: \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82\"\n", "c.yaml").ok());
  for (const char* bad : {"a: 1\nb: caf\xe9\n", "a: 1\nb: \xc3\n", "a: 1\nb: \xed\xa0\x80\n", "a: 1\nb: \xc0\xaf\n"}) {
    auto r = ParseConfigText(bad, "c.yaml");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("c.yaml: not UTF-8 text (byte 0x"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("at line 2)"), std::string::npos) << r.status().message();
  }
}

TEST(ConfigTest, UnknownKeyNamesKeyFileAndLine) {
  std::string path = WriteTemp("name: x\ninner:\n  depth: 64\n  dpeth: 3\n");
  Outer config;
  Status s = LoadConfig(path, {}, config);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), path + ":4: unknown key 'inner.dpeth'");
  std::remove(path.c_str());
}

TEST(ConfigTest, InvalidValuesNameKeyFileAndLine) {
  std::string path = WriteTemp("lr: 20\n");
  Outer config;
  Status s = LoadConfig(path, {}, config);
  EXPECT_EQ(s.message(), path + ":1: lr: must be in [0, 10], got 20");
  std::ofstream(path) << "mode: fifo\n";
  s = LoadConfig(path, {}, config);
  EXPECT_EQ(s.message(), path + ":1: mode: must be one of oracle, lru, got 'fifo'");
  std::ofstream(path) << "\n\ninner:\n  depth: many\n";
  s = LoadConfig(path, {}, config);
  EXPECT_EQ(s.message(), path + ":4: inner.depth: expected an integer, got 'many'");
  std::ofstream(path) << "inner: 3\n";
  s = LoadConfig(path, {}, config);
  EXPECT_EQ(s.message(), path + ":1: inner: expected a section");
  std::remove(path.c_str());
}

TEST(ConfigTest, MalformedYamlAndDuplicateKeysAreErrors) {
  std::string path = WriteTemp("name: [unclosed\n");
  Outer config;
  Status s = LoadConfig(path, {}, config);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("malformed YAML"), std::string::npos);
  std::ofstream(path) << "name: a\nname: b\n";
  s = LoadConfig(path, {}, config);
  EXPECT_EQ(s.message(), path + ":2: duplicate key 'name'");
  EXPECT_EQ(LoadConfig("/nonexistent/x.yaml", {}, config).code(), StatusCode::kNotFound);
  std::remove(path.c_str());
}

TEST(ConfigTest, OverridesApplyAfterTheFileAndAreChecked) {
  Outer config;
  ASSERT_TRUE(LoadConfig("", {"inner.depth=7", "inner.fanouts=[1,2,3]", "verbose=true"}, config)
                  .ok());
  EXPECT_EQ(config.inner.depth, 7);
  EXPECT_EQ(config.inner.fanouts, (std::vector<int>{1, 2, 3}));
  EXPECT_TRUE(config.verbose);
  EXPECT_EQ(LoadConfig("", {"inner.nope=1"}, config).message(),
            "--set inner.nope=1: unknown key 'inner.nope'");
  EXPECT_EQ(LoadConfig("", {"inner.depth=0"}, config).message(),
            "--set inner.depth=0: inner.depth: must be in [1, 4096], got 0");
  EXPECT_FALSE(LoadConfig("", {"novalue"}, config).ok());
  EXPECT_FALSE(LoadConfig("", {"name.sub=1"}, config).ok());
}

TEST(ConfigTest, DumpRoundTripsThroughTheLoader) {
  Outer config;
  config.name = "quoted \"name\"";
  config.lr = 0.3;
  config.inner.size.value = 3 << 20;
  config.inner.fanouts = {4, -1};
  std::string dumped = DumpConfig(config);
  EXPECT_NE(dumped.find("# learning rate"), std::string::npos);
  std::string path = WriteTemp(dumped);
  Outer loaded;
  ASSERT_TRUE(LoadConfig(path, {}, loaded).ok()) << dumped;
  EXPECT_EQ(loaded.name, config.name);
  EXPECT_DOUBLE_EQ(loaded.lr, 0.3);
  EXPECT_EQ(loaded.inner.size, config.inner.size);
  EXPECT_EQ(loaded.inner.fanouts, config.inner.fanouts);
  EXPECT_EQ(DumpConfig(loaded), dumped);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace sluice
