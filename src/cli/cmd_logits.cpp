// `moestream logits`: run a prompt and write the logits, for numerical parity
// checks against other implementations (tools/hf_parity.py).
//
//   moestream logits -m FILE (--tokens 1,2,3 | -p TEXT) -o OUT.f32 [--all]
//
// OUT.f32 holds little-endian float32 rows of n_vocab values: the last
// position's (default) or every position's (--all). Prints the top-5 ids of
// the last position. Extras for the parity tool:
//   --routes R.json   the experts each MoE layer chose for each prompt token:
//                     {"n_layer": L, "n_tokens": T, "experts": [L][T][k]} (ids ascending)
//   --hidden H.f32    each MoE layer's router input (the layer's FFN input) for
//                     each prompt token: little-endian float32 [L][T][n_embd],
//                     described by H.f32.json: {"n_layer_moe": L, "layers":
//                     [model layer index per row block], "n_tokens": T,
//                     "n_embd": D, "dtype": "float32", "order": "layer,token,embd"}
//   --greedy N        then continue greedily for N tokens: "greedy: id,id,..." and
//                     "margins: ..." (each pick's best-minus-second logit over the rms)
//   --print-tokens    only tokenize: "tokens: id,id,..."
//   --kv-type f32     keep K/V unrounded (CPU): at F32 parity's 1e-4 relative
//                     logit error, half-rounded K/V can be the largest error
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/backend_choice.h"
#include "cli/commands.h"
#include "cli/model_path.h"
#include "cpu/thread_pool.h"
#include "engine/backend.h"
#include "engine/generate.h"
#include "engine/loaded_model.h"
#include "engine/sampler.h"
#include "util/error.h"

namespace ms::cli {
namespace {

struct LogitsArgs {
  std::string model, tokens, prompt, output, backend, routes, hidden;
  bool all = false, print_tokens = false, no_special = false;
  int greedy = 0;
  int threads = 0;
  KvType kv_type = KvType::F16;
  VramSetup vram;
};

std::vector<int32_t> parse_token_list(const std::string& text, int64_t n_vocab) {
  std::vector<int32_t> ids;
  std::string item;
  std::stringstream ss(text);
  while (std::getline(ss, item, ',')) {
    const size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b == std::string::npos) continue;
    item = item.substr(b, e - b + 1);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size()) throw Error("--tokens: '" + item + "' is not a token id (give ids like 1,2,3)");
    if (v < 0 || v >= n_vocab)
      throw Error("--tokens: id " + item + " is outside the vocabulary (0.." + std::to_string(n_vocab - 1) + ")");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) throw Error("--tokens: no token ids given");
  return ids;
}

std::string join(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// The experts each MoE layer chose for each token, from the backend's route
// hook (any backend), ids ascending per token.
class RouteTable {
 public:
  explicit RouteTable(int n_layer) : routes_(static_cast<size_t>(n_layer)) {}

  void record(const RouteEvent& ev) {
    auto& rows = routes_.at(static_cast<size_t>(ev.layer));
    for (int t = 0; t < ev.n_tokens; ++t) {
      const int32_t* ids = ev.ids + static_cast<int64_t>(t) * ev.k;
      rows.emplace_back(ids, ids + ev.k);
      std::sort(rows.back().begin(), rows.back().end());
    }
  }

  nlohmann::json to_json(int64_t n_tokens) const {
    nlohmann::json experts = nlohmann::json::array();
    int n_moe = 0;
    for (const auto& layer : routes_) {
      if (layer.empty()) continue;  // a dense layer
      experts.push_back(layer);
      ++n_moe;
    }
    return {{"n_layer", n_moe}, {"n_tokens", n_tokens}, {"experts", experts}};
  }

 private:
  std::vector<std::vector<std::vector<int32_t>>> routes_;  // [layer][token][k]
};

// Each MoE layer's router input (RouteEvent::hidden) for each prompt token,
// from the same hook; batches of a layer append in token order.
class HiddenTable {
 public:
  HiddenTable(int n_layer, int64_t n_embd) : rows_(static_cast<size_t>(n_layer)), n_embd_(n_embd) {}

  void record(const RouteEvent& ev) {
    if (ev.hidden == nullptr) throw Error("internal: the route hook gave no hidden state (--hidden)");
    auto& rows = rows_.at(static_cast<size_t>(ev.layer));
    rows.insert(rows.end(), ev.hidden, ev.hidden + static_cast<int64_t>(ev.n_tokens) * n_embd_);
  }

  // Writes `path` ([layer][token][n_embd] float32, little-endian) and
  // `path`.json (its shape); throws ms::Error naming the file that failed.
  void write(const std::string& path, int64_t n_tokens) const {
    std::vector<int> layers;
    for (size_t l = 0; l < rows_.size(); ++l) {
      if (rows_[l].empty()) continue;  // a dense layer
      if (static_cast<int64_t>(rows_[l].size()) != n_tokens * n_embd_)
        throw Error("internal: layer " + std::to_string(l) + " reported " +
                    std::to_string(rows_[l].size() / static_cast<size_t>(n_embd_)) + " hidden rows, expected " +
                    std::to_string(n_tokens));
      layers.push_back(static_cast<int>(l));
    }
    static_assert(std::endian::native == std::endian::little, "--hidden writes the host's float32 as little-endian");
    {
      std::ofstream out(path, std::ios::binary);
      if (!out) throw Error(path + ": cannot write the hidden states (cannot open the file)");
      for (int l : layers)
        out.write(reinterpret_cast<const char*>(rows_[static_cast<size_t>(l)].data()),
                  static_cast<std::streamsize>(rows_[static_cast<size_t>(l)].size() * sizeof(float)));
      out.close();
      if (!out) throw Error(path + ": cannot write the hidden states");
    }
    const nlohmann::json meta = {{"n_layer_moe", layers.size()}, {"layers", layers},   {"n_tokens", n_tokens},
                                 {"n_embd", n_embd_},            {"dtype", "float32"}, {"order", "layer,token,embd"}};
    std::ofstream out(path + ".json");
    if (!out) throw Error(path + ".json: cannot write the hidden states' description (cannot open the file)");
    out << meta.dump() << '\n';
    out.close();
    if (!out) throw Error(path + ".json: cannot write the hidden states' description");
  }

 private:
  std::vector<std::vector<float>> rows_;  // [layer][token * n_embd]
  int64_t n_embd_;
};

// (best - second best logit) / rms of the row: how near a tie a greedy pick was.
double top2_gap_over_rms(const float* row, int32_t n) {
  float a = -INFINITY, b = -INFINITY;
  double ss = 0;
  for (int32_t i = 0; i < n; ++i) {
    ss += double(row[i]) * row[i];
    if (row[i] > a) b = a, a = row[i];
    else if (row[i] > b) b = row[i];
  }
  const double rms = std::sqrt(ss / std::max<int32_t>(1, n));
  return rms > 0 ? (double(a) - b) / rms : 0.0;
}

void print_top5(const float* row, int64_t n_vocab, const Tokenizer& tok) {
  std::vector<int32_t> idx;
  std::vector<bool> taken(static_cast<size_t>(n_vocab), false);
  for (int k = 0; k < 5 && k < n_vocab; ++k) {
    int32_t best = -1;
    for (int64_t i = 0; i < n_vocab; ++i)
      if (!taken[static_cast<size_t>(i)] && (best < 0 || row[i] > row[best])) best = static_cast<int32_t>(i);
    taken[static_cast<size_t>(best)] = true;
    idx.push_back(best);
  }
  std::printf("top5:");
  for (int32_t i : idx) std::printf(" %d:%.6f", i, row[i]);
  std::printf("\n");
  for (size_t k = 0; k < idx.size(); ++k) {
    std::string piece = idx[k] < tok.n_tokens() ? tok.token_to_piece(idx[k], true) : std::string("?");
    for (char& c : piece)
      if (c == '\n') c = ' ';
    std::printf("  #%zu  id %-8d logit %10.5f  '%s'\n", k + 1, idx[k], row[idx[k]], piece.c_str());
  }
}

RegisterCommand reg("logits", [](CLI::App& app) {
  auto a = std::make_shared<LogitsArgs>();
  auto* sub = app.add_subcommand("logits", "Run a prompt and write its logits as float32 (parity checks)");
  sub->add_option("-m,--model", a->model, "GGUF model file")->required();
  auto* tok_opt = sub->add_option("--tokens", a->tokens, "prompt as token ids: 1,2,3");
  auto* p_opt = sub->add_option("-p,--prompt", a->prompt, "prompt as text (tokenized with the model's tokenizer)");
  tok_opt->excludes(p_opt);
  sub->add_option("-o,--output", a->output, "write the logits here (little-endian float32, n_vocab per row)");
  sub->add_flag("--all", a->all, "write every position's logits, not only the last");
  sub->add_option("--backend", a->backend, backend_help())->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--routes", a->routes, "write the experts chosen per layer and prompt token (JSON)");
  sub->add_option("--hidden", a->hidden,
                  "write each MoE layer's router input per prompt token (float32 [layer][token][n_embd]; "
                  "shape in FILE.json)");
  sub->add_option("--greedy", a->greedy, "then generate N tokens greedily and print them")->check(CLI::NonNegativeNumber);
  sub->add_flag("--print-tokens", a->print_tokens, "only print the prompt's token ids");
  sub->add_flag("--no-special", a->no_special, "-p: do not add BOS/EOS (the vocabulary's add_bos/add_eos)");
  sub->add_option("-t,--threads", a->threads, "CPU threads (0: all cores)");
  add_kv_type_option(*sub, &a->kv_type);
  add_vram_options(*sub, &a->vram, false);
  return [a]() -> int {
    if (a->tokens.empty() && a->prompt.empty()) throw Error("give the prompt with --tokens 1,2,3 or -p TEXT");
    if (a->greedy > kMaxCtx)
      throw Error("--greedy " + std::to_string(a->greedy) + ": at most " + std::to_string(kMaxCtx) + " tokens");
    check_threads_flag(a->threads);
    check_vram_options(a->vram);
    require_regular_file(a->model, "-m");
    auto model = LoadedModel::open(a->model);
    const ModelConfig& c = model->weights.cfg;
    const Tokenizer& tok = *model->tokenizer;
    const std::vector<int32_t> prompt = !a->tokens.empty() ? parse_token_list(a->tokens, c.n_vocab)
                                                           : tok.encode(a->prompt, !a->no_special, true);
    if (a->print_tokens) {
      std::printf("tokens: %s\n", join(prompt).c_str());
      return 0;
    }
    if (prompt.empty()) throw Error("the prompt is empty after tokenization");
    if (static_cast<int64_t>(prompt.size()) > kMaxCtx)
      throw Error("the prompt has " + std::to_string(prompt.size()) + " tokens; at most " + std::to_string(kMaxCtx));
    ThreadPool pool(a->threads, a->vram.spin_us);
    report_thread_shortfall(pool, false);
    const int64_t n = static_cast<int64_t>(prompt.size());
    BackendSetup bs;
    bs.requested = a->backend;
    bs.ctx = n + a->greedy + 1;
    bs.kv_type = a->kv_type;
    bs.vram = a->vram;
    const std::unique_ptr<Backend> be = make_backend(bs, model->weights, pool);
    KvCache kv = be->make_cache(n + a->greedy + 1, a->kv_type);
    RouteTable routes(c.n_layer);
    HiddenTable hidden(c.n_layer, c.n_embd);
    const bool want_routes = !a->routes.empty(), want_hidden = !a->hidden.empty();
    if (want_routes || want_hidden)
      be->set_route_hook(
          [&](const RouteEvent& ev) {
            if (want_routes) routes.record(ev);
            if (want_hidden) hidden.record(ev);
          },
          want_hidden);

    std::vector<float> logits;
    be->forward(kv, prompt, logits, a->all);
    be->set_route_hook(nullptr);  // the greedy continuation is not part of --routes / --hidden
    const int64_t rows = a->all ? n : 1;
    if (static_cast<int64_t>(logits.size()) != rows * c.n_vocab)
      throw Error("internal: the forward pass returned " + std::to_string(logits.size()) + " logits, expected " +
                  std::to_string(rows * c.n_vocab));
    check_finite_logits(logits, "prompt");  // corrupt weights: say so rather than write NaN for a parity check

    if (!a->output.empty()) {
      std::ofstream out(a->output, std::ios::binary);
      out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
      if (!out) throw Error(a->output + ": cannot write the logits");
    }
    if (!a->routes.empty()) {
      std::ofstream out(a->routes);
      out << routes.to_json(n).dump() << '\n';
      if (!out) throw Error(a->routes + ": cannot write the routes");
    }
    if (want_hidden) hidden.write(a->hidden, n);
    const float* last = logits.data() + (rows - 1) * c.n_vocab;
    std::printf("prompt: %lld tokens, vocab %lld, %s\n", static_cast<long long>(n), static_cast<long long>(c.n_vocab),
                c.describe().c_str());
    print_top5(last, c.n_vocab, tok);

    if (a->greedy > 0) {
      std::vector<int32_t> out;
      std::vector<double> margins;
      std::vector<float> step;
      const float* row = last;
      const auto V = static_cast<int32_t>(c.n_vocab);
      for (int i = 0; i < a->greedy; ++i) {
        const int32_t next = argmax(row, V);
        out.push_back(next);
        margins.push_back(top2_gap_over_rms(row, V));
        if (i + 1 == a->greedy) break;
        const int32_t one[1] = {next};
        be->forward(kv, one, step, false);
        row = step.data();
      }
      std::printf("greedy: %s\n", join(out).c_str());
      std::printf("margins:");  // per greedy pick: (best - second best logit) / rms of the logits
      for (size_t i = 0; i < margins.size(); ++i) std::printf("%s%.6f", i ? "," : " ", margins[i]);
      std::printf("\n");
    }
    return 0;
  };
});

}  // namespace
}  // namespace ms::cli
