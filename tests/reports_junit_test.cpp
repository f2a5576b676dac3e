// JUnit XML of a drift result (reports/junit.h), read back by a small XML parser written
// here: well-formed, counts consistent with the test cases, escaping round-trips.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "reports/drift.h"
#include "reports/junit.h"
#include "tests/report_fixture.h"

namespace ampcheck::reports {
namespace {

// Elements, attributes and text with the five predefined entities: all JUnit needs.
struct Element {
  std::string name;
  std::map<std::string, std::string> attributes;
  std::vector<std::unique_ptr<Element>> children;
  std::string text;
  std::vector<const Element*> all(std::string_view child) const {
    std::vector<const Element*> out;
    for (const auto& c : children)
      if (c->name == child) out.push_back(c.get());
    return out;
  }
};

class XmlParser {
 public:
  explicit XmlParser(std::string_view s) : s_(s) {}
  std::unique_ptr<Element> document() {
    if (s_.substr(0, 5) == "<?xml") pos_ = s_.find("?>") + 2;
    skip_space();
    auto root = element();
    skip_space();
    if (pos_ != s_.size()) fail("content after the root element");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(what + " at offset " + std::to_string(pos_));
  }
  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  void expect(char c) {
    if (pos_ >= s_.size() || s_[pos_] != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string name() {
    const std::size_t start = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '-' || s_[pos_] == '_'))
      ++pos_;
    if (pos_ == start) fail("expected a name");
    return std::string(s_.substr(start, pos_ - start));
  }
  std::string unescape(std::string_view raw) const {
    static const std::map<std::string, char> entities = {
        {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
    std::string out;
    for (std::size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '<') fail("raw '<' in text");
      if (raw[i] != '&') {
        out += raw[i];
        continue;
      }
      const std::size_t end = raw.find(';', i);
      if (end == std::string_view::npos) fail("unterminated entity");
      const auto e = entities.find(std::string(raw.substr(i + 1, end - i - 1)));
      if (e == entities.end()) fail("unknown entity");
      out += e->second;
      i = end;
    }
    return out;
  }
  std::unique_ptr<Element> element() {
    expect('<');
    auto e = std::make_unique<Element>();
    e->name = name();
    for (;;) {
      skip_space();
      if (s_.substr(pos_, 2) == "/>") {
        pos_ += 2;
        return e;
      }
      if (pos_ < s_.size() && s_[pos_] == '>') break;
      const std::string key = name();
      expect('=');
      expect('"');
      const std::size_t end = s_.find('"', pos_);
      if (end == std::string_view::npos) fail("unterminated attribute");
      if (!e->attributes.emplace(key, unescape(s_.substr(pos_, end - pos_))).second) fail("duplicate attribute " + key);
      pos_ = end + 1;
    }
    ++pos_;
    for (;;) {
      const std::size_t lt = s_.find('<', pos_);
      if (lt == std::string_view::npos) fail("unclosed <" + e->name + ">");
      e->text += unescape(s_.substr(pos_, lt - pos_));
      pos_ = lt;
      if (s_.substr(pos_, 2) == "</") {
        pos_ += 2;
        if (name() != e->name) fail("mismatched close of <" + e->name + ">");
        expect('>');
        return e;
      }
      e->children.push_back(element());
    }
  }
  std::string_view s_;
  std::size_t pos_ = 0;
};

std::unique_ptr<Element> parse(const std::string& xml) { return XmlParser(xml).document(); }

DriftResult drifted_result() {
  Report baseline = testing::sample_report(false, false);
  baseline.run.level = "O1";
  baseline.run.inspect = "stats";  // error_growth is not checked: a skipped case
  baseline.nonfinite = {};
  Report current = testing::sample_report(false, false);
  current.summary.final_loss = 0.9;
  return compare_reports(baseline, current, DriftRules{});
}

TEST(Junit, CountsMatchTheTestCases) {
  const DriftResult r = drifted_result();
  ASSERT_TRUE(r.drifted());
  const auto root = parse(drift_junit(r));
  ASSERT_EQ(root->name, "testsuites");
  const auto suites = root->all("testsuite");
  ASSERT_EQ(suites.size(), 1u);
  const Element& suite = *suites[0];
  EXPECT_EQ(suite.attributes.at("name"), "ampcheck diff");
  const auto cases = suite.all("testcase");
  std::size_t failures = 0, skipped = 0;
  for (const Element* c : cases) {
    EXPECT_EQ(c->attributes.at("classname"), "ampcheck.drift");
    failures += c->all("failure").size();
    skipped += c->all("skipped").size();
  }
  EXPECT_EQ(suite.attributes.at("tests"), std::to_string(cases.size()));
  EXPECT_EQ(suite.attributes.at("failures"), std::to_string(failures));
  EXPECT_EQ(suite.attributes.at("skipped"), std::to_string(skipped));
  EXPECT_EQ(root->attributes.at("tests"), std::to_string(cases.size()));
  EXPECT_EQ(root->attributes.at("failures"), std::to_string(failures));
  EXPECT_EQ(failures, r.failing());
  EXPECT_EQ(skipped, 1u);  // error_growth

  // one case per finding, plus one per checked rule that found nothing
  std::size_t quiet_rules = 0;
  for (const std::string& rule : r.checked) {
    const bool any = std::any_of(r.findings.begin(), r.findings.end(), [&](const Finding& f) { return f.rule == rule; });
    quiet_rules += any ? 0 : 1;
  }
  EXPECT_EQ(cases.size(), r.findings.size() + quiet_rules);

  bool level = false;
  for (const Element* c : cases) {
    if (c->attributes.at("name") != "settings_must_match: run.level") continue;
    level = true;
    const auto f = c->all("failure");
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0]->attributes.at("type"), "settings_must_match");
    EXPECT_NE(f[0]->attributes.at("message").find("baseline O1, current O2"), std::string::npos)
        << f[0]->attributes.at("message");
  }
  EXPECT_TRUE(level);
}

TEST(Junit, NoDriftHasNoFailureAndIsDeterministic) {
  const Report r = testing::sample_report(false, false);
  const DriftResult same = compare_reports(r, r, DriftRules{});
  const std::string xml = drift_junit(same);
  EXPECT_EQ(xml, drift_junit(compare_reports(r, r, DriftRules{})));
  const auto root = parse(xml);
  const Element& suite = *root->all("testsuite")[0];
  EXPECT_EQ(suite.attributes.at("failures"), "0");
  // every rule appears: three with their numbers, five that found nothing
  EXPECT_EQ(suite.attributes.at("tests"), std::to_string(rule_names().size()));
}

TEST(Junit, EscapesSubjectsAndDetails) {
  EXPECT_EQ(xml_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
  EXPECT_EQ(xml_escape("bell\a tab\t"), "bell\\x07 tab\t");
  Report baseline = testing::sample_report(false, false);
  Report current = baseline;
  current.run.model = "models/<odd & \"quoted\">.json";
  current.op_types.push_back({"a<b>", {1, 0, 0, 0, {}}});
  const DriftResult r = compare_reports(baseline, current, DriftRules{});
  const auto root = parse(drift_junit(r));  // throws on a raw '<' or '&'
  bool found = false;
  for (const Element* c : root->all("testsuite")[0]->all("testcase")) {
    if (c->attributes.at("name") != "dtype_change: a<b>") continue;
    found = true;
    EXPECT_EQ(c->all("failure").size(), 1u);
  }
  EXPECT_TRUE(found);
  const std::string xml = drift_junit(r);
  EXPECT_NE(xml.find("&lt;odd &amp; &quot;quoted&quot;&gt;"), std::string::npos) << xml;
}

}  // namespace
}  // namespace ampcheck::reports
