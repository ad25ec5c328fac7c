// `moestream logits --routes --hidden` (the binary, run as tools/hf_parity.py
// runs it), CPU backend: the router inputs it writes are, row for row, what
// the CPU backend's route hook reports for the same model and prompt (both
// MoE architectures: qwen35moe mixes Gated DeltaNet and attention layers);
// the JSON sidecar describes the file; the routes written beside them are the
// hook's; the greedy continuation adds nothing; an unwritable path is an error
// that names it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/loaded_model.h"
#include "engine/synthetic_model.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

std::string tmp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("logits_cli_" + name + "_" + std::to_string(::getpid()))).string();
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs the moestream binary with `args`; returns its exit status, *output
// gets stdout and stderr together.
int moestream(const std::string& args, std::string* output) {
  const std::string log = tmp_path("log");
  const std::string cmd = std::string("\"") + MS_MOESTREAM_BIN + "\" " + args + " >\"" + log + "\" 2>&1";
  const int rc = std::system(cmd.c_str());
  *output = read_text(log);
  fs::remove(log);
  return rc;
}

struct HookCapture {
  std::vector<std::vector<float>> hidden;            // [layer][token * n_embd]
  std::vector<std::vector<std::vector<int>>> routes;  // [layer][token][k], ascending
};

class LogitsHidden : public ::testing::TestWithParam<const char*> {};

TEST_P(LogitsHidden, RouterInputsMatchTheCpuRouteHook) {
  const std::string arch = GetParam();
  ThreadPool pool(2);
  const std::string model_path = tmp_path(arch) + ".gguf";
  GenOptions g;
  g.arch = arch;
  g.preset = "tiny";
  g.quant = "q8_0";
  g.router_skew = 0.5;
  generate_model(g, model_path, pool);
  const std::vector<int32_t> prompt = {1, 17, 42, 5, 99, 7, 300, 12, 64};
  std::string tokens;
  for (int32_t t : prompt) tokens += (tokens.empty() ? "" : ",") + std::to_string(t);

  // In process: the CPU backend's route hook, as the CLI installs it.
  HookCapture want;
  int64_t n_embd = 0;
  {
    auto model = LoadedModel::open(model_path);
    const ModelConfig& c = model->weights.cfg;
    ASSERT_TRUE(c.is_moe());
    n_embd = c.n_embd;
    want.hidden.resize(static_cast<size_t>(c.n_layer));
    want.routes.resize(static_cast<size_t>(c.n_layer));
    CpuBackend be(model->weights, pool);
    KvCache kv = be.make_cache(static_cast<int64_t>(prompt.size()) + 1);
    be.set_route_hook(
        [&](const RouteEvent& ev) {
          ASSERT_NE(ev.hidden, nullptr);
          auto& h = want.hidden[static_cast<size_t>(ev.layer)];
          h.insert(h.end(), ev.hidden, ev.hidden + static_cast<int64_t>(ev.n_tokens) * c.n_embd);
          for (int t = 0; t < ev.n_tokens; ++t) {
            std::vector<int> ids(ev.ids + static_cast<int64_t>(t) * ev.k, ev.ids + static_cast<int64_t>(t + 1) * ev.k);
            std::sort(ids.begin(), ids.end());
            want.routes[static_cast<size_t>(ev.layer)].push_back(ids);
          }
        },
        true);
    std::vector<float> logits;
    be.forward(kv, prompt, logits);
  }
  std::vector<int> want_layers;
  for (size_t l = 0; l < want.hidden.size(); ++l)
    if (!want.hidden[l].empty()) want_layers.push_back(static_cast<int>(l));
  ASSERT_FALSE(want_layers.empty());

  // The binary, with --greedy: the continuation must not add rows.
  const std::string hidden_path = tmp_path("hidden") + ".f32", routes_path = tmp_path("routes") + ".json";
  std::string out;
  const std::string args = "logits -m \"" + model_path + "\" --tokens " + tokens +
                           " --backend cpu -t 2 --greedy 3 --routes \"" + routes_path + "\" --hidden \"" +
                           hidden_path + "\"";
  ASSERT_EQ(moestream(args, &out), 0) << out;
  const auto meta = nlohmann::json::parse(read_text(hidden_path + ".json"));
  EXPECT_EQ(meta.at("dtype"), "float32");
  EXPECT_EQ(meta.at("order"), "layer,token,embd");
  EXPECT_EQ(meta.at("n_tokens").get<int64_t>(), static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(meta.at("n_embd").get<int64_t>(), n_embd);
  EXPECT_EQ(meta.at("n_layer_moe").get<size_t>(), want_layers.size());
  EXPECT_EQ(meta.at("layers").get<std::vector<int>>(), want_layers);
  const size_t per_layer = prompt.size() * static_cast<size_t>(n_embd);
  ASSERT_EQ(fs::file_size(hidden_path), want_layers.size() * per_layer * sizeof(float));

  std::vector<float> got(want_layers.size() * per_layer);
  {
    std::ifstream f(hidden_path, std::ios::binary);
    f.read(reinterpret_cast<char*>(got.data()), static_cast<std::streamsize>(got.size() * sizeof(float)));
    ASSERT_TRUE(f);
  }
  // Row by row: the same model, prompt and thread count give the same
  // arithmetic; a tolerance far below any row's size only forgives a
  // reordered reduction, not a swapped token or layer.
  for (size_t li = 0; li < want_layers.size(); ++li) {
    const std::vector<float>& w = want.hidden[static_cast<size_t>(want_layers[li])];
    ASSERT_EQ(w.size(), per_layer);
    for (size_t t = 0; t < prompt.size(); ++t) {
      double diff = 0, norm = 0;
      for (int64_t i = 0; i < n_embd; ++i) {
        const float a = got[li * per_layer + t * static_cast<size_t>(n_embd) + static_cast<size_t>(i)];
        const float b = w[t * static_cast<size_t>(n_embd) + static_cast<size_t>(i)];
        ASSERT_TRUE(std::isfinite(a)) << "layer " << want_layers[li] << " token " << t;
        diff += double(a - b) * (a - b);
        norm += double(b) * b;
      }
      ASSERT_GT(norm, 0.0) << "layer " << want_layers[li] << " token " << t << ": an all-zero row";
      EXPECT_LE(std::sqrt(diff / norm), 1e-6) << "layer " << want_layers[li] << " token " << t;
    }
  }
  // Consecutive tokens differ (the rows are not one token repeated).
  EXPECT_NE(std::vector<float>(got.begin(), got.begin() + n_embd),
            std::vector<float>(got.begin() + n_embd, got.begin() + 2 * n_embd));

  // --routes from the same hook.
  const auto routes = nlohmann::json::parse(read_text(routes_path));
  EXPECT_EQ(routes.at("n_layer").get<size_t>(), want_layers.size());
  const auto& experts = routes.at("experts");
  ASSERT_EQ(experts.size(), want_layers.size());
  for (size_t li = 0; li < want_layers.size(); ++li)
    EXPECT_EQ(experts[li].get<std::vector<std::vector<int>>>(), want.routes[static_cast<size_t>(want_layers[li])])
        << "layer " << want_layers[li];

  // An unwritable path: a non-zero exit and an error naming the file.
  const std::string bad = (fs::path(tmp_path("no_such_dir")) / "h.f32").string();
  EXPECT_NE(moestream("logits -m \"" + model_path + "\" --tokens 1,2,3 --backend cpu -t 2 --hidden \"" + bad + "\"",
                      &out),
            0);
  EXPECT_NE(out.find(bad + ": cannot write the hidden states"), std::string::npos) << out;

  fs::remove(hidden_path);
  fs::remove(hidden_path + ".json");
  fs::remove(routes_path);
  fs::remove(model_path);
}

INSTANTIATE_TEST_SUITE_P(Archs, LogitsHidden, ::testing::Values("qwen3moe", "qwen35moe"));

}  // namespace
}  // namespace ms
