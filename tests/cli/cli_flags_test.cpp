// The moestream binary's flags (run, bench, tokenize, logits, sim, trace,
// gen), as a user on a small machine without a GPU met them:
// - absurd values (negative, huge, unknown names) are errors that name the
//   flag, with exit status 1 -- never "internal error: std::bad_alloc", a
//   machine out of processes, or a silent run;
// - `--backend cuda` asked for and not usable is an error; the default
//   choice runs on the CPU;
// - `-m` must be a regular file: `-m ""`, a directory and a FIFO (which used
//   to block open() forever) are refused at once;
// - `-n 0` prints no (negative) decode rate;
// - `run --chat`, `tokenize --chat` and `serve` build the same prompt: the
//   GGUF's Jinja template through the server's renderer (a template that
//   differs from the built-in format it resembles tells them apart);
// - `run --help` does not claim the CPU is the default backend.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/loaded_model.h"
#include "engine/synthetic_model.h"
#include "format/gguf.h"
#include "server/chat.h"
#include "tokenizer/tokenizer.h"
#ifdef MOESTREAM_HAVE_CUDA
#include "cuda/device.h"
#endif

namespace ms {
namespace {

namespace fs = std::filesystem;

std::string tmp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("cli_flags_" + name + "_" + std::to_string(::getpid()))).string();
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs `moestream args` under a time limit (a hang fails the test instead of
// hanging it); returns the exit status (124: timed out), *output gets stdout
// and stderr together.
int moestream(const std::string& args, std::string* output, int timeout_s = 60) {
  const std::string log = tmp_path("log");
  const std::string cmd = "timeout " + std::to_string(timeout_s) + " \"" + MS_MOESTREAM_BIN + "\" " + args + " >\"" +
                          log + "\" 2>&1 </dev/null";
  const int status = std::system(cmd.c_str());
  *output = read_text(log);
  fs::remove(log);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// A copy of the GGUF at `from` with tokenizer.chat_template replaced.
void copy_with_chat_template(const std::string& from, const std::string& to, const std::string& tmpl) {
  const auto in = GgufFile::open(from);
  GgufWriter w(to);
  for (const auto& [key, value] : in->metadata()) w.set(key, value);
  w.set("tokenizer.chat_template", GgufValue::of_string(tmpl));
  for (const GgufTensorInfo& t : in->tensors()) w.add_tensor(t.name, t.type, t.shape);
  for (const GgufTensorInfo& t : in->tensors()) w.write_tensor_data(t.data, t.nbytes);
  w.finish();
}

// The markers of ChatML (so the built-in fallback would be ChatML), but not
// its text: a system line first and the role in capitals.
constexpr const char* kTemplate =
    "{{ '<|im_start|>system\\nYou are terse.<|im_end|>\\n' }}"
    "{% for m in messages %}{{ '<|im_start|>' + (m['role'] | upper) + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

class CliFlags : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new std::string(tmp_path("model") + ".gguf");
    chat_model_ = new std::string(tmp_path("chat_model") + ".gguf");
    ThreadPool pool(2);
    GenOptions g;
    g.arch = "qwen3moe";
    g.preset = "tiny";
    g.quant = "q8_0";
    generate_model(g, *model_, pool);
    copy_with_chat_template(*model_, *chat_model_, kTemplate);
  }
  static void TearDownTestSuite() {
    fs::remove(*model_);
    fs::remove(*chat_model_);
    delete model_;
    delete chat_model_;
  }
  static std::string m() { return "-m \"" + *model_ + "\" "; }
  static std::string* model_;
  static std::string* chat_model_;
};
std::string* CliFlags::model_ = nullptr;
std::string* CliFlags::chat_model_ = nullptr;

// Each: the command line, and the flag its error must name.
struct BadFlag {
  std::string args, names;
};

TEST_F(CliFlags, AbsurdValuesAreErrorsNamingTheFlag) {
  const int too_many_threads = 4 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) + 1;
  const std::vector<BadFlag> cases = {
      {"run " + m() + "-n 1 -t " + std::to_string(too_many_threads), "--threads"},
      {"run " + m() + "-n 1 -t -2", "--threads"},
      {"run " + m() + "-n 1 -b 100000000", "--batch"},
      {"run " + m() + "-n 1 -b -1", "--batch"},
      {"run " + m() + "-n 1 --ctx 100000000", "--ctx"},
      {"run " + m() + "-n 100000000", "-n"},
      {"run " + m() + "-n 1 --policy nope", "--policy"},
      {"run " + m() + "-n 1 --cost foo=bar", "--cost"},
      {"run " + m() + "-n 1 --cost pcie_gbps=-3", "--cost"},
      {"run " + m() + "-n 1 --prompt-tokens -3", "--prompt-tokens"},
      {"run " + m() + "-n 1 --bench --reps 0", "--reps"},
      {"run " + m() + "-n 1 --repeat-last-n 100000000", "--repeat-last-n"},
      {"bench " + m() + "-p -5 -n 1", "-p"},
      {"bench " + m() + "-p 1 -n 100000000", "-n"},
      {"bench " + m() + "-p 1 -n 1 -r 0", "-r"},
      {"bench " + m() + "-p 1 -n 1 -b 100000000", "-b"},
      {"bench " + m() + "-p 1 -n 1 --bandwidth -1", "--bandwidth"},
      {"bench " + m() + "-p 1 -n 1 --policy nope", "--policy"},
      {"logits " + m() + "--tokens 1,2 --greedy 100000000", "--greedy"},
      {"logits " + m() + "--tokens 1,2 -t -1", "--threads"},
      {"sim --trace /nonexistent --slots 4 --pin-fraction 2", "--pin-fraction"},
      {"sim --trace /nonexistent --slots 4 --pcie-gbps -5", "--pcie-gbps"},
      {"trace synth --layers 48 --k 8 --tokens 4000000000 -o /dev/null", "--tokens"},
      {"gen --layers -3 -o " + tmp_path("never.gguf"), "--layers"},
      {"gen --router-locality 1.5 -o " + tmp_path("never.gguf"), "--router-locality"},
      {"gen --router-locality 0.99 -o " + tmp_path("never.gguf"), "at most"},
      {"gen --experts-used 9 -o " + tmp_path("never.gguf"), "--experts"},
      {"trace synth --locality 0.45 --locality-model markov -o /dev/null", "locality model"},
  };
  for (const BadFlag& c : cases) {
    std::string out;
    const int rc = moestream(c.args, &out);
    EXPECT_EQ(rc, 1) << c.args << "\n" << out;
    EXPECT_NE(out.find(c.names), std::string::npos) << c.args << ": the error should name " << c.names << "\n" << out;
    EXPECT_EQ(out.find("internal error"), std::string::npos) << c.args << "\n" << out;
  }
  EXPECT_FALSE(fs::exists(tmp_path("never.gguf")));
}

TEST_F(CliFlags, ExplicitCudaWithoutADeviceIsAnError) {
  bool device = false;
#ifdef MOESTREAM_HAVE_CUDA
  device = cuda::device_count() > 0;
#endif
  std::string out;
  if (!device) {
    const int rc = moestream("run " + m() + "-n 1 -q --backend cuda", &out);
    EXPECT_EQ(rc, 1) << out;
    EXPECT_NE(out.find("--backend cuda"), std::string::npos) << out;
  }
  // The default choice runs wherever it can; on the CPU it says so unless -q.
  ASSERT_EQ(moestream("run " + m() + "-n 2", &out), 0) << out;
  if (!device) EXPECT_NE(out.find("cpu"), std::string::npos) << out;
  if (!device) return;  // the explicit request's error was the check here
  EXPECT_EQ(moestream("run " + m() + "-n 2 -q --backend cuda", &out), 0) << out;
}

TEST_F(CliFlags, ModelMustBeARegularFile) {
  std::string out;
  EXPECT_EQ(moestream("run -m \"\" -n 1", &out), 1) << out;
  EXPECT_NE(out.find("-m"), std::string::npos) << out;
  EXPECT_EQ(moestream("bench -m \"\" -p 1 -n 1", &out), 1) << out;
  EXPECT_EQ(moestream("tokenize -m \"\" hello", &out), 1) << out;
  // serve would otherwise start listening (and this test would hang): bounded by the helper's timeout.
  EXPECT_EQ(moestream("serve -m \"\" --port 0", &out, 20), 1) << out;
  EXPECT_NE(out.find("-m"), std::string::npos) << out;

  const std::string dir = tmp_path("dir");
  fs::create_directory(dir);
  EXPECT_EQ(moestream("run -m \"" + dir + "\" -n 1", &out), 1) << out;
  EXPECT_NE(out.find("directory"), std::string::npos) << out;
  fs::remove(dir);

  // Nothing ever writes to the FIFO: opening it to read would wait forever.
  const std::string fifo = tmp_path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& cmd : {"run -m \"" + fifo + "\" -n 1", "tokenize -m \"" + fifo + "\" hello",
                                 "logits -m \"" + fifo + "\" --tokens 1", "inspect \"" + fifo + "\""}) {
    const int rc = moestream(cmd, &out, 20);
    EXPECT_EQ(rc, 1) << cmd << (rc == 124 ? ": hung" : "") << "\n" << out;
    EXPECT_NE(out.find("FIFO"), std::string::npos) << cmd << "\n" << out;
  }
  fs::remove(fifo);
}

TEST_F(CliFlags, NothingGeneratedPrintsNoDecodeRate) {
  std::string out;
  ASSERT_EQ(moestream("run " + m() + "-n 0 --backend cpu", &out), 0) << out;
  const size_t decode = out.find("decode 0 tokens");
  ASSERT_NE(decode, std::string::npos) << out;
  const std::string rest = out.substr(decode, out.find('|', decode) - decode);
  EXPECT_NE(rest.find("n/a"), std::string::npos) << rest;
  EXPECT_EQ(rest.find("-"), std::string::npos) << "a negative rate: " << rest;
}

TEST_F(CliFlags, RunTokenizeAndServeBuildTheSameChatPrompt) {
  const std::string text = "Name three rivers.";
  // What `serve` does with one user message (server::ChatRenderer, then the
  // tokenizer as the HTTP handler calls it).
  std::vector<int32_t> want;
  {
    auto model = LoadedModel::open(*chat_model_);
    const server::ChatRenderer chat(*model->tokenizer);
    ASSERT_EQ(chat.description(), "the model's Jinja template");
    nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
    msgs.push_back({{"role", "user"}, {"content", text}});
    const std::string prompt = chat.render(msgs, true);
    ASSERT_NE(prompt.find("You are terse."), std::string::npos) << prompt;
    want = model->tokenizer->encode(prompt, true, true);
  }
  std::string want_text;
  for (int32_t id : want) want_text += (want_text.empty() ? "" : " ") + std::to_string(id);

  std::string out;
  ASSERT_EQ(moestream("tokenize -m \"" + *chat_model_ + "\" --chat \"" + text + "\"", &out), 0) << out;
  EXPECT_EQ(out, want_text + "\n");

  ASSERT_EQ(moestream("run -m \"" + *chat_model_ + "\" --chat -p \"" + text + "\" -n 0 --backend cpu", &out), 0) << out;
  EXPECT_NE(out.find("prompt " + std::to_string(want.size()) + " tokens"), std::string::npos)
      << "want " << want.size() << " prompt tokens\n" << out;
}

TEST_F(CliFlags, RunHelpDoesNotClaimTheCpuIsTheDefault) {
  std::string out;
  ASSERT_EQ(moestream("run --help", &out), 0) << out;
  EXPECT_EQ(out.find("from a prompt on the CPU"), std::string::npos) << out;
  EXPECT_NE(out.find("--backend"), std::string::npos) << out;
}

}  // namespace
}  // namespace ms
