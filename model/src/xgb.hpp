// The one door to XGBoost's C API for mlprio-model: XGB_CHECK turns a non-zero status into
// XgbError carrying the call text, file:line and XGBGetLastError(), and small RAII owners free
// DMatrix and Booster handles on every path. Only model/ includes this; core never links XGBoost.
#pragma once

#include <xgboost/c_api.h>

#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mlprio/util/errors.hpp"

namespace mlprio::model {

class XgbError : public ::mlprio::RuntimeError {
 public:
  using ::mlprio::RuntimeError::RuntimeError;
};

[[noreturn]] inline void xgb_fail(const char* call, const char* file, int line) {
  throw XgbError(std::string("XGBoost call failed: ") + call + " at " + file + ":" +
                 std::to_string(line) + ": " + XGBGetLastError());
}

#define XGB_CHECK(call)                                                    \
  do {                                                                     \
    if ((call) != 0) ::mlprio::model::xgb_fail(#call, __FILE__, __LINE__); \
  } while (0)

class DMatrix {
 public:
  // Row-major dense matrix; NaN is missing.
  DMatrix(const float* data, size_t rows, size_t cols) {
    XGB_CHECK(
        XGDMatrixCreateFromMat(data, rows, cols, std::numeric_limits<float>::quiet_NaN(), &h_));
  }
  ~DMatrix() { XGDMatrixFree(h_); }
  DMatrix(const DMatrix&) = delete;
  DMatrix& operator=(const DMatrix&) = delete;
  void set_labels(const std::vector<float>& y) {
    XGB_CHECK(XGDMatrixSetFloatInfo(h_, "label", y.data(), y.size()));
  }
  // Per-row starting margin (XGBoost's base_margin; the base score is then not used).
  void set_base_margin(const std::vector<float>& m) {
    XGB_CHECK(XGDMatrixSetFloatInfo(h_, "base_margin", m.data(), m.size()));
  }
  void set_weights(const std::vector<float>& w) {
    XGB_CHECK(XGDMatrixSetFloatInfo(h_, "weight", w.data(), w.size()));
  }
  DMatrixHandle get() const { return h_; }

 private:
  DMatrixHandle h_ = nullptr;
};

class Booster {
 public:
  explicit Booster(const DMatrix* train = nullptr) {
    DMatrixHandle d[1] = {train != nullptr ? train->get() : nullptr};
    XGB_CHECK(XGBoosterCreate(d, train != nullptr ? 1 : 0, &h_));
  }
  ~Booster() { XGBoosterFree(h_); }
  Booster(const Booster&) = delete;
  Booster& operator=(const Booster&) = delete;
  void set(const char* name, const std::string& value) {
    XGB_CHECK(XGBoosterSetParam(h_, name, value.c_str()));
  }
  void load_json(std::string_view bytes) {
    XGB_CHECK(XGBoosterLoadModelFromBuffer(h_, bytes.data(), bytes.size()));
  }
  std::string save_json() const {
    bst_ulong len = 0;
    const char* buf = nullptr;
    XGB_CHECK(XGBoosterSaveModelToBuffer(h_, "{\"format\": \"json\"}", &len, &buf));
    return std::string(buf, len);
  }
  // XGBoost's saved JSON of the trees of the first `n_rounds` rounds only (XGBoosterSlice):
  // what early stopping keeps.
  std::string save_json_rounds(int n_rounds) const {
    BoosterHandle s = nullptr;
    XGB_CHECK(XGBoosterSlice(h_, 0, n_rounds, 1, &s));
    bst_ulong len = 0;
    const char* buf = nullptr;
    const int rc = XGBoosterSaveModelToBuffer(s, "{\"format\": \"json\"}", &len, &buf);
    std::string out = rc == 0 ? std::string(buf, len) : std::string();
    XGBoosterFree(s);
    if (rc != 0) xgb_fail("XGBoosterSaveModelToBuffer(slice)", __FILE__, __LINE__);
    return out;
  }
  // option_mask: 0 = values, 1 = margin, 4 = feature contributions (SHAP).
  std::vector<float> predict(const DMatrix& m, int option_mask) const {
    bst_ulong len = 0;
    const float* out = nullptr;
    XGB_CHECK(XGBoosterPredict(h_, m.get(), option_mask, 0, 0, &len, &out));
    return std::vector<float>(out, out + len);
  }
  BoosterHandle get() const { return h_; }

 private:
  BoosterHandle h_ = nullptr;
};

}  // namespace mlprio::model
