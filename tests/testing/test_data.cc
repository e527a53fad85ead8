#include "tests/testing/test_data.h"

#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace tandem::test {

std::string TestDataPath(const std::string& relative) { return std::string(TANDEM_TEST_DATA_DIR) + "/" + relative; }

std::string ReadTestData(const std::string& relative) {
  const std::string path = TestDataPath(relative);
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    ADD_FAILURE() << "missing test data file " << path;
    return "";
  }
  std::ostringstream bytes;
  bytes << file.rdbuf();
  if (file.bad()) ADD_FAILURE() << "cannot read test data file " << path;
  return bytes.str();
}

}  // namespace tandem::test
