// Transformer shapes the FSDP step generator knows by name: gpt2-xl, t5-3b, llama2-7b,
// llama2-13b and mixtral-8x7b are built in; others come from a JSON file
// (fsdp_profiler/configs/models.json by default) with the same fields. Parameter counts are
// computed from the shapes, so the generator's memory follows the architecture rather than a
// headline number.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mlprio/util/errors.hpp"

namespace mlprio::fsdp {

class ModelConfigError : public ::mlprio::UsageError {
 public:
  using ::mlprio::UsageError::UsageError;
};

// Bounds on a model-shape file's numbers: parameter counts (layers x d^2) and the step's tensor
// sizes are products of them, computed in 64 bits.
inline constexpr int64_t MAX_SHAPE_WIDTH = int64_t{1} << 20;   // d_model, d_attn, d_ff, heads
inline constexpr int64_t MAX_SHAPE_LAYERS = int64_t{1} << 12;  // n_layers, n_dec_layers
inline constexpr int64_t MAX_SHAPE_VOCAB = int64_t{1} << 24;
inline constexpr int64_t MAX_SEQ_LEN = int64_t{1} << 20;  // seq_len, dec_seq_len, --seq-len
inline constexpr int64_t MAX_SHAPE_EXPERTS = 1024;        // n_experts

struct TransformerShape {
  std::string name;
  int64_t n_layers = 0;      // decoder-only: all layers; encoder-decoder: encoder layers
  int64_t n_dec_layers = 0;  // encoder-decoder only
  int64_t d_model = 0;
  int64_t n_heads = 0;
  int64_t d_attn = 0;  // heads x head dim (T5-3B: 4096 with d_model 1024)
  int64_t d_ff = 0;
  int64_t vocab = 0;
  int64_t seq_len = 0;      // (encoder) sequence length used for the step
  int64_t dec_seq_len = 0;  // decoder sequence length (encoder-decoder only)
  bool gated_mlp = false;   // LLaMA's SwiGLU: three d x d_ff matrices
  bool tied_embeddings = true;
  bool dropout = true;  // dropout masks are saved for backward
  // Mixtral-style sparse MoE: the MLP is n_experts SwiGLU experts (each three d x d_ff
  // matrices) behind a d x n_experts router, experts_per_token of them per token. 0: dense.
  int64_t n_experts = 0;
  int64_t experts_per_token = 0;

  bool encoder_decoder() const { return n_dec_layers > 0; }
  int64_t layer_params(bool decoder_layer_with_cross) const;
  int64_t root_params() const;  // embeddings, final norms, untied LM head
  int64_t total_params() const;
};

// Looks a name up among the built-ins, then in `models_file` ("" = the default file when it
// exists). Throws ModelConfigError listing the names that are known.
TransformerShape find_model(std::string_view name, const std::string& models_file = "");
std::vector<std::string> known_models(const std::string& models_file = "");

}  // namespace mlprio::fsdp
