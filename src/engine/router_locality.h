// Temporal locality for the routers of synthetic models (`moestream gen
// --router-locality P`): the fraction P of a decode token's experts that the
// previous token chose too, measured by running the model.
//
// Real routers repeat the recent past because the hidden state carries the
// context. A random model's hidden state is mostly the current token's
// embedding, so its routers pick independently token to token. gen builds the
// context in: layer 0 gets a "context head" whose attention is a recency
// window and whose output lands in residual channels of their own; every
// router reads those channels, so its logits are
//
//   logit_e(t) = bias_e + sqrt(rho) * c_e(t) + sqrt(1 - rho) * n_e(t)
//
// with c_e(t) a projection of a moving average of the last tens of tokens
// (slowly varying) and n_e(t) a projection of the current token (fresh each
// token). rho is chosen so that the top-k of consecutive tokens share P of
// their experts. The window is wide (tens of tokens), so a token's experts
// were mostly used within the last few tokens even when P is moderate, as
// published measurements of real routers report (docs/traces.md has both).
//
// The window: the head's q and k read only the constant channel 0 (so they
// are the same vector for every token) on a band of RoPE dimensions; the
// score of a key d tokens back is then sum_i a_i cos(theta_i d), which falls
// off with d over 1/theta of the band (q/k norms fix the amplitude sum a_i).
// Its value rows read the token channels (below) through an orthogonal
// matrix, so the average is isotropic and every expert gets the same share
// of it; token pairs (2j, 2j+1) have opposite token channels, so it is also
// mean-free. Its output rows write channels [1, 1 + m) and nothing else
// writes there: embeddings, the other heads, the experts and the output head
// leave them alone (so the context does not steer which tokens are sampled).
// The routers read the token from the next m channels, which hold the
// embedding alone (no layer writes them): the other heads' outputs are
// moving averages too, and a router reading them would repeat more than the
// design says.
#pragma once
#include <cstdint>
#include <vector>

#include "experts/locality_model.h"  // topk_repeat_fraction, the window
#include "model/rope_router.h"       // RopeScaling

namespace ms {

struct LocalityDesign {
  double locality = 0;          // P asked for
  int ctx_channels = 0;         // m: residual channels [1, 1 + m) hold the context (head dims [0, m))
  int tok_channels = 0;         // the next ones hold only the token's embedding (what routers read of the token)
  std::vector<int> rope_dims;   // head dims (first of their NeoX pair) the context head's q and k use
  // q and k of the context head on each of those dims, after q/k norm where
  // the architecture has one (then as the norm's weight): the score's
  // amplitude, divided by the RoPE scaling's mscale, which multiplies both.
  float qk_norm_gain = 1;
  // The rms of the attention input at layer 0 (the constant channel, the
  // embedding): what the constant channel reads as after attn_norm, for
  // architectures whose q and k have no norm (q = w * that).
  double attn_input_rms = 1;
  float out_scale = 1;          // attn_output weight from head 0 dim j to channel 1 + j
  float router_ctx_std = 0;     // router weights on the context channels
  float router_tok_std = 0;     // router weights on the token channels (zero on the rest)
  // Routers of layers before the context head's (a hybrid's linear layers,
  // gpt-oss's first short-window layer) have no context to read: the token
  // part alone, with the whole logit variance.
  float router_tok_std_alone = 0;
  double rho = 0;               // share of the logit variance the context carries
  double ctx_lag1 = 0;          // correlation of the context with itself one token later
  double max_locality = 0;      // the largest P this shape reaches (rho = 1); 0 when P = 0
};

struct LocalityShape {
  int n_expert = 0, k = 0;
  double skew = 0;              // Zipf exponent of the static bias (it changes the overlap)
  int head_dim = 0, n_rot = 0;
  double rope_base = 0;
  RopeScaling rope_scaling;     // YaRN/linear: each pair's frequency and mscale as the model applies them
  int64_t n_embd = 0;
};

// Throws ms::Error when P is outside [0, 1], above what the shape can reach
// (the message names the limit), or the shape has no RoPE band for the window.
LocalityDesign design_router_locality(double P, const LocalityShape& s);

}  // namespace ms
