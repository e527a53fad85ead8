// Tracer name scopes: parameters declared inside scopes get dotted full
// names (and the seeds of those names); lookups, inputs and labels take
// names as given; scope mistakes are trace errors naming the call site.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/tracer.h"

namespace tandem {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Here(int line) { return absl::StrCat("ir/name_scope_test.cc:", line); }

std::vector<std::string> ParameterNames(const Tracer& t) {
  std::vector<std::string> names;
  for (const ir::StateSpec& spec : t.parameters()) names.push_back(spec.name);
  return names;
}

TEST(NameScope, NestedScopesJoinParameterNamesWithDots) {
  Tracer t;
  {
    auto block = t.Scope("h3");
    {
      auto attn = t.Scope("attn");
      t.Parameter("w", {2, 2}, init::Zeros());
      EXPECT_EQ(t.scope(), "h3.attn");
    }
    t.Parameter("b", {2}, init::Zeros());
    EXPECT_EQ(t.scope(), "h3");
  }
  t.Parameter("top", {2}, init::Zeros());
  EXPECT_EQ(t.scope(), "");
  EXPECT_TRUE(t.status().ok()) << t.status();
  EXPECT_THAT(ParameterNames(t), ElementsAre("h3.attn.w", "h3.b", "top"));
}

TEST(NameScope, DottedScopeNameOpensEveryLevelAndClosesThemTogether) {
  Tracer t;
  {
    auto scope = t.Scope("h0.attn");
    EXPECT_EQ(t.ScopedName("w"), "h0.attn.w");
  }
  EXPECT_EQ(t.ScopedName("w"), "w");
}

TEST(NameScope, ScopedParameterGetsTheSeedAndGraphNameOfItsFullName) {
  Tracer scoped(/*seed=*/42);
  {
    auto scope = scoped.Scope("h1");
    scoped.Parameter("w", {3}, init::Normal(0.02));
  }
  Tracer flat(/*seed=*/42);
  flat.Parameter("h1.w", {3}, init::Normal(0.02));
  ASSERT_EQ(scoped.parameters().size(), 1u);
  ASSERT_EQ(flat.parameters().size(), 1u);
  EXPECT_NE(scoped.parameters()[0].init.seed, 0u);
  EXPECT_EQ(scoped.parameters()[0].init.seed, flat.parameters()[0].init.seed);
  EXPECT_EQ(scoped.graph().node(0).attributes.GetString("name"), "h1.w");
}

TEST(NameScope, LookupInsideAScopeTakesTheFullName) {
  Tracer t;
  Tensor wte = t.Parameter("wte", {4, 2}, init::Normal(0.02));
  Tensor found;
  {
    auto head = t.Scope("head");
    found = t.Parameter("wte");
  }
  EXPECT_TRUE(t.status().ok()) << t.status();
  EXPECT_EQ(found.id(), wte.id());
}

TEST(NameScope, LookupByRelativeNameIsAnErrorThatSuggestsTheFullName) {
  Tracer t;
  auto scope = t.Scope("h0");
  t.Parameter("w", {2}, init::Zeros());
  const int line = __LINE__ + 1;
  Tensor found = t.Parameter("w");
  EXPECT_FALSE(found.valid());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr(Here(line)));
  EXPECT_THAT(t.status().message(), HasSubstr("parameter 'w' used but never declared"));
  EXPECT_THAT(t.status().message(), HasSubstr("did you mean 'h0.w'?"));
}

TEST(NameScope, SameNameInTheSameScopeTwiceIsDeclaredTwiceError) {
  Tracer t;
  int first = 0, second = 0;
  for (int i = 0; i < 2; ++i) {
    auto scope = t.Scope("h0");
    (i == 0 ? first : second) = __LINE__ + 1;
    t.Parameter("w", {2}, init::Zeros());
  }
  EXPECT_EQ(first, second);  // one line, reached twice
  EXPECT_THAT(t.status().message(), HasSubstr("parameter 'h0.w' declared twice (first at " + Here(first)));
}

TEST(NameScope, SameNameInDifferentScopesIsTwoParameters) {
  Tracer t;
  for (const char* block : {"h0", "h1"}) {
    auto scope = t.Scope(block);
    t.Parameter("w", {2}, init::Normal(1.0));
  }
  EXPECT_TRUE(t.status().ok()) << t.status();
  EXPECT_THAT(ParameterNames(t), ElementsAre("h0.w", "h1.w"));
  EXPECT_NE(t.parameters()[0].init.seed, t.parameters()[1].init.seed);
}

TEST(NameScope, InputsAndLabelsKeepTheirNamesInsideAScope) {
  Tracer t;
  auto scope = t.Scope("h0");
  Tensor x = t.Input("tokens", {ir::DType::kI32, {2}});
  Tensor y = t.Label("labels", {ir::DType::kI32, {2}});
  EXPECT_EQ(t.graph().node(x.id()).attributes.GetString("name"), "tokens");
  EXPECT_EQ(t.graph().node(y.id()).attributes.GetString("name"), "labels");
}

TEST(NameScope, EmptyScopeNameIsAnErrorNamingTheCallSite) {
  Tracer t;
  auto outer = t.Scope("h0");
  const int line = __LINE__ + 1;
  auto inner = t.Scope("");
  EXPECT_EQ(t.scope(), "h0");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr(Here(line)));
  EXPECT_THAT(t.status().message(), HasSubstr("empty name scope inside 'h0'"));
}

TEST(NameScope, TracerFailRecordsTheFirstErrorOnly) {
  Tracer t;
  const int line = __LINE__ + 1;
  t.Fail("first problem");
  t.Fail("second problem");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr(Here(line) + ": first problem"));
  EXPECT_THAT(t.status().message(), ::testing::Not(HasSubstr("second")));
}

}  // namespace
}  // namespace tandem
