// JUnit XML of a drift comparison, for CI systems that show test reports (GitLab,
// Jenkins, GitHub test reporters): one test suite "ampcheck diff", one test case per
// finding (named "rule: subject") and one per checked rule that found nothing; failing
// findings carry a <failure>, rules that could not be checked a <skipped>. No times or
// host names: the same result gives the same bytes.
#pragma once

#include <string>
#include <string_view>

#include "reports/drift.h"

namespace ampcheck::reports {

// Escapes &, <, >, " and ' for text and attribute values; control characters XML 1.0
// cannot carry (below 0x20 but tab, newline, carriage return) become "\xNN".
std::string xml_escape(std::string_view text);

std::string drift_junit(const DriftResult& result);

}  // namespace ampcheck::reports
