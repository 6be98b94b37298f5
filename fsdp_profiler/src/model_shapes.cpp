// Built-in transformer shapes (public Hugging Face configs) and the JSON loader for others.
#include "mlprio/fsdp/model_shapes.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "mlprio/io/json_input.hpp"

#ifndef MLPRIO_FSDP_CONFIG_DIR
#define MLPRIO_FSDP_CONFIG_DIR ""
#endif

namespace mlprio::fsdp {

int64_t TransformerShape::layer_params(bool cross) const {
  const int64_t attn = 4 * d_model * d_attn;  // q, k, v, o
  const int64_t mlp = n_experts > 0 ? n_experts * 3 * d_model * d_ff + d_model * n_experts
                                    : (gated_mlp ? 3 : 2) * d_model * d_ff;
  const int64_t norms = 2 * d_model;
  return attn * (cross ? 2 : 1) + mlp + norms + (cross ? d_model : 0);
}

int64_t TransformerShape::root_params() const {
  int64_t p = vocab * d_model + 2 * d_model;  // embedding, final norm(s)
  if (!tied_embeddings) p += vocab * d_model;
  if (!gated_mlp && !encoder_decoder()) p += seq_len * d_model;  // GPT-2 learned positions
  return p;
}

int64_t TransformerShape::total_params() const {
  return root_params() + n_layers * layer_params(false) + n_dec_layers * layer_params(true);
}

namespace {

std::vector<TransformerShape> builtins() {
  std::vector<TransformerShape> v;
  TransformerShape g;  // GPT2-XL: 48 x 1600, 25 heads, context 1024
  g.name = "gpt2-xl";
  g.n_layers = 48;
  g.d_model = 1600;
  g.n_heads = 25;
  g.d_attn = 1600;
  g.d_ff = 6400;
  g.vocab = 50257;
  g.seq_len = 1024;
  v.push_back(g);
  TransformerShape t;  // T5-3B: 24 + 24 layers, d_model 1024, 32 heads x 128, d_ff 16384
  t.name = "t5-3b";
  t.n_layers = 24;
  t.n_dec_layers = 24;
  t.d_model = 1024;
  t.n_heads = 32;
  t.d_attn = 4096;
  t.d_ff = 16384;
  t.vocab = 32128;
  t.seq_len = 512;
  t.dec_seq_len = 128;
  v.push_back(t);
  TransformerShape l7;  // LLaMA-2-7B
  l7.name = "llama2-7b";
  l7.n_layers = 32;
  l7.d_model = 4096;
  l7.n_heads = 32;
  l7.d_attn = 4096;
  l7.d_ff = 11008;
  l7.vocab = 32000;
  l7.seq_len = 4096;
  l7.gated_mlp = true;
  l7.tied_embeddings = false;
  l7.dropout = false;
  v.push_back(l7);
  TransformerShape l13 = l7;  // LLaMA-2-13B
  l13.name = "llama2-13b";
  l13.n_layers = 40;
  l13.d_model = 5120;
  l13.n_heads = 40;
  l13.d_attn = 5120;
  l13.d_ff = 13824;
  v.push_back(l13);
  // Mixtral-8x7B: LLaMA layers whose MLP is 8 SwiGLU experts, 2 per token. Its grouped-query
  // attention (k, v 1024 wide) is not modelled: q, k, v, o are all d_attn wide, which counts
  // 0.8B parameters more than the published 46.7B.
  TransformerShape mx = l7;
  mx.name = "mixtral-8x7b";
  mx.d_ff = 14336;
  mx.n_experts = 8;
  mx.experts_per_token = 2;
  v.push_back(mx);
  return v;
}

std::string default_file() {
  const std::string p = std::string(MLPRIO_FSDP_CONFIG_DIR) + "/models.json";
  return std::filesystem::exists(p) ? p : "";
}

std::vector<TransformerShape> from_file(const std::string& path) {
  std::vector<TransformerShape> out;
  if (path.empty()) return out;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelConfigError(path + ": cannot open models file: " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json doc;
  try {
    doc = io::parse_untrusted_json(text.str());
  } catch (const io::JsonInputError& e) {
    throw ModelConfigError(path + ": " + e.what());
  }
  const auto models = doc.find("models");
  if (!doc.is_object() || models == doc.end() || !models->is_array())
    throw ModelConfigError(path +
                           ": expected {\"models\": [ {\"name\": ..., \"n_layers\": ...} ]}");
  for (size_t i = 0; i < models->size(); ++i) {
    const auto& m = (*models)[i];
    const std::string loc = path + ": models[" + std::to_string(i) + "]";
    auto num = [&](const char* f, bool required, int64_t max) -> int64_t {
      const auto it = m.find(f);
      if (it == m.end()) {
        if (required) throw ModelConfigError(loc + ": missing integer field '" + f + "'");
        return 0;
      }
      const bool in_range =
          it->is_number_unsigned()
              ? it->get<uint64_t>() <= static_cast<uint64_t>(max)
              : it->is_number_integer() && it->get<int64_t>() >= 0 && it->get<int64_t>() <= max;
      if (!in_range)
        throw ModelConfigError(loc + "." + f + ": expected an integer from 0 to " +
                               std::to_string(max));
      return it->get<int64_t>();
    };
    if (!m.is_object() || !m.contains("name") || !m["name"].is_string())
      throw ModelConfigError(loc + ": expected an object with a string \"name\"");
    TransformerShape s;
    s.name = m["name"].get<std::string>();
    s.n_layers = num("n_layers", true, MAX_SHAPE_LAYERS);
    s.n_dec_layers = num("n_dec_layers", false, MAX_SHAPE_LAYERS);
    s.d_model = num("d_model", true, MAX_SHAPE_WIDTH);
    s.n_heads = num("n_heads", true, MAX_SHAPE_WIDTH);
    s.d_attn = num("d_attn", false, MAX_SHAPE_WIDTH);
    if (s.d_attn == 0) s.d_attn = s.d_model;
    s.d_ff = num("d_ff", true, MAX_SHAPE_WIDTH);
    s.vocab = num("vocab", true, MAX_SHAPE_VOCAB);
    s.seq_len = num("seq_len", true, MAX_SEQ_LEN);
    s.dec_seq_len = num("dec_seq_len", false, MAX_SEQ_LEN);
    s.gated_mlp = m.value("gated_mlp", false);
    s.tied_embeddings = m.value("tied_embeddings", true);
    s.dropout = m.value("dropout", true);
    s.n_experts = num("n_experts", false, MAX_SHAPE_EXPERTS);
    s.experts_per_token = num("experts_per_token", false, MAX_SHAPE_EXPERTS);
    if (s.n_experts > 0 && (!s.gated_mlp || s.n_dec_layers > 0 || s.experts_per_token < 1 ||
                            s.experts_per_token > s.n_experts))
      throw ModelConfigError(loc +
                             ": a mixture of experts (n_experts > 0) is a decoder-only "
                             "gated_mlp model with 1 <= experts_per_token <= n_experts");
    if (s.n_layers == 0 || s.d_model == 0 || s.n_heads == 0 || s.seq_len == 0)
      throw ModelConfigError(loc + ": n_layers, d_model, n_heads and seq_len must be > 0");
    if (s.n_dec_layers > 0 && s.dec_seq_len == 0)
      throw ModelConfigError(loc + ": an encoder-decoder model needs dec_seq_len > 0");
    out.push_back(s);
  }
  return out;
}

}  // namespace

TransformerShape find_model(std::string_view name, const std::string& models_file) {
  for (const auto& m : builtins())
    if (m.name == name) return m;
  for (const auto& m : from_file(models_file.empty() ? default_file() : models_file))
    if (m.name == name) return m;
  std::string known;
  for (const auto& n : known_models(models_file)) known += (known.empty() ? "" : ", ") + n;
  throw ModelConfigError("unknown model '" + std::string(name) + "'; known: " + known);
}

std::vector<std::string> known_models(const std::string& models_file) {
  std::vector<std::string> names;
  for (const auto& m : builtins()) names.push_back(m.name);
  for (const auto& m : from_file(models_file.empty() ? default_file() : models_file))
    names.push_back(m.name);
  return names;
}

}  // namespace mlprio::fsdp
