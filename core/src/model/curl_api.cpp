// curl_api.hpp: libcurl by dlopen. RTLD_LOCAL keeps its symbols out of the global scope (in
// slurmctld, out of every other plugin's way); the handle is never closed, as libcurl's global
// state may not be torn down while another thread could still use it.
#include "model/curl_api.hpp"

#include <dlfcn.h>

#include <type_traits>

#include "mlprio/model/llm_advisor.hpp"

namespace mlprio::model {

namespace detail {

CurlApi load_curl_api(const std::string& soname) {
  void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    throw AdvisorError("the LLM advisor needs libcurl: cannot load " + soname + ": " +
                       (why ? why : "unknown error"));
  }
  CurlApi api;
  const auto bind = [&](auto& fn, const char* name) {
    void* sym = dlsym(lib, name);
    if (!sym) {
      dlclose(lib);  // not libcurl, or too old: nothing of it was used
      throw AdvisorError("the LLM advisor needs libcurl 7.68 or later: " + soname + " has no " +
                         name);
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(sym);
  };
  bind(api.global_init, "curl_global_init");
  bind(api.easy_init, "curl_easy_init");
  bind(api.easy_cleanup, "curl_easy_cleanup");
  bind(api.easy_reset, "curl_easy_reset");
  bind(api.easy_setopt, "curl_easy_setopt");
  bind(api.easy_getinfo, "curl_easy_getinfo");
  bind(api.easy_strerror, "curl_easy_strerror");
  bind(api.multi_init, "curl_multi_init");
  bind(api.multi_cleanup, "curl_multi_cleanup");
  bind(api.multi_add_handle, "curl_multi_add_handle");
  bind(api.multi_remove_handle, "curl_multi_remove_handle");
  bind(api.multi_perform, "curl_multi_perform");
  bind(api.multi_poll, "curl_multi_poll");
  bind(api.multi_wakeup, "curl_multi_wakeup");
  bind(api.multi_info_read, "curl_multi_info_read");
  bind(api.multi_strerror, "curl_multi_strerror");
  bind(api.slist_append, "curl_slist_append");
  bind(api.slist_free_all, "curl_slist_free_all");
  return api;
}

}  // namespace detail

const CurlApi& curl_api() {
  // A function-local static: initialised once, thread-safely; if loading throws, the next call
  // tries again.
  static const CurlApi API = detail::load_curl_api("libcurl.so.4");
  return API;
}

}  // namespace mlprio::model
