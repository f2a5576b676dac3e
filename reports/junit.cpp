#include "reports/junit.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace ampcheck::reports {
namespace {

struct Case {
  std::string name;
  const Finding* finding = nullptr;  // none: a checked rule with nothing to say
};

std::string attribute(std::string_view name, std::string_view value) {
  return fmt::format(" {}=\"{}\"", name, xml_escape(value));
}

std::string message(const Finding& f) {
  return fmt::format("{}: {} (baseline {}, current {})", f.subject, f.detail, f.baseline, f.current);
}

}  // namespace

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: {
        const auto u = static_cast<unsigned char>(ch);
        if (u < 0x20 && ch != '\t' && ch != '\n' && ch != '\r')
          out += fmt::format("\\x{:02x}", u);
        else
          out += ch;
      }
    }
  }
  return out;
}

std::string drift_junit(const DriftResult& result) {
  std::vector<Case> cases;
  std::size_t failures = 0, skipped = 0;
  for (const std::string_view rule : rule_names()) {
    const bool checked = std::find(result.checked.begin(), result.checked.end(), rule) != result.checked.end();
    bool any = false;
    for (const Finding& f : result.findings) {
      if (f.rule != rule) continue;
      any = true;
      cases.push_back({fmt::format("{}: {}", f.rule, f.subject), &f});
      failures += f.failing ? 1 : 0;
      skipped += checked ? 0 : 1;
    }
    if (checked && !any) cases.push_back({std::string(rule), nullptr});
  }

  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format("<testsuites{}{}{}{}>\n", attribute("name", "ampcheck"), attribute("tests", std::to_string(cases.size())),
                     attribute("failures", std::to_string(failures)), attribute("errors", "0"));
  out += fmt::format("  <testsuite{}{}{}{}{}>\n", attribute("name", "ampcheck diff"),
                     attribute("tests", std::to_string(cases.size())), attribute("failures", std::to_string(failures)),
                     attribute("errors", "0"), attribute("skipped", std::to_string(skipped)));
  for (const Case& c : cases) {
    out += fmt::format("    <testcase{}{}", attribute("classname", "ampcheck.drift"), attribute("name", c.name));
    const bool checked = !c.finding || std::find(result.checked.begin(), result.checked.end(), c.finding->rule) !=
                                           result.checked.end();
    if (!c.finding) {
      out += "/>\n";
    } else if (!checked) {
      out += fmt::format(">\n      <skipped{}/>\n    </testcase>\n", attribute("message", c.finding->detail));
    } else if (c.finding->failing) {
      out += fmt::format(">\n      <failure{}{}>{}</failure>\n    </testcase>\n",
                         attribute("message", message(*c.finding)), attribute("type", c.finding->rule),
                         xml_escape(message(*c.finding)));
    } else {
      out += fmt::format(">\n      <system-out>{}</system-out>\n    </testcase>\n", xml_escape(message(*c.finding)));
    }
  }
  out += "  </testsuite>\n</testsuites>\n";
  return out;
}

}  // namespace ampcheck::reports
