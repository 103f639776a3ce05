// What the cron and schedule unit tests share: a zone or a schedule from its text, failing the
// test (and going on with UTC or "* * * * *") when it does not load or parse.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "serve/cron.h"

namespace basal::serve::test_support {

inline TimeZone Zone(const std::string& name) {
  auto z = LoadTimeZone(name);
  if (!z) {
    ADD_FAILURE() << name << ": " << z.error().message;
    return *LoadTimeZone("UTC");
  }
  return *z;
}

inline CronSchedule Cron(const std::string& text) {
  auto s = ParseCron(text);
  if (!s) {
    ADD_FAILURE() << text << ": " << s.error().message;
    return *ParseCron("* * * * *");
  }
  return *s;
}

}  // namespace basal::serve::test_support
