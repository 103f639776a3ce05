// The http.fetch figure (issue 13): a fetch round trip through the parent (host call, grant check,
// journal, libcurl on the loop, SSRF guard, answer) beside a direct libcurl request to the same
// loopback server in the same run. Both are measured the same way: the time between two requests'
// arrivals at the server, so each sample is one whole round trip including a new connection (basal
// never reuses a connection across requests; the direct reference does not either).
#include <curl/curl.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "basal/module.h"
#include "bench.h"
#include "support/http_test_server.h"

namespace basal::bench {
namespace {

[[noreturn]] void FetchBenchFatal(const std::string& what) {
  std::fprintf(stderr, "basal-bench: %s\n", what.c_str());
  std::exit(1);
}

size_t Discard(char*, size_t size, size_t count, void*) { return size * count; }

struct Arrivals {
  std::mutex mu;
  std::vector<Clock::time_point> at;
  void Add() {
    std::lock_guard<std::mutex> lock(mu);
    at.push_back(Clock::now());
  }
  void Into(Samples& s, size_t skip) {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t k = skip + 1; k < at.size(); ++k)
      s.Add(std::chrono::duration<double, std::micro>(at[k] - at[k - 1]).count());
    at.clear();
  }
};

}  // namespace

FetchSamples FetchRoundTrip(const Options& o) {
  testing::HttpTestServer server;
  server.RecordRequests(false);  // thousands of round trips: keep no record of them
  if (!server.Start(/*ipv6=*/false)) FetchBenchFatal("the loopback test server did not start");
  Arrivals arrivals;
  server.Handle("/item", [&arrivals](const testing::TestRequest&) {
    arrivals.Add();
    testing::TestResponse r;
    r.status = 200;
    r.headers = {{"Content-Type", "application/json"}};
    r.body = R"({"id": 1, "name": "item"})";
    return r;
  });
  const std::string url = server.url("/item");
  const int calls = 100, runs = o.quick ? 3 : 20;
  FetchSamples out;

  // The reference: libcurl's easy interface, a new connection per request, as basal makes them.
  curl_global_init(CURL_GLOBAL_DEFAULT);
  for (int run = 0; run < runs; ++run) {
    for (int i = 0; i < calls; ++i) {
      CURL* e = curl_easy_init();
      curl_easy_setopt(e, CURLOPT_URL, url.c_str());
      curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Discard);
      curl_easy_setopt(e, CURLOPT_PROXY, "");
      if (curl_easy_perform(e) != CURLE_OK) FetchBenchFatal("the direct libcurl request failed");
      curl_easy_cleanup(e);
    }
    arrivals.Into(out.direct, 1);
  }

  ModuleOptions mo;
  mo.journal_path = FigureStore(o, o.work_dir + "/fetch.db");
  mo.worker_path = o.worker_path;
  if (o.busy_poll) mo.busy_poll = *o.busy_poll;  // --busy-poll, as the other figures' modules take it
  if (o.busy_poll_max) mo.busy_poll_max = *o.busy_poll_max;
  auto m = Module::Open(std::move(mo));
  if (!m) FetchBenchFatal(m.error().message);
  const std::string manifest = R"({"grants": {"http.fetch": {"rules": [{"url": "http://127.0.0.1:)" +
                               std::to_string(server.port()) + R"(/", "allow_networks": ["127.0.0.1/32"]}],
                               "limits": {"max_requests": 100000}}}})";
  // The host call as the web global's fetch() makes it, or fetch() itself (--web-fetch).
  const std::string request = o.web_fetch ? "await fetch(input.url)"
                                          : "await host.call('http.fetch', {url: input.url, method: 'GET', "
                                            "headers: [], body: null, redirect: 'follow'})";
  auto f = (*m)->AddFlow("fetch.js",
                         "export default async function (input, host) {"
                         "  for (let i = 0; i < input.n; i++) {"
                         "    const r = " + request + ";"
                         "    if (r.status !== 200) throw new Error('status ' + r.status);"
                         "  }"
                         "  return input.n;"
                         "}",
                         manifest);
  if (!f) FetchBenchFatal(f.error().message);
  for (int run = 0; run < runs + 1; ++run) {
    ActivationResult r = (*m)->Run(*f, nlohmann::json{{"n", calls}, {"url", url}});
    if (!r.ok()) FetchBenchFatal("the fetch flow failed: " + r.message);
    Samples discard;
    arrivals.Into(run == 0 ? discard : out.fetch, 1);  // the first run warms the worker
  }
  return out;
}

}  // namespace basal::bench
