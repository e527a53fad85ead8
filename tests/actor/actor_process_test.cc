// tandem-actor as a process, against a controller played by this test (a
// ControlServer on a Unix socket in a private directory): it registers with
// the job's token, is refused with a wrong one, and exits by itself soon
// after the controller's connection drops. Every wait is bounded; the
// ProcessGroup reaps every child on every path.
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "actor/actor_process.h"
#include "controller/process_group.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kj/async-io.h"
#include "rpc/connection.h"
#include "rpc/controller_service.h"

namespace tandem::actor {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";

class ActorProcessTest : public ::testing::Test {
 protected:
  ~ActorProcessTest() noexcept override {
    server_.reset();
    if (!directory_.empty()) {
      unlink(socket_.c_str());
      rmdir(directory_.c_str());
    }
  }

  // Listens as the controller of a one-actor job.
  void Listen() {
    absl::StatusOr<std::string> directory = rpc::MakePrivateRunDirectory();
    ASSERT_TRUE(directory.ok()) << directory.status();
    directory_ = *directory;
    socket_ = absl::StrCat(directory_, "/controller.sock");
    absl::StatusOr<std::unique_ptr<rpc::UnixListener>> listener = rpc::UnixListener::Listen(io_, socket_);
    ASSERT_TRUE(listener.ok()) << listener.status();
    auto on_register = [this](int32_t, rpc::wire::Actor::Client) {
      ++registered_;
      return absl::OkStatus();
    };
    auto log = [this](absl::string_view line) { log_.emplace_back(line); };
    server_ = std::make_unique<rpc::ControlServer>(
        *std::move(listener), kj::heap<rpc::ControllerService>(kToken, 1, on_register, log), rpc::ConnectionLimits{},
        log);
    serving_ = server_->Run().eagerlyEvaluate(nullptr);
  }

  // Starts tandem-actor as actor 0 of 1 with `token`.
  void StartActor(const std::string& token) {
    controller::ProcessSpec spec{.program = TANDEM_ACTOR_BINARY,
                                 .args = {"--controller", socket_, "--actor", "0", "--actors", "1"},
                                 .environment = {{"TANDEM_JOB_TOKEN", token}}};
    controller::ProcessGroupOptions options;
    options.sink = [this](absl::string_view line) {
      absl::MutexLock lock(&output_mu_);
      output_.emplace_back(line);
    };
    absl::StatusOr<std::unique_ptr<controller::ProcessGroup>> group =
        controller::ProcessGroup::Start({spec}, std::move(options));
    ASSERT_TRUE(group.ok()) << group.status();
    group_ = *std::move(group);
  }

  // Runs the event loop until `done()` or `timeout`.
  template <typename Done>
  bool RunUntil(Done done, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!done()) {
      if (absl::Now() > deadline) return false;
      io_.provider->getTimer().afterDelay(10 * kj::MILLISECONDS).wait(io_.waitScope);
    }
    return true;
  }

  std::string Output() {
    absl::MutexLock lock(&output_mu_);
    std::string all;
    for (const std::string& line : output_) absl::StrAppend(&all, line, "\n");
    return all;
  }

  kj::AsyncIoContext io_ = kj::setupAsyncIo();
  std::string directory_;
  std::string socket_;
  std::unique_ptr<rpc::ControlServer> server_;
  kj::Promise<void> serving_ = nullptr;
  int registered_ = 0;
  std::vector<std::string> log_;
  std::unique_ptr<controller::ProcessGroup> group_;
  absl::Mutex output_mu_;
  std::vector<std::string> output_ ABSL_GUARDED_BY(output_mu_);
};

TEST_F(ActorProcessTest, ExitsByItselfWhenTheControllerConnectionDrops) {
  ASSERT_NO_FATAL_FAILURE(Listen());
  ASSERT_NO_FATAL_FAILURE(StartActor(kToken));
  ASSERT_TRUE(RunUntil([&] { return registered_ == 1; }, absl::Seconds(10))) << Output();
  // The registration's reply leaves on a later turn of the loop: let it go,
  // so that the actor sees a registered session drop, not a refused register.
  io_.provider->getTimer().afterDelay(200 * kj::MILLISECONDS).wait(io_.waitScope);
  // The controller goes away: its server, and with it the connection.
  serving_ = nullptr;
  server_.reset();
  const absl::Time dropped_at = absl::Now();
  absl::StatusOr<controller::ExitInfo> exit = group_->WaitAny(absl::Seconds(5));
  ASSERT_TRUE(exit.ok()) << "the actor outlived its controller's connection by 5 s: " << exit.status();
  EXPECT_LT(absl::Now() - dropped_at, absl::Seconds(5));
  EXPECT_EQ(exit->signal, 0);
  EXPECT_EQ(exit->exit_code, kActorExitControllerLost);
  EXPECT_THAT(Output(), HasSubstr("the controller's connection dropped; exiting"));
}

TEST_F(ActorProcessTest, WrongTokenIsRefusedAndTheActorExitsWithCode2) {
  ASSERT_NO_FATAL_FAILURE(Listen());
  ASSERT_NO_FATAL_FAILURE(StartActor("not-the-token"));
  absl::StatusOr<controller::ExitInfo> exit;
  ASSERT_TRUE(RunUntil(
      [&] {
        std::optional<controller::ExitInfo> ended = group_->Poll();
        if (ended.has_value()) exit = *ended;
        return ended.has_value();
      },
      absl::Seconds(10)))
      << Output();
  EXPECT_EQ(exit->exit_code, kActorExitRefused);
  EXPECT_EQ(registered_, 0);
  EXPECT_THAT(Output(), HasSubstr("PERMISSION_DENIED"));
  ASSERT_FALSE(log_.empty());
  EXPECT_THAT(log_[0], HasSubstr("wrong job token"));
}

TEST_F(ActorProcessTest, NoControllerIsASetupFailure) {
  absl::StatusOr<std::string> directory = rpc::MakePrivateRunDirectory();
  ASSERT_TRUE(directory.ok());
  directory_ = *directory;
  socket_ = absl::StrCat(directory_, "/nobody.sock");
  ASSERT_NO_FATAL_FAILURE(StartActor(kToken));
  absl::StatusOr<controller::ExitInfo> exit = group_->WaitAny(absl::Seconds(10));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->exit_code, kActorExitSetupFailed);
  EXPECT_THAT(Output(), HasSubstr("cannot reach the controller"));
}

}  // namespace
}  // namespace tandem::actor
