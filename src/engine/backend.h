// What every forward pass (CPU, CUDA) offers the generation loop, the CLI and
// the benchmark: run tokens against a sequence's cache and return logits.
//
// Semantics shared by all backends: forward() runs `tokens` at positions
// kv.n_past() .. and appends them to the cache; logits receives n_vocab
// floats for the last token, or for every token ([n_tokens][n_vocab]) with
// all_logits. It throws ms::Error "context full (N tokens)" before computing
// anything if they do not fit, and for a token id outside the vocabulary.
//
// Several sequences share one step through forward_seqs (the server's
// continuous batching: decode steps of one token and prompt chunks mixed):
// each entry is computed as forward() would compute it alone, while the
// projections and the experts run once over all of the step's tokens.
//
// Every backend also reports the router's choices through one route hook
// (set_route_hook): routing traces (`--record-routes`, RouteRecorder),
// `logits --routes` and routing statistics hang on it, whatever the device.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/kv_cache.h"
#include "experts/telemetry.h"
#include "model/weights.h"

namespace ms {

// One MoE layer's routing for one forward batch, in host memory that is valid
// during the hook call only.
struct RouteEvent {
  int layer = 0;
  int n_tokens = 0;
  int k = 0;                       // experts per token
  const int32_t* ids = nullptr;    // [n_tokens][k] expert ids, in the router's order
  const float* weights = nullptr;  // [n_tokens][k] gate weights (after any renormalisation)
  // [n_tokens][n_embd] the layer's FFN input (what the router saw): set
  // exactly when the hook was installed with want_hidden, null otherwise
  // (a device backend copies it back only when asked).
  const float* hidden = nullptr;
};
using RouteHook = std::function<void(const RouteEvent&)>;

// One sequence's share of a multi-sequence step (Backend::forward_seqs).
struct SeqTokens {
  KvCache* kv = nullptr;            // its cache; each entry of a step has its own
  std::span<const int32_t> tokens;  // appended at kv->n_past() ..; at least one
  bool want_logits = true;          // the logits of its last token are wanted
  // The logits of every one of its tokens ([n][n_vocab], in order), as a
  // verify of draft tokens needs them (implies want_logits).
  bool all_logits = false;
  // A token tree (speculative verification of a draft tree; docs/
  // speculative.md, "Draft trees"): empty, the tokens form a chain as usual;
  // else one entry per token, the index within this entry of its parent
  // (< its own) or -1 for a child of the cached prefix. Token i is stored
  // at slot kv->n_past() + i, sits at position kv->n_past() + depth(i)
  // (depth: the number of its ancestors in the entry) and attends to the
  // cached prefix, its ancestors and itself only. At most
  // Backend::max_token_tree() tokens; backends without trees refuse it.
  // After such a pass the cache holds every token at its slot: keep one
  // root-to-node path with Backend::keep_tree_path.
  std::span<const int32_t> parents = {};
  // Logit rows this entry adds to forward_seqs' output.
  size_t logit_rows() const { return all_logits ? tokens.size() : (want_logits ? 1 : 0); }
};

// The final hidden state of a forward's tokens: for each token, the vector
// the output head reads (the last layer's output after the output norm),
// whether or not its logits were asked for. What an MTP drafter
// (engine/speculative_mtp.h) is fed. Host memory valid during the call only.
struct HiddenEvent {
  const KvCache* kv = nullptr;  // the sequence the tokens were appended to
  int64_t pos0 = 0;             // the position of the first of them
  int n = 0;
  const float* rows = nullptr;  // [n][n_embd]
  // With Backend::set_hidden_layers: [n][n_layer_rows][n_embd], the residual
  // stream entering each layer asked for (in the order asked), before its
  // norm -- what a DFlash drafter (engine/speculative_dflash.h) reads.
  int n_layer_rows = 0;
  const float* layer_rows = nullptr;
  // A token tree's forward (SeqTokens::parents): the rows are the tree's
  // nodes in slot order, not consecutive positions; parents[i] (-1: a child
  // of the prefix) and tokens[i] say which. Null for a chain (then tokens is
  // null too).
  const int32_t* parents = nullptr;
  const int32_t* tokens = nullptr;
};
using HiddenHook = std::function<void(const HiddenEvent&)>;

// forward_seqs' checks, for backends that override it (throws ms::Error as
// forward_seqs documents). max_tree: the most tokens an entry with an
// ancestor set (SeqTokens::parents) may have; 0 refuses such entries (a
// backend without token trees), naming the backend `backend` ("": "this").
void check_seq_tokens(std::span<const SeqTokens> seqs, int64_t n_vocab, int max_tree = 0,
                      const std::string& backend = "");
// An ancestor set's own checks (one entry per token, each parent -1 or an
// earlier token's index); throws ms::Error naming `what` and the first bad
// index. The depths (ancestors per token) into `depth` when not null.
void check_token_tree(std::span<const int32_t> parents, size_t n_tokens, const std::string& what,
                      std::vector<int32_t>* depth = nullptr);
// The error for a model without an MTP block.
extern const char* const kNoMtpBlock;
// forward_mtp's checks (throws ms::Error as forward_mtp documents).
void check_mtp_inputs(const ModelWeights& w, const KvCache& kv, std::span<const float> hidden,
                      std::span<const int32_t> tokens);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual void forward(KvCache& kv, std::span<const int32_t> tokens, std::vector<float>& logits,
                       bool all_logits = false) = 0;
  // A cache for one sequence of up to ctx tokens. (Where the keys and values
  // live is the backend's business: the CUDA backend keeps them on the device
  // and the KvCache only counts positions.) KvType::F32 keeps K/V unrounded
  // for parity checks; a backend that cannot hold them throws ms::Error.
  // Overrides repeat the default (defaults bind to the static type).
  virtual KvCache make_cache(int64_t ctx, KvType type = KvType::F16) const = 0;
  // Paged KV (docs/sequence_state.md, "Pages"): whether this backend's caches
  // can take their keys and values from one pool of pages shared by all
  // sequences (make_kv_pages, make_paged_cache), so that a server's --ctx is
  // the tokens all of its slots share. CPU: yes. CUDA: not yet -- its kernels
  // read a device sequence state's K/V as one contiguous region, so each
  // cache reserves its whole context (make_cache) until they read through
  // block tables. Overrides repeat the default.
  virtual bool paged_kv() const { return false; }
  // A pool of room for total_tokens positions in pages of page_tokens, for
  // caches of this backend. Throws ms::Error when !paged_kv().
  virtual std::shared_ptr<KvPages> make_kv_pages(int64_t total_tokens, KvType type, int32_t page_tokens) const;
  // A cache of up to ctx tokens whose K/V take pages of `pages` (made by this
  // backend's make_kv_pages with the same type) as it grows; a fork of two
  // such caches shares the prefix's pages. Throws ms::Error when !paged_kv().
  virtual KvCache make_paged_cache(std::shared_ptr<KvPages> pages, int64_t ctx, KvType type) const;
  virtual const ModelConfig& config() const = 0;
  // Several sequences in one step: each entry's tokens are appended to its
  // own cache at its own positions. logits receives n_vocab floats for each
  // entry with want_logits (for each of its tokens with all_logits), in entry
  // order. Every entry gets (within the
  // backend's batching bounds) what forward() gives it alone. Throws ms::Error
  // before computing anything when an entry does not fit its cache, holds a
  // token outside the vocabulary, has no tokens or shares a cache with
  // another. This default runs the entries one after another through
  // forward(); backends that batch them override it.
  virtual void forward_seqs(std::span<const SeqTokens> seqs, std::vector<float>& logits);
  // How many caches from make_cache may be live at once, each with its own
  // state, so that forward_seqs can mix them (what `--parallel N` may ask
  // for). 0: no limit but memory. Overrides repeat the default.
  virtual int max_sequences() const { return 0; }
  // A fork (DESIGN.md: sequence state): dst becomes a copy of src's
  // sequence -- its positions, K/V, recurrent state and checkpoints -- so
  // both go on from the same prefix (n > 1 choices after one prefill, draft
  // trees). Both made by this backend's make_cache with the same context and
  // type; throws ms::Error otherwise. The default copies host memory
  // (KvCache::copy_from); a backend that keeps sequence state elsewhere
  // overrides it. (Rollback is KvCache::truncate.)
  virtual void fork(const KvCache& src, KvCache& dst) { dst.copy_from(src); }
  // "cpu", "cuda"
  virtual std::string name() const = 0;

  // ---- token trees (SeqTokens::parents; docs/speculative.md, "Draft trees").
  // The most tokens of one tree entry this backend runs for caches like kv
  // (0: no trees: forward_seqs refuses ancestor sets and speculative
  // decoding verifies chains). Default 0; the CPU backend runs them (a
  // hybrid's recurrent layers with a state per node).
  virtual int max_token_tree(const KvCache& kv) const {
    (void)kv;
    return 0;
  }
  // After a tree entry of kv was run from position base (its slots base ..
  // kv.n_past()-1): keeps the path of slots base + nodes[0], base +
  // nodes[1], .. (nodes strictly increasing, nodes[0] = 0: the root, each
  // the next one's parent) at positions base, base + 1, .. and forgets every
  // other slot: kv then holds base + nodes.size() positions, as if the path
  // had been decoded as a chain. Throws ms::Error for a path that does not
  // fit (and, by default, always: a backend without trees).
  virtual void keep_tree_path(KvCache& kv, int64_t base, std::span<const int32_t> nodes);
  // Where routed experts were computed so far (hybrid false: all in one place).
  virtual ExpertTelemetry expert_telemetry() const { return {}; }

  // Installs `hook`, called once per MoE layer and forward batch with the
  // router's choice (replacing any earlier hook; null removes it). It runs on
  // the thread that called forward(), before the layer's experts are
  // computed; an exception from it propagates out of forward(). Results do
  // not change, but a device backend pays for a hook: it copies the routes
  // back after every router (and the FFN input with want_hidden), so it may
  // run slower while one is set. Overrides repeat the default.
  virtual void set_route_hook(RouteHook hook, bool want_hidden = false) = 0;

  // ---- a speculative verify's experts (issue #42; docs/speculative.md,
  // "Experts of a verify"): drafts that are rejected must not teach an
  // expert cache's policy. Defaults: nothing (a backend without an expert
  // cache, as the CPU's).
  // The next forward of kv's sequence verifies drafts: its last n_drafts
  // tokens are drafts (the token before them is the one fed). A backend with
  // an expert cache counts only the fed token's experts in its policy's
  // statistics (it still computes every token's).
  virtual void mark_drafts(const KvCache& kv, int n_drafts) {
    (void)kv;
    (void)n_drafts;
  }
  // That verify was sampled: its first `accepted` drafts were kept (their
  // routes now count); the others' routes never do.
  virtual void confirm_drafts(const KvCache& kv, int accepted) {
    (void)kv;
    (void)accepted;
  }

  // ---- multi-token prediction (the MTP block of Qwen3.5/3.6 files;
  // docs/speculative.md, "The MTP drafter"). Backends without it keep these
  // defaults: supports_mtp() false, the others throw ms::Error saying so.
  virtual bool supports_mtp() const { return false; }
  // Installs `hook`, called after each forward batch (forward, forward_seqs)
  // once per sequence in it with the hidden states of its tokens (HiddenEvent),
  // on the calling thread; null removes it. A device backend copies them back
  // only while one is set.
  virtual void set_hidden_hook(HiddenHook hook);
  // Which layers' inputs the hidden hook also carries (HiddenEvent::
  // layer_rows; ids in 0 .. n_layer-1; empty: none). The default throws
  // ms::Error for a non-empty list: a backend that cannot hand them out.
  virtual void set_hidden_layers(std::vector<int> layers);
  // A cache for the MTP block's own attention (one layer per MTP block),
  // positions as the sequence's: entry p holds the pair (hidden of token p,
  // token p + 1).
  virtual KvCache make_mtp_cache(int64_t ctx, KvType type = KvType::F16) const;
  // Runs the first MTP block over n pairs (hidden[i] of n_embd floats, the
  // target's or the block's own output; tokens[i], the token after the one
  // hidden[i] belongs to) at positions kv.n_past() .. and appends them to kv.
  // logits: n_vocab floats for the last pair (the prediction of the token
  // after tokens[n-1]); hidden_out: that pair's output state (after the
  // block's head norm, as fed back for the next drafted token). Throws
  // ms::Error for a model without an MTP block, sizes that do not match, a
  // token outside the vocabulary or a full cache, before computing anything.
  virtual void forward_mtp(KvCache& kv, std::span<const float> hidden, std::span<const int32_t> tokens,
                           std::vector<float>& logits, std::vector<float>& hidden_out);
};

}  // namespace ms
