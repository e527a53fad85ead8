// The test data that lives in the repository, under tests/data/: files from
// other systems (e.g. PyTorch's schedule CSVs) that tests read as input.
#ifndef TANDEM_TESTS_TESTING_TEST_DATA_H_
#define TANDEM_TESTS_TESTING_TEST_DATA_H_

#include <string>

namespace tandem::test {

// The absolute path of tests/data/`relative`. It need not exist.
std::string TestDataPath(const std::string& relative);

// The bytes of tests/data/`relative`. A file that is missing or cannot be
// read fails the running test with a message naming it and returns "".
std::string ReadTestData(const std::string& relative);

}  // namespace tandem::test

#endif  // TANDEM_TESTS_TESTING_TEST_DATA_H_
