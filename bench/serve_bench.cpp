// The basal serve figures (issue 14): a run of a trivial flow with ?wait through a real `basal serve`
// over its Unix socket, beside the same server's /healthz in the same run; and runs per second with
// 16 concurrent clients. The client is libcurl, one connection per client, kept alive.
#include <curl/curl.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench.h"

namespace basal::bench {
namespace {

[[noreturn]] void Fatal(const std::string& what) {
  std::fprintf(stderr, "basal-bench: serve: %s\n", what.c_str());
  std::exit(1);
}

size_t Keep(char* data, size_t size, size_t count, void* user) {
  static_cast<std::string*>(user)->append(data, size * count);
  return size * count;
}

struct Client {
  CURL* curl = nullptr;
  std::string body;
  curl_slist* headers = nullptr;
  Client(const std::string& socket, const std::string& url, bool post) {
    curl = curl_easy_init();
    curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, socket.c_str());
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &Keep);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    if (post) {
      headers = curl_slist_append(headers, "Content-Type: application/json");
      curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, "{\"input\": 1}");
    }
  }
  ~Client() {
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
  }
  long Once() {
    body.clear();
    if (curl_easy_perform(curl) != CURLE_OK) return 0;
    long code = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    return code;
  }
};

}  // namespace

int RunQuietly(const std::vector<std::string>& args) {
  pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

ServeSamples ServeRoundTrip(const Options& o, const std::string& basal_path) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const std::string dir = o.work_dir + "/serve";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string db = FigureStore(o, dir + "/journal.db"), socket = dir + "/basal.sock";
  {
    std::ofstream(dir + "/bench.js") << "export default (input) => input;\n";
    std::ofstream(dir + "/bench.json") << "{\"grants\": {}}\n";
  }
  if (RunQuietly({basal_path, "flow", "approve", "bench", dir + "/bench.js", "--manifest", dir + "/bench.json", "--yes",
                  "--db", db}) != 0)
    Fatal("basal flow approve failed");
  const std::string config = dir + "/serve.json";
  std::ofstream(config) << "{\"limits\": {\"max_workers\": 8, \"queue_max\": 100000}}\n";
  pid_t daemon = fork();
  if (daemon == 0) {
    execl(basal_path.c_str(), basal_path.c_str(), "serve", "--socket", socket.c_str(), "--db", db.c_str(),
          "--config", config.c_str(), "--worker", o.worker_path.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  {
    Client probe(socket, "http://basal/healthz", false);
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (probe.Once() != 200) {
      if (Clock::now() > deadline) Fatal("basal serve did not come up");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ServeSamples out;
  const int n = o.quick ? 200 : 2000;
  {
    Client health(socket, "http://basal/healthz", false);
    for (int i = 0; i < n / 10; ++i) health.Once();  // warm-up
    for (int i = 0; i < n; ++i) {
      const auto t = Clock::now();
      if (health.Once() != 200) Fatal("/healthz failed");
      out.healthz.Add(MicrosSince(t));
    }
    Client run(socket, "http://basal/v1/flows/bench/runs?wait=30s", true);
    for (int i = 0; i < n / 10; ++i) run.Once();
    for (int i = 0; i < n; ++i) {
      const auto t = Clock::now();
      if (run.Once() != 200) Fatal("a run with ?wait did not end 200: " + run.body);
      out.run.Add(MicrosSince(t));
    }
  }
  // 16 clients at once, each with its own connection, for a fixed time.
  {
    const int clients = 16;
    CURLM* multi = curl_multi_init();
    std::vector<std::unique_ptr<Client>> cs;
    for (int i = 0; i < clients; ++i) {
      cs.push_back(std::make_unique<Client>(socket, "http://basal/v1/flows/bench/runs?wait=30s", true));
      curl_multi_add_handle(multi, cs.back()->curl);
    }
    const auto start = Clock::now();
    const auto until = start + std::chrono::seconds(o.quick ? 2 : 5);
    size_t done = 0;
    int running = clients;
    while (running > 0) {
      curl_multi_perform(multi, &running);
      int left = 0;
      while (CURLMsg* m = curl_multi_info_read(multi, &left)) {
        if (m->msg != CURLMSG_DONE) continue;
        CURL* e = m->easy_handle;
        long code = 0;
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
        if (code == 200) ++done;
        curl_multi_remove_handle(multi, e);
        if (Clock::now() < until) {
          for (auto& c : cs)
            if (c->curl == e) c->body.clear();
          curl_multi_add_handle(multi, e);
          ++running;
        }
      }
      if (running > 0) curl_multi_poll(multi, nullptr, 0, 100, nullptr);
    }
    out.concurrent_runs_per_second = static_cast<double>(done) / std::chrono::duration<double>(Clock::now() - start).count();
    out.concurrent_clients = clients;
    for (auto& c : cs) curl_multi_remove_handle(multi, c->curl);
    cs.clear();
    curl_multi_cleanup(multi);
  }
  kill(daemon, SIGTERM);
  int status = 0;
  waitpid(daemon, &status, 0);
  std::filesystem::remove_all(dir);
  return out;
}

}  // namespace basal::bench
