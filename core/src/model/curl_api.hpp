// libcurl, loaded the first time an LLM advisor starts instead of when the process starts. Only
// <curl/curl.h>'s types and constants are compiled in; the functions come from dlopen and dlsym.
// A process that never starts an advisor (every replay, slurmctld without an advisor URL) then
// never maps libcurl and the ~30 libraries it needs (TLS, Kerberos, LDAP, SSH; bench/RESULTS.md,
// "Start-up"), and a host without libcurl still loads the plugins: the advisor alone fails, with
// a message naming the library. Internal to core (llm_transport.cpp and its test).
#pragma once

#include <curl/curl.h>

#include <string>

namespace mlprio::model {

// The libcurl functions the advisor calls, each with libcurl's own type.
struct CurlApi {
  decltype(&::curl_global_init) global_init = nullptr;
  decltype(&::curl_easy_init) easy_init = nullptr;
  decltype(&::curl_easy_cleanup) easy_cleanup = nullptr;
  decltype(&::curl_easy_reset) easy_reset = nullptr;
  decltype(&::curl_easy_setopt) easy_setopt = nullptr;
  decltype(&::curl_easy_getinfo) easy_getinfo = nullptr;
  decltype(&::curl_easy_strerror) easy_strerror = nullptr;
  decltype(&::curl_multi_init) multi_init = nullptr;
  decltype(&::curl_multi_cleanup) multi_cleanup = nullptr;
  decltype(&::curl_multi_add_handle) multi_add_handle = nullptr;
  decltype(&::curl_multi_remove_handle) multi_remove_handle = nullptr;
  decltype(&::curl_multi_perform) multi_perform = nullptr;
  decltype(&::curl_multi_poll) multi_poll = nullptr;
  decltype(&::curl_multi_wakeup) multi_wakeup = nullptr;
  decltype(&::curl_multi_info_read) multi_info_read = nullptr;
  decltype(&::curl_multi_strerror) multi_strerror = nullptr;
  decltype(&::curl_slist_append) slist_append = nullptr;
  decltype(&::curl_slist_free_all) slist_free_all = nullptr;
};

// The shared libcurl of this process (soname libcurl.so.4, the ABI since libcurl 7.16), opened
// once and never closed. Throws AdvisorError naming the library and dlerror()'s message when it
// cannot be opened or lacks one of the functions (a libcurl older than 7.68, which added
// curl_multi_wakeup); a later call tries again.
const CurlApi& curl_api();

namespace detail {
// What curl_api() does, for the library named `soname` (tests name one that does not exist).
CurlApi load_curl_api(const std::string& soname);
}  // namespace detail

}  // namespace mlprio::model
