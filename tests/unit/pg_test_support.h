// A PostgreSQL database of its own for one test, in the private cluster that
// tests/support/pg_cluster.py starts and names in BASAL_TEST_PG (a role with CREATEDB). Dropped
// when the test ends (WITH (FORCE): a connection a test left open does not keep it).
//
//   if (!PgTestDatabase::Available()) GTEST_SKIP() << PgTestDatabase::kWhySkipped;
//   PgTestDatabase db;
//   auto store = OpenStore({.locator = db.locator()});
#pragma once

#include <libpq-fe.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace basal::testing_support {

class PgTestDatabase {
 public:
  static constexpr const char* kWhySkipped =
      "BASAL_TEST_PG is not set: run this test through tests/support/pg_cluster.py, which starts a private "
      "PostgreSQL (ctest does: ctest -L postgres)";
  static bool Available() { return std::getenv("BASAL_TEST_PG") != nullptr; }
  // The cluster's locator with another database in place of its own.
  static std::string LocatorOf(const std::string& database) {
    const std::string base = std::getenv("BASAL_TEST_PG");
    const size_t path = base.find('/', base.find("://") + 3);
    const size_t query = base.find('?', path);
    return base.substr(0, path + 1) + database + (query == std::string::npos ? "" : base.substr(query));
  }

  PgTestDatabase() {
    static std::atomic<int> next{0};
    name_ = "basal_test_" + std::to_string(::getpid()) + "_" + std::to_string(next++);
    Admin("CREATE DATABASE " + name_);
  }
  ~PgTestDatabase() {
    try {
      Admin("DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)");
    } catch (const std::exception&) {
      // the cluster is gone already (its wrapper removes it): nothing to drop
    }
  }
  PgTestDatabase(const PgTestDatabase&) = delete;
  PgTestDatabase& operator=(const PgTestDatabase&) = delete;

  std::string locator() const { return LocatorOf(name_); }
  const std::string& name() const { return name_; }

  // Runs `sql` on the cluster's own database (not this one): what the test role may do there.
  static void Admin(const std::string& sql) { Exec(std::getenv("BASAL_TEST_PG"), sql); }
  // Runs `sql` in this database, outside basal (a hand-made change, a check).
  std::string Query(const std::string& sql) const { return Exec(locator(), sql); }

 private:
  static std::string Exec(const std::string& locator, const std::string& sql) {
    PGconn* c = PQconnectdb(locator.c_str());
    if (PQstatus(c) != CONNECTION_OK) {
      const std::string why = PQerrorMessage(c);
      PQfinish(c);
      throw std::runtime_error("cannot connect to the test cluster: " + why);
    }
    PGresult* r = PQexec(c, sql.c_str());
    const ExecStatusType st = PQresultStatus(r);
    std::string out;
    if (st == PGRES_TUPLES_OK && PQntuples(r) > 0) out = PQgetvalue(r, 0, 0);
    const std::string why = PQresultErrorMessage(r);
    PQclear(r);
    PQfinish(c);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) throw std::runtime_error(sql + ": " + why);
    return out;
  }

  std::string name_;
};

}  // namespace basal::testing_support
