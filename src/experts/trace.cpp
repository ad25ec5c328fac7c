#include "experts/trace.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "quant/half.h"
#include "util/error.h"

namespace ms {
namespace {

// Limits that keep a corrupt header from asking for absurd allocations.
constexpr uint32_t kMaxLayers = 4096;
constexpr uint32_t kMaxExperts = 65535;  // ids are u16
constexpr uint32_t kMaxK = 1024;
constexpr size_t kRecordFixedBytes = 16;  // phase, reserved, layer, seq, pos, step

void put_u16(std::vector<uint8_t>& b, uint16_t v) { b.push_back(v & 0xff); b.push_back(v >> 8); }
void put_u32(std::vector<uint8_t>& b, uint32_t v) { for (int i = 0; i < 4; ++i) b.push_back((v >> (8 * i)) & 0xff); }
void put_u64(std::vector<uint8_t>& b, uint64_t v) { for (int i = 0; i < 8; ++i) b.push_back((v >> (8 * i)) & 0xff); }
void put_f32(std::vector<uint8_t>& b, float f) { uint32_t v; std::memcpy(&v, &f, 4); put_u32(b, v); }
void put_str(std::vector<uint8_t>& b, const std::string& s, const char* what) {
  if (s.size() > 0xffff) throw Error(std::string("trace header: ") + what + " longer than 65535 bytes");
  put_u16(b, static_cast<uint16_t>(s.size()));
  b.insert(b.end(), s.begin(), s.end());
}

std::vector<uint8_t> encode_header(const TraceHeader& h) {
  h.validate();
  std::vector<uint8_t> b(kTraceMagic, kTraceMagic + 8);
  put_u32(b, kTraceVersion);
  put_u32(b, 0);  // header_bytes, patched below
  put_u32(b, h.flags);
  put_u32(b, h.n_layer);
  put_u32(b, h.n_expert);
  put_u32(b, h.k);
  put_u32(b, h.k_pred);
  put_str(b, h.model, "model name");
  put_str(b, h.arch, "arch");
  put_str(b, h.quant, "quant type");
  for (uint64_t e : h.expert_bytes) put_u64(b, e);
  const uint32_t n = static_cast<uint32_t>(b.size());
  for (int i = 0; i < 4; ++i) b[12 + i] = (n >> (8 * i)) & 0xff;
  return b;
}

// Checks one record's content against the header (shared by writer and reader
// so a writer never produces a file the reader refuses).
void check_record(const TraceHeader& h, uint32_t layer, uint8_t phase, std::span<const uint16_t> ids,
                  std::span<const float> weights, std::span<const uint16_t> pred, const std::string& where) {
  if (phase > 1) throw Error(where + ": phase " + std::to_string(phase) + " is neither prompt (0) nor decode (1)");
  if (layer >= h.n_layer) throw Error(where + ": layer " + std::to_string(layer) + " >= n_layer " + std::to_string(h.n_layer));
  if (h.expert_bytes[layer] == 0) throw Error(where + ": layer " + std::to_string(layer) + " has no routed experts (expert_bytes is 0)");
  if (ids.size() != h.k) throw Error(where + ": " + std::to_string(ids.size()) + " expert ids, header says k = " + std::to_string(h.k));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= h.n_expert) throw Error(where + ": expert id " + std::to_string(ids[i]) + " >= n_expert " + std::to_string(h.n_expert));
    for (size_t j = 0; j < i; ++j)
      if (ids[j] == ids[i]) throw Error(where + ": expert " + std::to_string(ids[i]) + " chosen twice");
  }
  if (h.has_gate_weights()) {
    if (weights.size() != h.k) throw Error(where + ": " + std::to_string(weights.size()) + " gate weights, header says k = " + std::to_string(h.k));
    for (float w : weights)
      if (!std::isfinite(w)) throw Error(where + ": gate weight is not finite");
  } else if (!weights.empty()) {
    throw Error(where + ": gate weights given but the trace header has no gate weights");
  }
  if (h.has_predictions()) {
    if (pred.size() != h.k_pred) throw Error(where + ": " + std::to_string(pred.size()) + " predicted ids, header says k_pred = " + std::to_string(h.k_pred));
    for (uint16_t p : pred)
      if (p >= h.n_expert) throw Error(where + ": predicted expert id " + std::to_string(p) + " >= n_expert");
  } else if (!pred.empty()) {
    throw Error(where + ": predictions given but the trace header has none");
  }
}

void encode_record(std::vector<uint8_t>& b, const TraceHeader& h, Phase phase, uint32_t layer, uint32_t seq,
                   uint32_t pos, uint32_t step, std::span<const uint16_t> ids, std::span<const float> weights,
                   std::span<const uint16_t> pred) {
  b.push_back(static_cast<uint8_t>(phase));
  b.push_back(0);
  put_u16(b, static_cast<uint16_t>(layer));
  put_u32(b, seq);
  put_u32(b, pos);
  put_u32(b, step);
  for (uint16_t id : ids) put_u16(b, id);
  if (h.has_gate_weights()) {
    for (float w : weights) {
      if (h.flags & kTraceGateWeightsF32) put_f32(b, w);
      else put_u16(b, f32_to_f16(w));
    }
  }
  for (uint16_t p : pred) put_u16(b, p);
}

// Bounds-checked little-endian reader over the file's bytes.
struct Cursor {
  std::span<const uint8_t> bytes;
  size_t at = 0;
  const std::string& name;
  void need(size_t n, const char* what) const {
    if (bytes.size() - at < n)
      throw Error(name + ": truncated trace: the file ends inside the " + what + " (offset " + std::to_string(at) +
                  ", " + std::to_string(bytes.size()) + " bytes); re-record it or check the copy");
  }
  uint16_t u16() { need(2, "header"); uint16_t v = bytes[at] | (bytes[at + 1] << 8); at += 2; return v; }
  uint32_t u32() {
    need(4, "header");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(bytes[at + i]) << (8 * i);
    at += 4;
    return v;
  }
  uint64_t u64() {
    need(8, "header");
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(bytes[at + i]) << (8 * i);
    at += 8;
    return v;
  }
  std::string str() {
    const uint16_t n = u16();
    need(n, "header");
    std::string s(reinterpret_cast<const char*>(bytes.data() + at), n);
    at += n;
    return s;
  }
};

uint16_t rd16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t rd32(const uint8_t* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24); }

}  // namespace

uint32_t TraceHeader::moe_layer_count() const {
  uint32_t n = 0;
  for (uint64_t e : expert_bytes) n += e > 0;
  return n;
}

uint64_t TraceHeader::total_expert_bytes() const {
  uint64_t t = 0;
  for (uint64_t e : expert_bytes) t += e * n_expert;
  return t;
}

size_t TraceHeader::record_bytes() const {
  size_t n = kRecordFixedBytes + 2 * size_t(k);
  if (has_gate_weights()) n += size_t(k) * ((flags & kTraceGateWeightsF32) ? 4 : 2);
  if (has_predictions()) n += 2 * size_t(k_pred);
  return n;
}

void TraceHeader::validate() const {
  const auto bad = [](const std::string& m) { return Error("trace header: " + m); };
  if (n_layer == 0 || n_layer > kMaxLayers) throw bad("n_layer " + std::to_string(n_layer) + " is not in 1.." + std::to_string(kMaxLayers));
  if (n_expert == 0 || n_expert > kMaxExperts) throw bad("n_expert " + std::to_string(n_expert) + " is not in 1..65535");
  if (k == 0 || k > n_expert || k > kMaxK) throw bad("k " + std::to_string(k) + " is not in 1..n_expert (" + std::to_string(n_expert) + ")");
  if (flags & ~(kTraceHasGateWeights | kTraceGateWeightsF32 | kTraceHasPredictions))
    throw bad("unknown flags 0x" + std::to_string(flags) + " (written by a newer moestream?)");
  if (has_predictions() != (k_pred > 0)) throw bad("k_pred must be > 0 exactly when the predictions flag is set");
  if (k_pred > n_expert) throw bad("k_pred " + std::to_string(k_pred) + " > n_expert");
  if (expert_bytes.size() != n_layer)
    throw bad(std::to_string(expert_bytes.size()) + " expert byte sizes for " + std::to_string(n_layer) + " layers");
  if (moe_layer_count() == 0) throw bad("no layer has routed experts (all expert byte sizes are 0)");
}

void Trace::add(Phase phase, uint32_t layer, uint32_t seq, uint32_t pos, uint32_t step,
                std::span<const uint16_t> expert_ids, std::span<const float> gate_weights,
                std::span<const uint16_t> predicted) {
  TraceRecord r;
  r.phase = phase;
  r.layer = layer;
  r.seq = seq;
  r.pos = pos;
  r.step = step;
  r.first = static_cast<uint32_t>(ids.size());
  r.pred_first = static_cast<uint32_t>(pred_ids.size());
  ids.insert(ids.end(), expert_ids.begin(), expert_ids.end());
  if (header.has_gate_weights()) {
    if (gate_weights.empty()) weights.insert(weights.end(), expert_ids.size(), 1.0f / expert_ids.size());
    else weights.insert(weights.end(), gate_weights.begin(), gate_weights.end());
  }
  pred_ids.insert(pred_ids.end(), predicted.begin(), predicted.end());
  records.push_back(r);
}

// ------------------------------------------------------------------ writer

TraceWriter::TraceWriter(const std::string& path, const TraceHeader& header) : path_(path), header_(header) {
  buf_ = encode_header(header_);
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) throw Error("cannot create trace file '" + path + "': " + std::strerror(errno));
  put(buf_.data(), buf_.size());
  buf_.clear();
}

TraceWriter::~TraceWriter() {
  try {
    close();
  } catch (...) {
  }
}

void TraceWriter::put(const void* data, size_t n) {
  if (std::fwrite(data, 1, n, file_) != n)
    throw Error("cannot write trace file '" + path_ + "': " + std::strerror(errno) + " (disk full?)");
}

void TraceWriter::record_layer(uint32_t token_pos, uint32_t layer, Phase phase, std::span<const uint16_t> ids,
                               std::span<const float> weights, std::span<const uint16_t> predicted_next,
                               uint32_t seq) {
  if (!file_) throw Error("trace '" + path_ + "': record after close()");
  check_record(header_, layer, static_cast<uint8_t>(phase), ids, weights, predicted_next,
               "trace '" + path_ + "' record " + std::to_string(records_));
  encode_record(buf_, header_, phase, layer, seq, token_pos, started_ ? step_ - 1 : 0, ids, weights, predicted_next);
  ++records_;
  if (buf_.size() >= (1u << 20)) {
    put(buf_.data(), buf_.size());
    buf_.clear();
  }
}

void TraceWriter::record_batch(uint32_t layer, Phase phase, std::span<const uint32_t> positions,
                               std::span<const uint32_t> seqs, std::span<const uint16_t> ids,
                               std::span<const float> weights, std::span<const uint16_t> predicted_next) {
  const size_t n = positions.size(), k = header_.k, kp = header_.k_pred;
  if (!seqs.empty() && seqs.size() != n) throw Error("trace '" + path_ + "': record_batch: seqs and positions differ in length");
  if (ids.size() != n * k) throw Error("trace '" + path_ + "': record_batch: ids must hold n*k entries");
  if (!weights.empty() && weights.size() != n * k) throw Error("trace '" + path_ + "': record_batch: weights must hold n*k entries");
  if (!predicted_next.empty() && predicted_next.size() != n * kp)
    throw Error("trace '" + path_ + "': record_batch: predictions must hold n*k_pred entries");
  for (size_t t = 0; t < n; ++t)
    record_layer(positions[t], layer, phase, ids.subspan(t * k, k),
                 weights.empty() ? std::span<const float>{} : weights.subspan(t * k, k),
                 predicted_next.empty() ? std::span<const uint16_t>{} : predicted_next.subspan(t * kp, kp),
                 seqs.empty() ? 0 : seqs[t]);
}

void TraceWriter::close() {
  if (!file_) return;
  std::FILE* f = file_;
  file_ = nullptr;
  bool ok = buf_.empty() || std::fwrite(buf_.data(), 1, buf_.size(), f) == buf_.size();
  buf_.clear();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) throw Error("cannot write trace file '" + path_ + "' (disk full?)");
}

void write_trace(const std::string& path, const Trace& trace) {
  // Same bytes as TraceWriter, but keeping the records' own step numbers.
  std::vector<uint8_t> b = encode_header(trace.header);
  b.reserve(b.size() + trace.records.size() * trace.header.record_bytes());
  for (size_t i = 0; i < trace.records.size(); ++i) {
    const TraceRecord& r = trace.records[i];
    check_record(trace.header, r.layer, static_cast<uint8_t>(r.phase), trace.ids_of(r), trace.weights_of(r),
                 trace.predictions_of(r), "trace '" + path + "' record " + std::to_string(i));
    encode_record(b, trace.header, r.phase, r.layer, r.seq, r.pos, r.step, trace.ids_of(r), trace.weights_of(r),
                  trace.predictions_of(r));
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error("cannot create trace file '" + path + "': " + std::strerror(errno));
  const bool ok = std::fwrite(b.data(), 1, b.size(), f) == b.size();
  if ((std::fclose(f) != 0) || !ok) throw Error("cannot write trace file '" + path + "' (disk full?)");
}

// ------------------------------------------------------------------ reader

Trace parse_trace(std::span<const uint8_t> bytes, const std::string& name) {
  Cursor c{bytes, 0, name};
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kTraceMagic, 8) != 0)
    throw Error(name + ": not a moestream routing trace (bad magic; expected a file written by --record-routes or `trace synth`)");
  c.at = 8;
  const uint32_t version = c.u32();
  if (version != kTraceVersion)
    throw Error(name + ": trace format version " + std::to_string(version) + " is not supported (this moestream reads version " +
                std::to_string(kTraceVersion) + ")");
  const uint32_t header_bytes = c.u32();
  Trace t;
  TraceHeader& h = t.header;
  h.flags = c.u32();
  h.n_layer = c.u32();
  h.n_expert = c.u32();
  h.k = c.u32();
  h.k_pred = c.u32();
  h.model = c.str();
  h.arch = c.str();
  h.quant = c.str();
  if (h.n_layer == 0 || h.n_layer > kMaxLayers)
    throw Error(name + ": trace header: n_layer " + std::to_string(h.n_layer) + " is not in 1.." + std::to_string(kMaxLayers));
  c.need(size_t(h.n_layer) * 8, "header");
  h.expert_bytes.resize(h.n_layer);
  for (auto& e : h.expert_bytes) e = c.u64();
  try {
    h.validate();
  } catch (const Error& e) {
    throw Error(name + ": " + e.what());
  }
  if (header_bytes != c.at)
    throw Error(name + ": trace header says it is " + std::to_string(header_bytes) + " bytes but holds " + std::to_string(c.at));

  const size_t rb = h.record_bytes();
  const size_t body = bytes.size() - c.at;
  if (body % rb != 0)
    throw Error(name + ": truncated trace: " + std::to_string(body) + " bytes of records is not a multiple of the " +
                std::to_string(rb) + "-byte record (the last record is incomplete; was the run killed?)");
  const size_t n = body / rb;
  t.records.reserve(n);
  t.ids.reserve(n * h.k);
  if (h.has_gate_weights()) t.weights.reserve(n * h.k);
  if (h.has_predictions()) t.pred_ids.reserve(n * h.k_pred);
  std::vector<uint16_t> ids(h.k), pred(h.k_pred);
  std::vector<float> w(h.has_gate_weights() ? h.k : 0);
  const bool f32 = h.flags & kTraceGateWeightsF32;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = bytes.data() + c.at + i * rb;
    const uint8_t phase = p[0];
    const uint32_t layer = rd16(p + 2);
    const uint32_t seq = rd32(p + 4), pos = rd32(p + 8), step = rd32(p + 12);
    p += kRecordFixedBytes;
    for (uint32_t j = 0; j < h.k; ++j, p += 2) ids[j] = rd16(p);
    for (size_t j = 0; j < w.size(); ++j) {
      if (f32) {
        const uint32_t v = rd32(p);
        std::memcpy(&w[j], &v, 4);
        p += 4;
      } else {
        w[j] = f16_to_f32(rd16(p));
        p += 2;
      }
    }
    for (uint32_t j = 0; j < h.k_pred; ++j, p += 2) pred[j] = rd16(p);
    check_record(h, layer, phase, ids, w, pred, name + ": record " + std::to_string(i));
    if (!t.records.empty() && step < t.records.back().step)
      throw Error(name + ": record " + std::to_string(i) + ": step " + std::to_string(step) +
                  " goes backwards (records must be in the order the engine computed them)");
    t.add(static_cast<Phase>(phase), layer, seq, pos, step, ids, w, pred);
  }
  return t;
}

Trace read_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open trace file '" + path + "': " + std::strerror(errno));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error("cannot read trace file '" + path + "'");
  return parse_trace(bytes, path);
}

}  // namespace ms
