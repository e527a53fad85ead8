// A fresh directory under the system's temporary directory, removed with
// everything in it when the object goes: a test's own scratch space.
#ifndef TANDEM_TESTS_TESTING_TEMPORARY_DIRECTORY_H_
#define TANDEM_TESTS_TESTING_TEMPORARY_DIRECTORY_H_

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "gtest/gtest.h"

namespace tandem::test {

class TemporaryDirectory {
 public:
  explicit TemporaryDirectory(const std::string& prefix = "tandem-test") {
    std::string name = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (mkdtemp(name.data()) == nullptr) ADD_FAILURE() << "cannot create a directory like " << name;
    path_ = name;
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;

  const std::string& path() const { return path_; }
  // `name` inside it.
  std::string Path(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace tandem::test

#endif  // TANDEM_TESTS_TESTING_TEMPORARY_DIRECTORY_H_
