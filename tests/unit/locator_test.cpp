// What a --db locator names (store/locator.h): a path is SQLite, postgresql:// or postgres:// is
// PostgreSQL, any other scheme is refused with what is accepted; and a locator printed never holds
// its password, wherever the URI puts it.
#include <gtest/gtest.h>

#include <string>

#include "parent/store/locator.h"

namespace basal {
namespace {

TEST(LocatorTest, PathsAreSqliteAndPostgresUrisArePostgres) {
  for (const char* path : {"journal.db", "/var/lib/basal/journal.db", "./a://b", "dir/x:y.db", "1http://x"}) {
    auto l = ParseLocator(path);
    ASSERT_TRUE(l) << path << ": " << l.error().message;
    EXPECT_EQ(l->kind, StoreKind::kSqlite) << path;
    EXPECT_EQ(l->text, path);
  }
  for (const char* uri : {"postgresql://basal@db/basal", "postgres://basal@/basal?host=/run/postgresql",
                          "PostgreSQL://basal@db/basal"}) {
    auto l = ParseLocator(uri);
    ASSERT_TRUE(l) << uri << ": " << l.error().message;
    EXPECT_EQ(l->kind, StoreKind::kPostgres) << uri;
    EXPECT_EQ(l->text, uri) << "given to libpq as it is";
  }
}

TEST(LocatorTest, AnUnknownSchemeOrNothingIsRefusedWithoutThePassword) {
  auto mysql = ParseLocator("mysql://u:secret@h/db");
  ASSERT_FALSE(mysql);
  EXPECT_EQ(mysql.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(mysql.error().message,
            "store mysql://u:***@h/db: unknown scheme \"mysql://\"; give a file path (an SQLite journal) or a "
            "postgresql:// (or postgres://) locator");
  auto empty = ParseLocator("");
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, ErrorCode::kInvalidArgument);
}

TEST(LocatorTest, APasswordIsRedactedWhereverTheUriPutsIt) {
  EXPECT_EQ(RedactLocator("postgresql://basal:pw@db/basal"), "postgresql://basal:***@db/basal");
  EXPECT_EQ(RedactLocator("postgresql://basal:p@ss:w@db:5432/basal"), "postgresql://basal:***@db:5432/basal")
      << "the userinfo ends at the authority's last '@'";
  EXPECT_EQ(RedactLocator("postgresql://basal@db/basal?password=pw&sslmode=require"),
            "postgresql://basal@db/basal?password=***&sslmode=require");
  EXPECT_EQ(RedactLocator("postgresql://basal@db/basal?sslmode=require&sslpassword=k&password=pw"),
            "postgresql://basal@db/basal?sslmode=require&sslpassword=***&password=***");
  EXPECT_EQ(RedactLocator("postgresql://:pw@db?dbname=basal"), "postgresql://:***@db?dbname=basal");
  // Nothing to hide: as it is.
  EXPECT_EQ(RedactLocator("postgresql://basal@db/basal?sslmode=require"), "postgresql://basal@db/basal?sslmode=require");
  EXPECT_EQ(RedactLocator("/var/lib/basal/journal:pw@x.db"), "/var/lib/basal/journal:pw@x.db") << "a path is a path";
}

}  // namespace
}  // namespace basal
