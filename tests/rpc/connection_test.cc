// What the control plane's connections stand on (rpc/connection.h,
// rpc/control_plane_kind.h): host:port addresses parsed or refused with the
// reason, the control plane's kinds by name, and the private run directory
// the Unix socket lives in.
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kj/async-io.h"
#include "rpc/connection.h"
#include "rpc/control_plane_kind.h"

namespace tandem::rpc {
namespace {

using ::testing::HasSubstr;

TEST(ControlAddresses, HostPortParsesOrSaysWhatIsWrong) {
  struct Case {
    std::string address;
    std::string host;  // empty: an error mentioning `why`
    int port = 0;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"127.0.0.1:5000", "127.0.0.1", 5000, ""},
      {"node-7.cluster:65535", "node-7.cluster", 65535, ""},
      {"[::1]:1", "::1", 1, ""},
      {"", "", 0, "it is empty"},
      {"127.0.0.1", "", 0, "no ':port'"},
      {":80", "", 0, "the host is empty"},
      {"host:", "", 0, "the port '' is not a number in [1, 65535]"},
      {"host:0", "", 0, "the port '0'"},
      {"host:65536", "", 0, "the port '65536'"},
      {"host:12ab", "", 0, "the port '12ab'"},
      {"host:-1", "", 0, "the port '-1'"},
      {"host:99999999999999999999", "", 0, "is not a number"},
      {"::1:80", "", 0, "in brackets"},
      {"[::1:80", "", 0, "no closing ']'"},
      {"[::1]80", "", 0, "no ':port' after the host"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<HostPort> parsed = ParseHostPort(c.address);
    if (c.host.empty()) {
      EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << c.address;
      EXPECT_THAT(parsed.status().message(), HasSubstr(c.why)) << c.address;
    } else {
      ASSERT_TRUE(parsed.ok()) << c.address << ": " << parsed.status();
      EXPECT_EQ(parsed->host, c.host);
      EXPECT_EQ(parsed->port, c.port);
      EXPECT_EQ(FormatHostPort(parsed->host, parsed->port), c.address);
    }
  }
  EXPECT_TRUE(ParseHostPort("127.0.0.1:0", /*allow_port_zero=*/true).ok());
  EXPECT_EQ(ParseControlPlaneKind("tcp").value(), ControlPlaneKind::kTcp);
  EXPECT_THAT(ParseControlPlaneKind("udp").status().message(), HasSubstr("expected unix or tcp"));
}

TEST(PrivateRunDirectory, IsMode0700AndOthersAreRejected) {
  absl::StatusOr<std::string> directory = MakePrivateRunDirectory();
  ASSERT_TRUE(directory.ok()) << directory.status();
  struct stat info;
  ASSERT_EQ(stat(directory->c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0700u);
  EXPECT_TRUE(CheckPrivateDirectory(*directory).ok());
  chmod(directory->c_str(), 0755);
  EXPECT_EQ(CheckPrivateDirectory(*directory).code(), absl::StatusCode::kFailedPrecondition);
  kj::AsyncIoContext io = kj::setupAsyncIo();
  EXPECT_EQ(UnixListener::Listen(io, *directory + "/control.sock").status().code(),
            absl::StatusCode::kInvalidArgument);
  rmdir(directory->c_str());
}

}  // namespace
}  // namespace tandem::rpc
