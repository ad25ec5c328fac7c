// The Jinja renderer against Python Jinja2 (Debian's python3-jinja2, set up
// as transformers renders chat templates: tools/chat_templates/render.py) on
// real chat templates: llama.cpp's models/templates/*.jinja (fetched by
// scripts/fetch_chat_templates.sh) and Mixtral 8x7B's and gpt-oss's (tests/tokenizer/templates).
// For each template and conversation: where Jinja2 renders, the output must be
// byte-identical; where Jinja2 raises (raise_exception), so must we.
// Qwen3, Qwen3.5, QwQ, Qwen2.5, Qwen3-Coder, Mistral Nemo / Small, Mixtral
// and gpt-oss must render every conversation exactly; for the other templates the
// differences are counted and printed (known: markupsafe's escaping of
// "x"|safe + str, dicts with integer keys, str.format), not failed.
// Skips when python3 with jinja2 or the fetched templates are missing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "template_test_util.h"
#include "tokenizer/jinja.h"

namespace ms {
namespace {

namespace fs = std::filesystem;
using Json = jinja::Json;

using test::read_file;

// A python3 that can import jinja2 (Debian's /usr/bin/python3 first: a
// python3 earlier on PATH may not see Debian's packages).
std::string python_with_jinja2() {
  for (const char* py : {"/usr/bin/python3", "python3"}) {
    const std::string cmd = std::string(py) + " -c 'import jinja2' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return "";
}

Json msg(const char* role, const std::string& content) { return Json{{"role", role}, {"content", content}}; }

Json contexts() {
  Json tools = Json::array({Json::parse(R"({"type": "function", "function": {"name": "get_weather",
      "description": "Weather in a city", "parameters": {"type": "object", "properties":
      {"city": {"type": "string", "description": "the city"}}, "required": ["city"]}}})")});
  Json call = Json::parse(R"({"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]})");
  std::vector<Json> convs = {
      Json::array({msg("user", "Hello!")}),
      Json::array({msg("system", "You are a helpful assistant."), msg("user", "What is 2+2?")}),
      Json::array({msg("system", "Be brief."), msg("user", "Hi"), msg("assistant", "Hello! How can I help?"),
                   msg("user", "Tell me a joke.")}),
      Json::array({msg("user", "Why?"), msg("assistant", "<think>\nLet me think.\n</think>\n\nBecause."),
                   msg("user", "And then?")}),
      Json::array({msg("user", "Quotes \" ' and \\ backslash, tabs\t, unicode: h\u00e9llo \u4f60\u597d \U0001F600\nnew line")}),
      Json::array({msg("user", "  padded  "), msg("assistant", "  answer with spaces  "), msg("user", "x")}),
      Json::array({msg("assistant", "I speak first."), msg("user", "Then me.")}),  // wrong order for some
      Json::array({msg("user", "Weather in Paris?"), call, msg("tool", "{\"temp\": 21}")}),
  };
  Json out = Json::array();
  for (size_t i = 0; i < convs.size(); ++i) {
    for (int gen = 0; gen < 2; ++gen) {
      Json c = {{"messages", convs[i]}, {"add_generation_prompt", gen == 1}, {"bos_token", "<s>"},
                {"eos_token", "</s>"}, {"date_string", "26 Jul 2024"}};
      out.push_back(c);
    }
    Json think_off = out.back();
    think_off["enable_thinking"] = false;
    out.push_back(think_off);
    Json think_on = out.back();
    think_on["enable_thinking"] = true;
    out.push_back(think_on);
  }
  // With tools offered.
  Json with_tools = {{"messages", convs[7]}, {"add_generation_prompt", true}, {"bos_token", "<s>"},
                     {"eos_token", "</s>"}, {"tools", tools}, {"date_string", "26 Jul 2024"}};
  out.push_back(with_tools);
  with_tools["messages"] = convs[1];
  out.push_back(with_tools);
  return out;
}

struct Tmpl {
  std::string name, text;
};

std::vector<Tmpl> templates() {
  std::vector<Tmpl> out;
  std::vector<fs::path> dirs = {fs::path(MS_SOURCE_DIR) / "tools" / "chat_templates" / "out",
                                fs::path(MS_SOURCE_DIR) / "tests" / "tokenizer" / "templates"};
  for (const fs::path& d : dirs) {
    if (!fs::is_directory(d)) continue;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(d))
      if (e.path().extension() == ".jinja") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      // A template kept here and also fetched (gpt-oss's) is run once.
      const std::string name = f.stem().string();
      if (std::none_of(out.begin(), out.end(), [&](const Tmpl& t) { return t.name == name; }))
        out.push_back({name, read_file(f)});
    }
  }
  return out;
}

TEST(JinjaParity, RealTemplatesRenderAsJinja2Does) {
  const std::string py = python_with_jinja2();
  if (py.empty()) GTEST_SKIP() << "python3 with jinja2 not found (Debian: python3-jinja2)";
  const std::vector<Tmpl> tmpls = templates();
  bool fetched = false;
  for (const Tmpl& t : tmpls) fetched = fetched || t.name == "Qwen-Qwen3-0.6B";
  if (!fetched) GTEST_SKIP() << "no fetched templates: run scripts/fetch_chat_templates.sh (needs npm and the network)";

  const Json ctxs = contexts();
  std::tm day{};  // render.py's strftime_now: 2024-07-26 12:00 local time
  day.tm_year = 124, day.tm_mon = 6, day.tm_mday = 26, day.tm_hour = 12, day.tm_isdst = -1;
  const std::time_t fixed_now = std::mktime(&day);
  Json req = {{"templates", Json::array()}, {"contexts", ctxs}};
  for (const Tmpl& t : tmpls) req["templates"].push_back(t.text);
  const fs::path in = fs::temp_directory_path() / ("ms_jinja_req_" + std::to_string(::getpid()) + ".json");
  const fs::path outp = fs::temp_directory_path() / ("ms_jinja_out_" + std::to_string(::getpid()) + ".json");
  std::ofstream(in) << req.dump();
  const std::string cmd = py + " " + (fs::path(MS_SOURCE_DIR) / "tools" / "chat_templates" / "render.py").string() +
                          " < " + in.string() + " > " + outp.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const Json ref = Json::parse(read_file(outp));
  fs::remove(in);
  fs::remove(outp);
  ASSERT_EQ(ref.size(), tmpls.size());

  const std::set<std::string> required = {"Qwen-Qwen3-0.6B", "Qwen3.5-4B", "Qwen-QwQ-32B",
                                          "Qwen-Qwen2.5-7B-Instruct", "Qwen3-Coder",
                                          "mistralai-Mistral-Nemo-Instruct-2407",
                                          "Mistral-Small-3.2-24B-Instruct-2506", "Mixtral-8x7B-Instruct-v0.1",
                                          "openai-gpt-oss-120b"};
  int same = 0, both_raise = 0, unsupported_templates = 0;
  std::vector<std::string> unsupported;
  for (size_t t = 0; t < tmpls.size(); ++t) {
    const bool must = required.count(tmpls[t].name) > 0;
    std::unique_ptr<jinja::Template> tmpl;
    try {
      tmpl = std::make_unique<jinja::Template>(tmpls[t].text);
    } catch (const Error& e) {
      EXPECT_FALSE(must) << tmpls[t].name << ": " << e.what();
      ++unsupported_templates;
      unsupported.push_back(tmpls[t].name + " (" + e.what() + ")");
      continue;
    }
    bool refused = false;
    for (size_t c = 0; c < ctxs.size(); ++c) {
      const Json& r = ref[t][c];
      std::string got, err;
      bool raised = false;
      try {
        got = tmpl->render(ctxs[c], fixed_now);
      } catch (const jinja::TemplateRaised& e) {
        raised = true;
        err = e.what();
      } catch (const Error& e) {
        err = e.what();
      }
      if (!must) {
        const bool ok = r.contains("text") ? err.empty() && got == r["text"].get<std::string>() : !err.empty();
        if (!ok && !refused) {
          unsupported.push_back(tmpls[t].name + " (" + (err.empty() ? "renders differently" : err) + ")");
          refused = true;
        }
        if (ok && r.contains("text")) ++same;
        if (ok && raised) ++both_raise;
        continue;
      }
      if (r.contains("text")) {
        if (!err.empty()) {
          EXPECT_FALSE(must) << tmpls[t].name << " context " << c << ": " << err;
          if (!refused) unsupported.push_back(tmpls[t].name + " (" + err + ")");
          refused = true;
          continue;
        }
        EXPECT_EQ(got, r["text"].get<std::string>()) << tmpls[t].name << " context " << c << ": " << ctxs[c].dump();
        ++same;
      } else {
        // Jinja2 raised: we must not render something instead.
        EXPECT_FALSE(err.empty()) << tmpls[t].name << " context " << c << ": Jinja2 raised "
                                  << r["error"].get<std::string>() << " but we rendered:\n" << got;
        if (raised) ++both_raise;
      }
    }
    if (refused) ++unsupported_templates;
  }
  std::printf("jinja parity: %zu templates x %zu conversations: %d identical, %d raised by both; %d templates "
              "(partly) unsupported or different\n",
              tmpls.size(), ctxs.size(), same, both_raise, unsupported_templates);
  for (const std::string& u : unsupported) std::printf("  unsupported: %s\n", u.substr(0, 200).c_str());
}

}  // namespace
}  // namespace ms
