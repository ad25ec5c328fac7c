// Routing traces: which experts every MoE layer chose for every token, as a
// compact binary file (format in docs/traces.md). The engine writes them with
// TraceWriter (`--record-routes FILE`); `moestream sim` and `trace stats` read
// them with TraceReader. Traces are how residency policies are designed and
// tested without a GPU.
#pragma once
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace ms {

enum class Phase : uint8_t { Prompt = 0, Decode = 1 };

inline constexpr char kTraceMagic[8] = {'M', 'S', 'T', 'R', 'A', 'C', 'E', '\0'};
inline constexpr uint32_t kTraceVersion = 1;

// Flags of TraceHeader::flags.
inline constexpr uint32_t kTraceHasGateWeights = 1u << 0;   // k gate weights per record
inline constexpr uint32_t kTraceGateWeightsF32 = 1u << 1;   // stored as f32 (else f16)
inline constexpr uint32_t kTraceHasPredictions = 1u << 2;   // k_pred ids of router L+1 on layer L's state

struct TraceHeader {
  std::string model;           // model name (free text, <= 65535 bytes)
  std::string arch;            // architecture, e.g. "qwen3moe"
  std::string quant;           // quant type of the experts, e.g. "q4_K" ("" if unknown)
  uint32_t n_layer = 0;        // layers of the model (MoE or not)
  uint32_t n_expert = 0;       // routed experts per MoE layer
  uint32_t k = 0;              // experts chosen per token
  uint32_t k_pred = 0;         // predicted ids per record (0 = none)
  uint32_t flags = 0;
  // Bytes of one routed expert (gate+up+down) for each layer; 0 marks a layer
  // with no routed experts (dense), which has no records.
  std::vector<uint64_t> expert_bytes;

  bool has_gate_weights() const { return flags & kTraceHasGateWeights; }
  bool has_predictions() const { return flags & kTraceHasPredictions; }
  bool is_moe_layer(uint32_t layer) const { return layer < n_layer && expert_bytes[layer] > 0; }
  uint32_t moe_layer_count() const;
  uint64_t total_expert_bytes() const;  // all routed experts of all layers
  // Bytes of one record in the file for this header.
  size_t record_bytes() const;
  // Throws ms::Error when the header is inconsistent (k > n_expert, ...).
  void validate() const;
};

// One token's routing at one layer.
struct TraceRecord {
  Phase phase = Phase::Decode;
  uint32_t layer = 0;
  uint32_t seq = 0;        // sequence id (batched serving runs several)
  uint32_t pos = 0;        // token position in its sequence
  uint32_t step = 0;       // forward pass that computed it (one decode token, or a prompt batch)
  uint32_t first = 0;      // index into Trace::ids / weights (k entries)
  uint32_t pred_first = 0; // index into Trace::pred_ids (k_pred entries), when present
};

// A whole trace in memory.
struct Trace {
  TraceHeader header;
  std::vector<TraceRecord> records;   // in file order
  std::vector<uint16_t> ids;          // k per record
  std::vector<float> weights;         // k per record when the header has gate weights
  std::vector<uint16_t> pred_ids;     // k_pred per record when the header has predictions

  std::span<const uint16_t> ids_of(const TraceRecord& r) const { return {ids.data() + r.first, header.k}; }
  std::span<const float> weights_of(const TraceRecord& r) const {
    if (!header.has_gate_weights()) return {};
    return {weights.data() + r.first, header.k};
  }
  std::span<const uint16_t> predictions_of(const TraceRecord& r) const {
    if (!header.has_predictions()) return {};
    return {pred_ids.data() + r.pred_first, header.k_pred};
  }
  // Appends a record (used by the synthetic generator and tests); checks nothing.
  void add(Phase phase, uint32_t layer, uint32_t seq, uint32_t pos, uint32_t step,
           std::span<const uint16_t> expert_ids, std::span<const float> gate_weights = {},
           std::span<const uint16_t> predicted = {});
};

// Streams records to a file as the engine produces them. Call begin_step() at
// the start of each forward pass (one decode token, or a prompt batch); every
// record carries the current step so replay can group a batch's tokens.
class TraceWriter {
 public:
  // Opens (truncates) `path` and writes the header. Throws ms::Error.
  TraceWriter(const std::string& path, const TraceHeader& header);
  ~TraceWriter();  // closes; errors at close are swallowed (call close() to see them)
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  void begin_step() { ++step_; started_ = true; }
  uint32_t step() const { return step_; }

  // One token at one layer. `ids` must hold k distinct experts; `weights`
  // k gate weights when the header has them (else empty); `predicted_next`
  // k_pred ids when the header has predictions (else empty; the engine passes
  // the top-k of router L+1 applied to this layer's hidden state).
  void record_layer(uint32_t token_pos, uint32_t layer, Phase phase,
                    std::span<const uint16_t> ids, std::span<const float> weights,
                    std::span<const uint16_t> predicted_next = {}, uint32_t seq = 0);
  // A batch of n tokens at one layer: ids/weights are [n][k] row-major,
  // predicted [n][k_pred] (or empty), positions and seqs n entries (seqs may be
  // empty: all sequence 0).
  void record_batch(uint32_t layer, Phase phase, std::span<const uint32_t> positions,
                    std::span<const uint32_t> seqs, std::span<const uint16_t> ids,
                    std::span<const float> weights, std::span<const uint16_t> predicted_next = {});

  uint64_t records_written() const { return records_; }
  // Flushes and closes; throws ms::Error if the data could not be written.
  void close();

 private:
  void put(const void* data, size_t n);
  std::string path_;
  TraceHeader header_;
  std::FILE* file_ = nullptr;
  std::vector<uint8_t> buf_;
  uint32_t step_ = 0;
  bool started_ = false;
  uint64_t records_ = 0;
};

// Serialises a whole in-memory trace (same bytes TraceWriter would produce).
void write_trace(const std::string& path, const Trace& trace);

// Reads and validates a trace file; every problem (bad magic, truncated header
// or records, expert id out of range, duplicate ids, ...) is an ms::Error that
// names the file and the record.
Trace read_trace(const std::string& path);
// Same, from bytes in memory (`name` is used in messages).
Trace parse_trace(std::span<const uint8_t> bytes, const std::string& name);

}  // namespace ms
