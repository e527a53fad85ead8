#include "schedules/json_text.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::schedules {
namespace {

using Json = nlohmann::ordered_json;

std::string NumberText(double value) { return JsonText(JsonNumber(value)); }

TEST(JsonNumber, IntegralValuesPrintWithoutAFraction) {
  EXPECT_EQ(NumberText(9.0), "9");
  EXPECT_EQ(NumberText(-3.0), "-3");
  EXPECT_EQ(NumberText(1e15), "1000000000000000");
  EXPECT_EQ(NumberText(-0.0), "0");
}

TEST(JsonNumber, FractionsPrintInTheShortestFormThatReadsBack) {
  EXPECT_EQ(NumberText(2.5), "2.5");
  EXPECT_EQ(NumberText(0.1), "0.1");
  EXPECT_EQ(NumberText(1.0 / 3.0), "0.3333333333333333");
  EXPECT_EQ(Json::parse(NumberText(1.0 / 3.0)).get<double>(), 1.0 / 3.0);
}

TEST(JsonNumber, NanAndInfinitiesAreNull) {
  EXPECT_EQ(NumberText(std::numeric_limits<double>::quiet_NaN()), "null");
  EXPECT_EQ(NumberText(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(NumberText(-std::numeric_limits<double>::infinity()), "null");
}

// What `tandem train --losses` relies on: an f32 written as its double reads
// back to the same f32 bits, through a double and no other rounding.
TEST(JsonText, FloatsWidenedToDoubleReadBackToTheSameBits) {
  std::vector<float> values = {0.1f,
                               1.0f / 3.0f,
                               2.3025851f,
                               std::numeric_limits<float>::min(),
                               std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::lowest(),
                               std::numeric_limits<float>::epsilon()};
  // A spread of bit patterns over every exponent, both signs.
  for (uint64_t bits = 1; bits < 0xff800000u; bits += 0x000f4243u) {
    const float value = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (std::isfinite(value)) values.push_back(value);
  }
  for (float value : values) {
    const std::string text = JsonText(Json(static_cast<double>(value)));
    const float back = static_cast<float>(Json::parse(text).get<double>());
    EXPECT_EQ(std::bit_cast<uint32_t>(back), std::bit_cast<uint32_t>(value)) << text;
  }
}

TEST(JsonText, IsCompactAndKeepsInsertionOrder) {
  Json json;
  json["zeta"] = 1;
  json["alpha"] = Json::array({JsonNumber(1.5), "x"});
  json["mid"]["inner"] = true;
  EXPECT_EQ(JsonText(json), R"({"zeta":1,"alpha":[1.5,"x"],"mid":{"inner":true}})");
}

TEST(JsonText, EscapesControlCharactersAndQuotes) {
  EXPECT_EQ(JsonText(Json("a\"b\\c\nd\x01")), R"("a\"b\\c\nd\u0001")");
}

TEST(JsonText, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  const std::string text = JsonText(Json(std::string("ok \xff\xfe end")));
  EXPECT_EQ(text, "\"ok \xEF\xBF\xBD\xEF\xBF\xBD end\"");
  EXPECT_TRUE(Json::accept(text));
}

}  // namespace
}  // namespace tandem::schedules
