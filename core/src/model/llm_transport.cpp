// CurlTransport (llm_internal.hpp): one POST to the chat endpoint through a curl easy handle
// driven by a multi handle, so that abort() can wake the poll (curl_multi_wakeup) and end a
// transfer at once instead of waiting for a time-out. Every curl call goes through
// MLPRIO_CURL_CHECK. The body is read up to max_response_bytes; a status other than 200 carries
// the server's sanitised message into the result's error line.
#include <mutex>
#include <string>

#include "model/llm_internal.hpp"

namespace mlprio::model {

// Throws AdvisorError naming the curl call, its file:line and curl's message.
#define MLPRIO_CURL_CHECK(call) \
  ::mlprio::model::llm_detail::curl_check((call), #call, __FILE__, __LINE__)

namespace llm_detail {

namespace {

constexpr long POLL_INTERVAL_MS = 100;  // upper bound between stop checks; wakeup makes it ~0

std::once_flag CURL_GLOBAL_ONCE;

void curl_check(CURLcode rc, const char* call, const char* file, int line) {
  if (rc != CURLE_OK)
    throw AdvisorError(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                       ": " + curl_api().easy_strerror(rc));
}
void curl_check(CURLMcode rc, const char* call, const char* file, int line) {
  if (rc != CURLM_OK)
    throw AdvisorError(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                       ": " + curl_api().multi_strerror(rc));
}

// The request's header list, freed with the request.
struct Headers {
  curl_slist* list = nullptr;
  Headers() = default;
  Headers(const Headers&) = delete;
  Headers& operator=(const Headers&) = delete;
  ~Headers() { curl_api().slist_free_all(list); }
  void add(const std::string& h) {
    curl_slist* next = curl_api().slist_append(list, h.c_str());
    if (!next) throw AdvisorError("curl_slist_append failed (out of memory)");
    list = next;
  }
};

}  // namespace

CurlTransport::CurlTransport(const AdvisorConfig& cfg) : cfg_(cfg) {
  curl_api();  // loads libcurl, or throws AdvisorError naming what is missing
  CURLcode global_rc = CURLE_OK;
  std::call_once(CURL_GLOBAL_ONCE,
                 [&] { global_rc = curl_api().global_init(CURL_GLOBAL_DEFAULT); });
  MLPRIO_CURL_CHECK(global_rc);
  url_ = cfg_.base_url;
  while (!url_.empty() && url_.back() == '/') url_.pop_back();
  url_ += "/v1/chat/completions";
  easy_ = curl_api().easy_init();
  multi_ = curl_api().multi_init();
  if (!easy_ || !multi_) {
    if (multi_) curl_api().multi_cleanup(multi_);
    if (easy_) curl_api().easy_cleanup(easy_);
    throw AdvisorError("curl_easy_init/curl_multi_init failed");
  }
}

CurlTransport::~CurlTransport() {
  if (multi_) curl_api().multi_cleanup(multi_);
  if (easy_) curl_api().easy_cleanup(easy_);
}

void CurlTransport::abort() {
  abort_.store(true);
  if (multi_) curl_api().multi_wakeup(multi_);
}

size_t CurlTransport::on_write(char* data, size_t size, size_t nmemb, void* user) {
  auto* self = static_cast<CurlTransport*>(user);
  const size_t n = size * nmemb;
  if (self->response_.size() + n > self->cfg_.max_response_bytes) {
    self->response_too_large_ = true;
    return 0;  // curl aborts the transfer with CURLE_WRITE_ERROR
  }
  self->response_.append(data, n);
  return n;
}

int CurlTransport::on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<CurlTransport*>(user)->abort_.load() ? 1 : 0;
}

void CurlTransport::configure(const std::string& payload, curl_slist* headers, char* errbuf) {
  curl_api().easy_reset(easy_);
  MLPRIO_CURL_CHECK(curl_api().easy_setopt(easy_, CURLOPT_URL, url_.c_str()));
  MLPRIO_CURL_CHECK(curl_api().easy_setopt(easy_, CURLOPT_PROTOCOLS_STR, "http,https"));
  MLPRIO_CURL_CHECK(
      curl_api().easy_setopt(easy_, CURLOPT_PROXY, ""));  // never an environment proxy
  MLPRIO_CURL_CHECK(curl_api().easy_setopt(easy_, CURLOPT_FOLLOWLOCATION, 0L));
  // https: verify the certificate chain and the host name (curl's defaults, stated so that
  // no change of defaults can turn them off), against ca_file when one is given.
  MLPRIO_CURL_CHECK(curl_api().easy_setopt(easy_, CURLOPT_SSL_VERIFYPEER, 1L));
  MLPRIO_CURL_CHECK(curl_api().easy_setopt(easy_, CURLOPT_SSL_VERIFYHOST, 2L));
  if (!cfg_.ca_file.empty())
    MLPRIO_CURL_CHECK(curl_api().easy_setopt(easy_, CURLOPT_CAINFO, cfg_.ca_file.c_str()));
  MLPRIO_CURL_CHECK(curl_api().easy_setopt(easy_, CURLOPT_NOSIGNAL, 1L));
  MLPRIO_CURL_CHECK(
      curl_api().easy_setopt(easy_, CURLOPT_TIMEOUT_MS, static_cast<long>(cfg_.timeout_ms)));
  MLPRIO_CURL_CHECK(curl_api().easy_setopt(easy_, CURLOPT_CONNECTTIMEOUT_MS,
                                           static_cast<long>(cfg_.connect_timeout_ms)));
  MLPRIO_CURL_CHECK(curl_api().easy_setopt(easy_, CURLOPT_HTTPHEADER, headers));
  MLPRIO_CURL_CHECK(curl_api().easy_setopt(easy_, CURLOPT_POSTFIELDS, payload.c_str()));
  MLPRIO_CURL_CHECK(curl_api().easy_setopt(easy_, CURLOPT_POSTFIELDSIZE_LARGE,
                                           static_cast<curl_off_t>(payload.size())));
  MLPRIO_CURL_CHECK(curl_api().easy_setopt(easy_, CURLOPT_WRITEFUNCTION, &CurlTransport::on_write));
  MLPRIO_CURL_CHECK(curl_api().easy_setopt(easy_, CURLOPT_WRITEDATA, this));
  MLPRIO_CURL_CHECK(curl_api().easy_setopt(easy_, CURLOPT_NOPROGRESS, 0L));
  MLPRIO_CURL_CHECK(
      curl_api().easy_setopt(easy_, CURLOPT_XFERINFOFUNCTION, &CurlTransport::on_progress));
  MLPRIO_CURL_CHECK(curl_api().easy_setopt(easy_, CURLOPT_XFERINFODATA, this));
  MLPRIO_CURL_CHECK(curl_api().easy_setopt(easy_, CURLOPT_ERRORBUFFER, errbuf));
}

// Drives the transfer (the easy handle added to the multi handle) to its end, or until abort()
// (then `aborted`). Returns curl's result for it (CURLE_ABORTED_BY_CALLBACK when it has none).
CURLcode CurlTransport::perform(bool& aborted) {
  int running = 1;
  aborted = false;
  while (true) {
    MLPRIO_CURL_CHECK(curl_api().multi_perform(multi_, &running));
    if (running == 0) break;
    if (abort_.load()) {
      aborted = true;
      break;
    }
    MLPRIO_CURL_CHECK(curl_api().multi_poll(multi_, nullptr, 0, POLL_INTERVAL_MS, nullptr));
  }
  CURLcode rc = CURLE_ABORTED_BY_CALLBACK;
  int left = 0;
  while (CURLMsg* m = curl_api().multi_info_read(multi_, &left))
    if (m->msg == CURLMSG_DONE && m->easy_handle == easy_) rc = m->data.result;
  return rc;
}

// True on HTTP 200; otherwise sets r.status and r.error and returns false.
bool CurlTransport::classify(CURLcode rc, bool aborted, const char* errbuf, AdviceResult& r) {
  if (aborted || rc == CURLE_ABORTED_BY_CALLBACK) {
    r.status = AdviceStatus::TRANSPORT_ERROR;
    r.error = "aborted: the advisor is stopping";
    return false;
  }
  if (rc == CURLE_OPERATION_TIMEDOUT) {
    r.status = AdviceStatus::TIMEOUT;
    r.error = std::string("time-out: ") + (errbuf[0] ? errbuf : curl_api().easy_strerror(rc));
    return false;
  }
  if (response_too_large_ || rc == CURLE_FILESIZE_EXCEEDED) {
    r.status = AdviceStatus::TOO_LARGE;
    r.error =
        "answer larger than max_response_bytes (" + std::to_string(cfg_.max_response_bytes) + ")";
    return false;
  }
  if (rc != CURLE_OK) {
    r.status = AdviceStatus::TRANSPORT_ERROR;
    r.error =
        std::string(curl_api().easy_strerror(rc)) + (errbuf[0] ? std::string(": ") + errbuf : "");
    return false;
  }
  long code = 0;
  MLPRIO_CURL_CHECK(curl_api().easy_getinfo(easy_, CURLINFO_RESPONSE_CODE, &code));
  if (code != 200) {
    r.status = AdviceStatus::HTTP_ERROR;
    r.error = "HTTP " + std::to_string(code);
    const std::string said = server_error_message(response_);
    if (!said.empty()) r.error += ": server says: " + said;
    // llama.cpp builds before json_schema support answer 400/500 naming response_format.
    if (cfg_.response_format == ResponseFormat::JSON_SCHEMA &&
        said.find("json_schema") != std::string::npos)
      r.error += " (a server without json_schema support takes response_format json_object)";
    return false;
  }
  return true;
}

bool CurlTransport::post(const std::string& payload, AdviceResult& r) {
  Headers headers;
  headers.add("Content-Type: application/json");
  headers.add("Expect:");  // no 100-continue round trip for large prompts
  if (!cfg_.api_key.empty()) headers.add("Authorization: Bearer " + cfg_.api_key);

  response_.clear();
  response_too_large_ = false;
  char errbuf[CURL_ERROR_SIZE] = {0};
  configure(payload, headers.list, errbuf);
  MLPRIO_CURL_CHECK(curl_api().multi_add_handle(multi_, easy_));
  struct Added {
    CURLM* m;
    CURL* e;
    ~Added() { curl_api().multi_remove_handle(m, e); }
  } added{multi_, easy_};
  bool aborted = false;
  const CURLcode rc = perform(aborted);
  return classify(rc, aborted, errbuf, r);
}

}  // namespace llm_detail

}  // namespace mlprio::model
