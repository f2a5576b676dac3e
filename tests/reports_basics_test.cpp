#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "reports/atomic_file.h"
#include "reports/text_table.h"

namespace ampcheck::reports {
namespace {

namespace fs = std::filesystem;

TEST(TextTable, AlignsColumnsAndSeparatesGroups) {
  TextTable t({"name", "n"});
  t.align(0, TextTable::Align::left);
  t.add_row({"a", "1"}).add_separator().add_row({"longer", "100"});
  EXPECT_EQ(t.render(), "name      n\na         1\n\nlonger  100\n");
  EXPECT_THROW(t.add_row({"only one"}), std::invalid_argument);
}

class AtomicFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ampcheck_atomic_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static std::string read(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  fs::path dir_;
};

TEST_F(AtomicFile, WritesAndReplacesLeavingNoTemporary) {
  const fs::path target = dir_ / "report.json";
  write_file_atomically(target, "first");
  write_file_atomically(target, "second");
  EXPECT_EQ(read(target), "second");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}), 1);
}

TEST_F(AtomicFile, MissingDirectoryIsNamedAndNothingIsWritten) {
  const fs::path target = dir_ / "nope" / "report.json";
  try {
    write_file_atomically(target, "x");
    FAIL() << "expected WriteError";
  } catch (const WriteError& e) {
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(target));
}

TEST_F(AtomicFile, FailedRenameKeepsTheOldFileAndRemovesTheTemporary) {
  const fs::path target = dir_ / "is_a_dir";
  fs::create_directories(target / "child");  // rename over a non-empty directory fails
  EXPECT_THROW(write_file_atomically(target, "x"), WriteError);
  EXPECT_TRUE(fs::is_directory(target / "child"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}), 1);
}

}  // namespace
}  // namespace ampcheck::reports
