// Test-only: llama.cpp's real llama-server as a child process, for the tests labelled `llama`
// (tests/llama/). find_llama_server() locates the binary and the tiny random-weight model that
// scripts/llama-server-build writes (MLPRIO_LLAMA_SERVER and MLPRIO_LLAMA_MODEL, else
// $MLPRIO_CACHE/llama/..., MLPRIO_CACHE defaulting to the scripts' cache folder); a test calls
// MLPRIO_SKIP with its `why` when they are missing. LlamaServer starts the server on 127.0.0.1
// at a free port with one thread, waits (bounded) for GET /health to answer 200, and stops it
// with SIGTERM (SIGKILL after 10 s) when it goes out of scope; the server's log is kept in a file
// and shown when the start fails. http_request() is a plain-socket HTTP/1.1 client for looking at
// the server's own answers beside what our client makes of them.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace mlprio_test {

struct LlamaPaths {
  std::string server;  // the llama-server binary
  std::string model;   // the GGUF model
  std::string why;     // when not found: what is missing and how to get it
};

inline LlamaPaths find_llama_server() {
  namespace fs = std::filesystem;
  const char* cache_env = std::getenv("MLPRIO_CACHE");
  const fs::path cache =
      fs::path(cache_env && *cache_env ? cache_env : "/var/cache/mlprio") / "llama";
  const char* s = std::getenv("MLPRIO_LLAMA_SERVER");
  const char* m = std::getenv("MLPRIO_LLAMA_MODEL");
  LlamaPaths p;
  p.server = s && *s ? s : (cache / "build" / "bin" / "llama-server").string();
  p.model = m && *m ? m : (cache / "tiny-llama.gguf").string();
  if (::access(p.server.c_str(), X_OK) != 0)
    p.why = "no llama-server at " + p.server + " (run scripts/llama-server-build)";
  else if (!fs::is_regular_file(p.model))
    p.why = "no test model at " + p.model + " (run scripts/llama-server-build)";
  return p;
}

struct HttpReply {
  int status = 0;  // 0: no answer (refused, closed, timed out)
  std::string body;
};

// One request on a fresh connection (Connection: close), read to the end or until timeout_ms.
inline HttpReply http_request(int port, const std::string& method, const std::string& path,
                              const std::string& body = {}, const std::string& extra_headers = {},
                              int timeout_ms = 60000) {
  HttpReply out;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return out;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return out;
  }
  std::string req =
      method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra_headers;
  if (!body.empty() || method == "POST")
    req +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  for (size_t sent = 0; sent < req.size();) {
    const ssize_t n = ::send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      ::close(fd);
      return out;
    }
    sent += static_cast<size_t>(n);
  }
  std::string raw;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  const size_t head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos) return out;
  out.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
  out.body = raw.substr(head_end + 4);
  // A chunked body (the server streams some answers): join the chunks.
  std::string head = raw.substr(0, head_end);
  for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (head.find("transfer-encoding: chunked") != std::string::npos) {
    std::string joined;
    size_t at = 0;
    while (at < out.body.size()) {
      const size_t eol = out.body.find("\r\n", at);
      if (eol == std::string::npos) break;
      const size_t len = std::strtoul(out.body.c_str() + at, nullptr, 16);
      if (len == 0) break;
      joined += out.body.substr(eol + 2, len);
      at = eol + 2 + len + 2;
    }
    out.body = joined;
  }
  return out;
}

// A port nobody listens on now (the kernel's pick for a socket bound to port 0). Another process
// may take it before the server binds it; start() then tries again with a new one.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

class LlamaServer {
 public:
  // Starts the server with `extra` arguments after the fixed ones (model, host, port, one thread,
  // one slot, a context of ctx tokens, no web UI). REQUIREs that /health answers 200 within 120 s.
  LlamaServer(const LlamaPaths& paths, std::vector<std::string> extra = {}, int ctx = 8192)
      : log_(std::filesystem::temp_directory_path() /
             ("mlprio-llama-server-" + std::to_string(::getpid()) + "-" +
              std::to_string(counter()++) + ".log")) {
    for (int attempt = 0; attempt < 3 && pid_ <= 0; ++attempt) {
      port_ = free_port();
      std::vector<std::string> args = {paths.server,
                                       "-m",
                                       paths.model,
                                       "--host",
                                       "127.0.0.1",
                                       "--port",
                                       std::to_string(port_),
                                       "-t",
                                       "1",
                                       "-tb",
                                       "1",
                                       "-np",
                                       "1",
                                       "-c",
                                       std::to_string(ctx),
                                       "--no-webui",
                                       "--no-warmup"};
      args.insert(args.end(), extra.begin(), extra.end());
      spawn(args);
      if (!wait_healthy()) stop();
    }
    INFO("llama-server log (" << log_.string() << "):\n" << log_tail());
    REQUIRE(pid_ > 0);
  }
  ~LlamaServer() {
    stop();
    std::error_code ec;
    std::filesystem::remove(log_, ec);
  }
  LlamaServer(const LlamaServer&) = delete;
  LlamaServer& operator=(const LlamaServer&) = delete;

  int port() const { return port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  bool running() {
    if (pid_ <= 0) return false;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    return true;
  }
  // The last `bytes` of the server's log.
  std::string log_tail(size_t bytes = 4000) const {
    std::ifstream in(log_, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    const std::string all = s.str();
    return all.size() > bytes ? all.substr(all.size() - bytes) : all;
  }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  void spawn(const std::vector<std::string>& args) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    pid_ = pid;
  }
  bool wait_healthy() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < until) {
      if (!running()) return false;
      if (http_request(port_, "GET", "/health", {}, {}, 2000).status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 1000; ++i) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  std::filesystem::path log_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace mlprio_test
